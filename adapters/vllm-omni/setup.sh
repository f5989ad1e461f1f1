#!/usr/bin/env bash
# Builds the environment the vllm-omni adapter runs in, from the package
# registry alone:
#   - a venv (adapters/vllm-omni/.venv) with torch and numpy (PyPI's torch,
#     whose CUDA libraries are never loaded: everything runs on the CPU; the
#     shared pip cache makes this quick when another adapter installed the
#     same torch);
#   - the vllm-omni wheel of VLLM_OMNI_VERSION (default 0.30.0), fetched with
#     `pip download --no-deps`, from which only the AR-diffusion KV cache
#     sources (vllm_omni/experimental/ar_diffusion/kv_cache/*.py) and the
#     LingBot-World transformer (vllm_omni/diffusion/models/lingbot_world/
#     transformer.py, home of LingBotAttentionCache) are extracted into
#     adapters/vllm-omni/.vllm-omni/<version>/. The full package is never
#     installed: it needs vllm and a GPU stack. adapters/vllm-omni/loader.py
#     takes the cache code out of the extracted files.
# Idempotent: a step whose result is already there is skipped. Writes the
# marker adapters/vllm-omni/.vllm-omni/<version>/READY that the opt-in tests
# look for, and prints how long it took.
#
# Environment:
#   VLLM_OMNI_VERSION  vllm-omni release to extract (default 0.30.0)
#   TORCH_VERSION      torch release (default 2.15.0)
#   TORCH_INDEX        an index serving CPU torch wheels (default: PyPI)
#   PYTHON             interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${VLLM_OMNI_VERSION:-0.30.0}"
torch_version="${TORCH_VERSION:-2.15.0}"
venv="$here/.venv"
dest="$here/.vllm-omni/$version"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
torch_venv "$venv" "$torch_version"

if [ ! -f "$dest/READY" ]; then
    kit_wheel "$here/.vllm-omni/wheels" vllm-omni "$version"
    echo "setup: extracting the KV cache sources of $(basename "$wheel")"
    rm -rf "$dest"
    mkdir -p "$dest"
    trap 'rm -rf "$dest"' ERR
    "$vpy" - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "vllm_omni/experimental/ar_diffusion/kv_cache/"
lingbot = "vllm_omni/diffusion/models/lingbot_world/transformer.py"
with zipfile.ZipFile(wheel) as zf:
    all_names = zf.namelist()
    names = [n for n in all_names if n.startswith(prefix) and n.endswith(".py")]
    if lingbot not in all_names:
        sys.exit(f"setup: {wheel} ships no {lingbot}")
    names.append(lingbot)
    for name in names:
        zf.extract(name, dest)
        print("  " + name)
PY
    "$vpy" -c 'import torch; print(torch.__version__)' > "$dest/TORCH_VERSION"
    echo "$version" > "$dest/READY"
fi

echo "setup: vllm-omni $version ready in $dest ($(kit_elapsed) s)"
