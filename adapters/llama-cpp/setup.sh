#!/usr/bin/env bash
# Builds the environment the llama.cpp adapter runs in, from the package
# registry alone: a venv (adapters/llama-cpp/.venv, or $VENV) with numpy,
# gguf (the writer of the tiny test models) and llama-cpp-python compiled
# from its sdist for the CPU only (no CUDA, Metal, Vulkan, BLAS, OpenMP;
# no mtmd/llava library; only the `llama` target and the ggml libraries it
# links, not the `common` helper library, which the bindings never load).
# No torch.
#
# The compile is the slow part: on two shared cores with two jobs it took
# about 15 minutes (see docs/llama-cpp.md); every run prints how long it
# took. The CMake build tree is kept under $VENV/llama-cpp-build so an
# interrupted build resumes.
#
# A patched library instead of the release:
#   LLAMA_CPP_PATCH=fix.diff  the sdist's vendored llama.cpp with the diff
#                             applied before compiling (paths as in the
#                             llama.cpp repository, a/src/llama-kv-cache.cpp)
#   LLAMA_CPP_SRC=checkout    a llama.cpp checkout compiled in place of the
#                             vendored copy (the bindings stay 0.3.36's)
# The marker records which, and a later run with other settings rebuilds.
#
# Idempotent: when the marker matches, nothing is done. Writes the marker
# $VENV/KVCHECK_LLAMA_CPP_READY (what is installed) that the opt-in tests
# look for.
#
# Environment:
#   LLAMA_CPP_PYTHON_VERSION  llama-cpp-python release (default 0.3.36)
#   GGUF_VERSION              gguf release (default 0.19.0)
#   LLAMA_CPP_PATCH           a diff for the vendored llama.cpp (optional)
#   LLAMA_CPP_SRC             a llama.cpp checkout to build instead (optional)
#   BUILD_JOBS                parallel compile jobs (default 2)
#   VENV                      the venv to build or reuse (default adapters/llama-cpp/.venv)
#   PYTHON                    interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
gguf_version="${GGUF_VERSION:-0.19.0}"
venv="${VENV:-$here/.venv}"
patch_file="${LLAMA_CPP_PATCH:-}"
src="${LLAMA_CPP_SRC:-}"
jobs="${BUILD_JOBS:-2}"
marker="$venv/KVCHECK_LLAMA_CPP_READY"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive LLAMA_CPP
kit_venv "$venv"
venv="$(cd "$venv" && pwd)"
marker="$venv/KVCHECK_LLAMA_CPP_READY"

# What this run wants installed, as the marker records it.
if [ -n "$src" ]; then
    kit_src
    want="source: llama-cpp-python $version with llama.cpp checkout $src $src_commit"
else
    kit_patch
    want="source: llama-cpp-python $version$patch_tag"
fi

if ! kit_stale "$marker"; then
    echo "setup: llama.cpp environment already ready in $venv:"
    kit_show "$marker"
    exit 0
fi

echo "setup: installing numpy and gguf $gguf_version"
"$vpy" -m pip install --quiet numpy "gguf==$gguf_version"

build="$venv/llama-cpp-build"
mkdir -p "$build"
sdist="$build/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    echo "setup: downloading the llama-cpp-python $version sdist"
    "$vpy" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$version" -d "$build"
fi

# The wanted sources are assembled in a fresh directory (the sdist, the
# patch or the checkout, the build-configuration edit below), then synced
# into the tree that was compiled last (kit_sync), so ninja recompiles
# exactly what changed.
tree="$build/llama_cpp_python-$version"
wanted="$build/wanted"
rm -rf "$wanted"
mkdir -p "$wanted"
tar -xzf "$sdist" -C "$wanted"
next="$wanted/llama_cpp_python-$version"
if [ -n "$patch_file" ]; then
    kit_apply "$next/vendor/llama.cpp" 1 "the vendored llama.cpp"
elif [ -n "$src" ]; then
    echo "setup: building llama.cpp from $src"
    rm -rf "$next/vendor/llama.cpp"
    mkdir "$next/vendor/llama.cpp"
    (cd "$src" && tar --exclude=.git -cf - .) | tar -xf - -C "$next/vendor/llama.cpp"
fi

# The bindings' CMakeLists forces llama.cpp's `common` library on (only the
# mtmd library, left out here, links it); llama.cpp then installs it, so it
# would have to be compiled (52 more files). Let -DLLAMA_BUILD_COMMON=OFF
# through instead. This edits the build configuration only, no source.
force='set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)'
if grep -qF "$force" "$next/CMakeLists.txt"; then
    sed -i "s/$force/set(LLAMA_BUILD_COMMON ON CACHE BOOL \"Build llama.cpp common library\")/" "$next/CMakeLists.txt"
fi

kit_sync "$next" "$tree"
rm -rf "$wanted"

echo "setup: compiling llama-cpp-python $version for the CPU ($jobs jobs)"
compile_started=$(date +%s)
# GGML_NATIVE stays on (the library only runs on this machine). Only the
# `llama` target is built (it pulls the ggml libraries).
CMAKE_ARGS="-DLLAVA_BUILD=OFF \
-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_HIP=OFF \
-DGGML_SYCL=OFF -DGGML_OPENCL=OFF -DGGML_RPC=OFF -DGGML_BLAS=OFF \
-DGGML_OPENMP=OFF -DGGML_BACKEND_DL=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
    nice -n 10 "$vpy" -m pip install --quiet --force-reinstall --no-cache-dir \
    -C build-dir="$build/cmake" -C build.targets=llama "$tree"
compile_s=$(( $(date +%s) - compile_started ))
# The sdist has no git metadata; its CHANGELOG names the llama.cpp commit
# the release vendors.
vendored="$(sed -n "/^## \[$version\]/,/^## \[/p" "$tree/CHANGELOG.md" | grep -o 'llama.cpp@[0-9a-f]*' | head -n1)"

marker_lines() {
    echo "$want"
    kit_versions " " --all llama_cpp_python gguf numpy
    echo "vendored ${vendored:-unknown} (the release's CHANGELOG)"
    echo "compile_s $compile_s"
}
kit_write "$marker" marker_lines
kit_ready llama.cpp "$marker" ", compile $compile_s s"
