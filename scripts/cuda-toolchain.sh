#!/usr/bin/env bash
# Installs, under target/cuda-toolchain, the CUDA 13.0 build toolchain that
# `cargo build -p kvcache --features cuda` needs, from PyPI wheels only:
#
#   nvcc + crt + nvvm + cccl  compile candle-kernels' .cu files (PTX and libmoe.a)
#   cuda-runtime              cudart (libmoe.a links it) and the CUDA headers
#   nvrtc, cublas, curand     the libraries cudarc links with `dynamic-linking`
#   libcuda.so stub           the driver is not a wheel: a stub exporting every
#                             driver symbol cudarc can reference lets the linker
#                             finish; at run time the real driver's libcuda.so.1
#                             is loaded instead (the stub's soname is the same).
#
# The versions are pinned to the CUDA 13.0 line, the one the GPU machines'
# driver runs. Idempotent: a second run with the same pins does nothing and
# only prints the environment. Usage:
#
#   eval "$(scripts/cuda-toolchain.sh --env)"   # install if needed, export env
#   scripts/cuda-toolchain.sh                   # install if needed, print env
set -euo pipefail

started=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
home="$repo/target/cuda-toolchain"
site="$home/site"
root="$site/nvidia/cu13"
stamp="$home/.installed"

pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)

env_only=false
[[ "${1:-}" == "--env" ]] && env_only=true
say() { if $env_only; then echo "$*" >&2; else echo "$*"; fi; }

if [[ -f "$stamp" && "$(cat "$stamp")" == "${pins[*]}" ]]; then
  say "cuda-toolchain: already installed (${pins[*]})"
else
  say "cuda-toolchain: installing ${pins[*]} into $site"
  rm -rf "$site"
  mkdir -p "$home/wheels"
  pip download --quiet --no-deps -d "$home/wheels" "${pins[@]}" >&2
  pip install --quiet --root-user-action=ignore --no-deps --no-index --find-links "$home/wheels" \
    --target "$site" "${pins[@]}" >&2

  # The wheels ship versioned sonames only; the linker looks for lib<name>.so.
  for lib in "$root"/lib/lib*.so.*; do
    base=$(basename "$lib")
    plain="${base%%.so.*}.so"
    [[ -e "$root/lib/$plain" ]] || ln -s "$base" "$root/lib/$plain"
  done

  # Driver stub: every symbol cudarc's driver bindings can reference.
  cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* 2>/dev/null | sort | tail -n1)
  if [[ -z "$cudarc" ]]; then
    (cd "$repo" && cargo fetch >&2)
    cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* | sort | tail -n1)
  fi
  mkdir -p "$root/lib/stubs"
  grep -oE 'load::<_F>\("cu[A-Za-z0-9_]+"\)' "$cudarc/src/driver/sys/mod.rs" |
    sed -E 's/.*\("([A-Za-z0-9_]+)"\)/int \1(void) { return 999; }/' | sort -u \
    >"$root/lib/stubs/cuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" \
    "$root/lib/stubs/cuda_stub.c"
  echo "${pins[*]}" >"$stamp"
fi

env_lines=(
  "export CUDA_ROOT='$root'"
  "export CUDA_PATH='$root'"
  "export CUDA_HOME='$root'"
  "export PATH='$root/bin':\"\$PATH\""
  "export LIBRARY_PATH='$root/lib:$root/lib/stubs':\"\${LIBRARY_PATH:-}\""
  "export LD_LIBRARY_PATH='$root/lib':\"\${LD_LIBRARY_PATH:-}\""
  "export CUDA_COMPUTE_CAP=90"
)
printf '%s\n' "${env_lines[@]}"
say "cuda-toolchain: nvcc $("$root/bin/nvcc" --version | sed -n 4p)"
say "cuda-toolchain: took $(($(date +%s) - started)) s"
