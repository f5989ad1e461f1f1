#!/usr/bin/env bash
# Builds the environment the sglang adapter runs in, from the package
# registry alone:
#   - a venv (adapters/sglang/.venv) with CPU torch and numpy;
#   - the sglang wheel of SGLANG_VERSION (default 0.5.23), fetched with
#     `pip download --no-deps`, from which only the kvcache sources
#     (sglang/multimodal_gen/runtime/layers/kvcache/) and the QVG cache's
#     settings dataclass (sglang/multimodal_gen/configs/quantization/qvg_kv.py)
#     are extracted into adapters/sglang/.sglang/<version>/ ; the full package
#     is never installed (it does not import without a GPU stack), and
#     adapters/sglang/loader.py imports the extracted files alone.
#
# A patched library instead of the release:
#   SGLANG_PATCH=fix.diff  the release's sources, then the diff applied to
#                          them (paths as in the sglang repository,
#                          a/python/sglang/...), extracted into
#                          adapters/sglang/.sglang/<version>+patched/
#   SGLANG_SRC=checkout    the same sources copied from an sglang checkout,
#                          into adapters/sglang/.sglang/checkout/
# The subject then runs with `--version <version>+patched` (or `--version
# checkout`); the release's own folder stays as it was, so the replay of
# tests/external/sglang keeps checking the release. Each folder's READY
# records its source, and a later run with other settings extracts again.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker adapters/sglang/.sglang/<version>/READY that the opt-in tests and
# scripts/sglang-findings.sh look for, and prints how long it took.
#
# Environment:
#   SGLANG_VERSION   sglang release to extract (default 0.5.23)
#   SGLANG_PATCH     a diff to apply to the extracted release (optional)
#   SGLANG_SRC       an sglang checkout to take the sources from instead (optional)
#   VENV             the venv to build or reuse (default adapters/sglang/.venv;
#                    the subject runs with that venv's python)
#   TORCH_INDEX      an index serving CPU torch wheels, used beside the
#                    default registry when it answers (default: none, the
#                    registry's torch, which brings CUDA libraries unused here)
#   PYTHON           interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${SGLANG_VERSION:-0.5.23}"
venv="${VENV:-$here/.venv}"
patch_file="${SGLANG_PATCH:-}"
src="${SGLANG_SRC:-}"
dest="$here/.sglang/$version"
# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive SGLANG
# What the folder's READY records: the release's holds its version alone.
want="$version"
if [ -n "$src" ]; then
    kit_src
    dest="$here/.sglang/checkout"
    want="checkout
source: checkout $src $src_commit"
elif [ -n "$patch_file" ]; then
    kit_patch
    dest="$here/.sglang/$version+patched"
    want="$version+patched
source: release $version$patch_tag"
fi
torch_index="${TORCH_INDEX:-}"

kit_venv "$venv"

if ! "$vpy" -c 'import torch, numpy' 2>/dev/null; then
    echo "setup: installing CPU torch and numpy"
    # A CPU wheel index keeps the venv small (no CUDA libraries); where none
    # is given or it cannot be reached, the registry's torch works the same
    # on the CPU.
    if [ -n "$torch_index" ] && ! "$vpy" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15)' "$torch_index/torch/" 2>/dev/null; then
        echo "setup: $torch_index unreachable, using the registry's torch"
        torch_index=
    fi
    if [ -z "$torch_index" ]; then
        "$vpy" -m pip install --quiet torch numpy
    else
        # An extra index: pip's default registry stays the first, and the
        # CPU build (torch==V+cpu) outranks the CUDA one there.
        "$vpy" -m pip install --quiet --extra-index-url "$torch_index" torch numpy
    fi
fi

if [ "$(cat "$dest/READY" 2>/dev/null)" != "$want" ] && [ -n "$src" ]; then
    echo "setup: copying the kvcache sources of $src"
    rm -rf "$dest"
    mkdir -p "$dest"
    trap 'rm -rf "$dest"' ERR
    "$vpy" - "$src/python" "$dest" <<'PY'
import os, shutil, sys
tree, dest = sys.argv[1], sys.argv[2]
prefix = os.path.join("sglang", "multimodal_gen", "runtime", "layers", "kvcache")
names = [os.path.join(prefix, n) for n in sorted(os.listdir(os.path.join(tree, prefix))) if n.endswith(".py")]
config = os.path.join("sglang", "multimodal_gen", "configs", "quantization", "qvg_kv.py")
names += [config] if os.path.isfile(os.path.join(tree, config)) else []
for name in names:
    os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
    shutil.copyfile(os.path.join(tree, name), os.path.join(dest, name))
    print("  " + name)
PY
    "$vpy" -c 'import torch; print(torch.__version__)' > "$dest/TORCH_VERSION"
    echo "$want" > "$dest/READY"
fi

if [ "$(cat "$dest/READY" 2>/dev/null)" != "$want" ]; then
    kit_wheel "$here/.sglang/wheels" sglang "$version"
    echo "setup: extracting the kvcache sources of $(basename "$wheel")"
    rm -rf "$dest"
    mkdir -p "$dest"
    # A release that ships no kvcache sources leaves nothing behind.
    trap 'rm -rf "$dest"' ERR
    "$vpy" - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "sglang/multimodal_gen/runtime/layers/kvcache/"
# The QVG cache's quantization settings: a standard-library dataclass that
# qvg_packed_cache.py imports (absent from releases without the QVG cache).
config = "sglang/multimodal_gen/configs/quantization/qvg_kv.py"
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith(prefix) and n.endswith(".py")]
    if not names:
        sys.exit(f"setup: {wheel} ships no {prefix}")
    names += [n for n in zf.namelist() if n == config]
    for name in names:
        zf.extract(name, dest)
        print("  " + name)
PY
    if [ -n "$patch_file" ]; then
        # a/python/sglang/... -> sglang/... under the extracted tree
        kit_apply "$dest" 2
    fi
    "$vpy" -c 'import torch; print(torch.__version__)' > "$dest/TORCH_VERSION"
    echo "$want" > "$dest/READY"
fi

echo "setup: sglang $(head -n1 "$dest/READY") ready in $dest ($(kit_elapsed) s)"
