#!/usr/bin/env bash
# Builds the environment of the sglang prefix-cache subject
# (adapters/sglang-radix/subject.py), from the package registry alone:
#
#   - a venv (adapters/sglang-radix/.venv, or $VENV) with this checkout's
#     python/ on its path (kvcheck-checkout.pth);
#   - torch: the CPU-runnable torch of another venv reused through a .pth
#     line (TORCH_FROM, default adapters/kvpress/.venv: its site-packages
#     directory is appended to sys.path after this venv's own, so a package
#     installed here wins), else the registry's torch installed here;
#   - the sglang wheel of SGLANG_VERSION (default 0.5.23) installed whole with
#     `pip install --no-deps`: the real package, `import sglang` and all;
#   - of sglang's dependencies only those its scheduler modules import
#     (sglang.srt.managers.schedule_batch, schedule_policy, mem_cache.*,
#     server_args and runtime_context), at sglang's pins where it pins them.
#     Its GPU dependencies (sglang-kernel, flashinfer, flash-attn, deep-ep,
#     cutlass, ...) are not installed: nothing the subject runs imports them.
#     Three are installed without their own dependencies because those would
#     replace torch: compressed-tensors, transformers (sglang's pin, 5.19.0)
#     and torchvision 0.29.2 (imported by sglang's multimodal utilities at
#     import time, never called; built for torch 2.14).
#
# Nothing of sglang is stubbed or extracted: the subject imports the
# installed package. It runs the paths sglang takes without Triton and with
# the `torch_native` attention backend (`--device cpu`): the paged
# allocator's torch versions and the per-request row writes.
#
# A patched library instead of the release:
#   SGLANG_RADIX_PATCH=fix.diff  the release, then the diff applied to the
#                                installed package (paths as in sglang's
#                                repository, a/python/sglang/...).
#
# Idempotent: when the marker $VENV/KVCHECK_SGLANG_RADIX_READY records what
# is wanted (the release and the patch), nothing is done; other settings
# reinstall the release (pristine files first) and patch it again. The
# subject's opt-in tests look for the marker.
#
# Environment:
#   SGLANG_VERSION      the sglang release (default 0.5.23)
#   SGLANG_RADIX_PATCH  a diff to apply to the installed release (optional)
#   TORCH_FROM          a venv whose torch to reuse (default adapters/kvpress/.venv;
#                       "none": install the registry's torch here)
#   VENV                the venv to build or reuse (default adapters/sglang-radix/.venv)
#   PYTHON              interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${SGLANG_VERSION:-0.5.23}"
venv="${VENV:-$here/.venv}"
patch_file="${SGLANG_RADIX_PATCH:-}"
torch_from="${TORCH_FROM:-$here/../kvpress/.venv}"
if [ -n "$patch_file" ] && [ ! -f "$patch_file" ]; then
    echo "setup: SGLANG_RADIX_PATCH=$patch_file is not a file" >&2
    exit 2
fi

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_venv "$venv"
venv="$(cd "$venv" && pwd)"
marker="$venv/KVCHECK_SGLANG_RADIX_READY"
src=""
kit_release_want "$version"

if ! kit_stale "$marker"; then
    echo "setup: sglang radix-cache environment already ready in $venv:"
    kit_show "$marker"
    exit 0
fi

site="$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# torch, reused from another venv of the same Python when it has one.
rm -f "$site/kvcheck-torch-from.pth"
if [ "$torch_from" != "none" ] && [ -x "$torch_from/bin/python" ]; then
    torch_from="$(cd "$torch_from" && pwd)"
    other="$("$torch_from/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    if [ "$("$torch_from/bin/python" -c 'import sys; print(sys.version_info[:2])')" = \
         "$("$vpy" -c 'import sys; print(sys.version_info[:2])')" ] && [ -d "$other/torch" ]; then
        echo "setup: reusing the torch of $torch_from ($other)"
        echo "$other" > "$site/kvcheck-torch-from.pth"
    fi
fi
if ! "$vpy" -c 'import torch, numpy' 2>/dev/null; then
    echo "setup: installing the registry's torch and numpy"
    "$vpy" -m pip install --quiet torch numpy
fi

echo "setup: installing sglang $version (the wheel alone, no dependencies)"
"$vpy" -m pip install --quiet --force-reinstall --no-deps "sglang==$version"
if [ -n "$patch_file" ]; then
    kit_patch_site sglang 2
fi

echo "setup: installing the dependencies sglang's scheduler modules import"
# What `import sglang.srt.managers.schedule_batch` (and the rest the subject
# imports) needs on the CPU; the pins are sglang 0.5.23's.
"$vpy" -m pip install --quiet \
    msgspec orjson pybase64 pillow starlette fastapi uvicorn aiohttp setproctitle \
    einops partial-json-parser distro sniffio jiter gguf pyzmq ipython loguru \
    requests pydantic psutil packaging pyyaml regex tqdm safetensors huggingface_hub \
    "sentencepiece==0.2.1" "apache-tvm-ffi==0.1.11" "openai==2.8.0" "tokenizers==0.23.2"
# Their own dependencies would bring another torch.
"$vpy" -m pip install --quiet --no-deps \
    "compressed-tensors==0.18.0" "transformers==5.19.0" "torchvision==0.29.2"

echo "setup: checking that sglang's scheduler, radix cache and allocators answer on the CPU"
"$vpy" "$here/driver.py" --check

kit_marker "$marker" --all sglang torch numpy transformers
kit_ready "sglang radix-cache" "$marker"
du -sh "$venv" | sed 's/^/setup: venv size /'
