#!/usr/bin/env bash
# Builds the environment of the llama-server front door
# (adapters/llama-cpp/server_subject.py): a venv (adapters/llama-cpp/.venv-server,
# or $VENV) with numpy and gguf (the writer of the tiny test models), and a
# `llama-server` at $VENV/bin/llama-server.
#
# Which llama-server:
#   LLAMA_SERVER=path   a llama-server you built or installed (any current
#                       build of llama.cpp, a patched one included): the
#                       venv's llama-server runs it.
#   LLAMA_SERVER_PATCH=fix.diff
#                       llama-server compiled here (CMake and Ninja from
#                       the package registry, CPU only) from a llama.cpp
#                       source tree, with the diff applied (paths as in
#                       the llama.cpp repository, a/src/llama-kv-cache.cpp);
#                       LLAMA_SERVER_PATCH=none compiles it unpatched. The
#                       tree comes from LLAMA_CPP_FROM:
#                         xllamacpp (default): the llama.cpp that the
#                           xllamacpp $XLLAMACPP_VERSION sdist vendors
#                           (thirdparty/llama.cpp, the newest on the
#                           package registry: 0.6.0-dev, build 11549);
#                         llama-cpp-python: the llama.cpp that the
#                           llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist
#                           vendors (0.5.0-dev, 0c1e57098).
#                       Each source keeps its build tree, so another patch
#                       recompiles only what it changes (about 16 minutes
#                       on two cores the first time).
#   otherwise           Debian's llama.cpp-tools package of $DEBIAN_SUITE
#                       (default unstable, the newest upstream release
#                       Debian ships) with the runtime libraries it needs
#                       from the same suite (glibc, libstdc++, ggml, libllama,
#                       OpenSSL), downloaded with apt-get from the mirror
#                       this machine's apt sources name and unpacked under
#                       $VENV/llama-server-root; nothing is installed on the
#                       system. The venv's llama-server runs it through that
#                       suite's own dynamic loader.
#
# Idempotent: when the marker $VENV/KVCHECK_LLAMA_SERVER_READY matches what
# is wanted, nothing is done. The marker names the server's version line.
#
# Environment:
#   LLAMA_SERVER   a llama-server binary to use (optional)
#   LLAMA_SERVER_PATCH  a diff for the vendored llama.cpp, or none (optional)
#   LLAMA_CPP_FROM xllamacpp or llama-cpp-python: the sdist whose llama.cpp
#                  a patched build compiles (default xllamacpp)
#   XLLAMACPP_VERSION  the xllamacpp sdist (default 2026.10.11549)
#   LLAMA_CPP_PYTHON_VERSION  the sdist that vendors it (default 0.3.36)
#   BUILD_JOBS     parallel compile jobs (default 2)
#   DEBIAN_SUITE   the Debian suite to take llama.cpp-tools from (default unstable)
#   GGUF_VERSION   gguf release (default 0.19.0)
#   VENV           the venv to build or reuse (default adapters/llama-cpp/.venv-server)
#   PYTHON         interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gguf_version="${GGUF_VERSION:-0.19.0}"
suite="${DEBIAN_SUITE:-unstable}"
venv="${VENV:-$here/.venv-server}"
server="${LLAMA_SERVER:-}"
patch_file="${LLAMA_SERVER_PATCH:-}"
sdist_version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
source_from="${LLAMA_CPP_FROM:-xllamacpp}"
case "$source_from" in
    # The sdist, its version, and where it keeps llama.cpp.
    xllamacpp) sdist_version="${XLLAMACPP_VERSION:-2026.10.11549}" vendored=thirdparty/llama.cpp ;;
    llama-cpp-python) vendored=vendor/llama.cpp ;;
    *)
        echo "setup: LLAMA_CPP_FROM=$source_from: expected xllamacpp or llama-cpp-python" >&2
        exit 2
        ;;
esac
source_name="$source_from $sdist_version's llama.cpp"
jobs="${BUILD_JOBS:-2}"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_venv "$venv"
venv="$(cd "$venv" && pwd)"
marker="$venv/KVCHECK_LLAMA_SERVER_READY"

if [ -n "$server" ]; then
    server="$(cd "$(dirname "$server")" && pwd)/$(basename "$server")"
    if [ ! -x "$server" ]; then
        echo "setup: LLAMA_SERVER=$server is not an executable file" >&2
        exit 2
    fi
    want="server: $server"
elif [ -n "$patch_file" ]; then
    if [ "$patch_file" = none ]; then
        patch_file="" patch_tag=""
    else
        kit_patch
    fi
    want="server: built from $source_name$patch_tag"
else
    want="server: debian $suite llama.cpp-tools"
fi

if ! kit_stale "$marker"; then
    echo "setup: llama-server environment already ready in $venv:"
    kit_show "$marker"
    exit 0
fi

echo "setup: installing numpy and gguf $gguf_version"
"$vpy" -m pip install --quiet numpy "gguf==$gguf_version"

mkdir -p "$venv/bin"
launcher="$venv/bin/llama-server"
if [ -n "$server" ]; then
    printf '#!/bin/sh\nexec %q "$@"\n' "$server" >"$launcher.tmp"
elif [[ "$want" == "server: built from"* ]]; then
    echo "setup: installing cmake and ninja"
    "$vpy" -m pip install --quiet cmake ninja
    build="$venv/llama-server-build"
    [ "$source_from" = llama-cpp-python ] || build="$venv/llama-server-build-$source_from"
    mkdir -p "$build"
    wanted="$build/wanted"
    rm -rf "$wanted"
    mkdir -p "$wanted"
    dist="${source_from//-/_}-$sdist_version"
    sdist="$build/$dist.tar.gz"
    if [ ! -f "$sdist" ]; then
        echo "setup: downloading the $source_from $sdist_version sdist"
        "$vpy" -m pip download --quiet --no-deps --no-binary "$source_from" \
            "$source_from==$sdist_version" -d "$build"
    fi
    tar -xzf "$sdist" -C "$wanted" "$dist/$vendored"
    next="$wanted/$dist/$vendored"
    # A submodule's pointer to a git directory the sdist does not hold.
    rm -f "$next/.git"
    if [ -n "$patch_file" ]; then
        kit_apply "$next" 1 "the llama.cpp source"
    fi
    kit_sync "$next" "$build/llama.cpp"
    rm -rf "$wanted"
    echo "setup: compiling llama-server for the CPU ($jobs jobs)"
    compile_started=$(date +%s)
    PATH="$venv/bin:$PATH" cmake -S "$build/llama.cpp" -B "$build/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
        -DGGML_OPENMP=OFF -DGGML_RPC=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DBUILD_SHARED_LIBS=OFF >"$build/cmake.log"
    PATH="$venv/bin:$PATH" nice -n 10 cmake --build "$build/cmake" --target llama-server -j "$jobs" >"$build/build.log"
    echo "setup: compiled in $(( $(date +%s) - compile_started )) s"
    printf '#!/bin/sh\nexec %q "$@"\n' "$build/cmake/bin/llama-server" >"$launcher.tmp"
else
    if ! command -v apt-get >/dev/null; then
        echo "setup: no apt-get here to fetch Debian's llama-server: set LLAMA_SERVER to a llama-server binary" >&2
        exit 2
    fi
    # The mirror of this machine's own Debian sources, with the suite
    # swapped; apt-get verifies the suite's signature with the system
    # keyring, in directories of its own (no system state changes).
    uri="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
    if [ -z "$uri" ]; then
        uri="$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
    fi
    if [ -z "$uri" ]; then
        echo "setup: no Debian mirror in this machine's apt sources: set LLAMA_SERVER to a llama-server binary" >&2
        exit 2
    fi
    apt="$venv/apt-$suite"
    rm -rf "$apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources" "$apt/debs"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$uri" "$suite" >"$apt/sources/$suite.sources"
    options=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=/dev/null"
        -o "APT::Sandbox::User=root")
    echo "setup: fetching the $suite package lists"
    apt-get "${options[@]}" -qq update
    # llama.cpp-tools and what its binaries load at run time (Debian's
    # dependencies, less the configuration packages they never read).
    packages=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64)
    echo "setup: downloading ${packages[*]} ($suite)"
    (cd "$apt/debs" && apt-get "${options[@]}" -qq download "${packages[@]}")
    root="$venv/llama-server-root"
    rm -rf "$root"
    mkdir -p "$root"
    for deb in "$apt/debs"/*.deb; do
        data="$(ar t "$deb" | grep '^data\.tar')"
        case "$data" in
            *.zst) ar p "$deb" "$data" | zstd -dc | tar -xf - -C "$root" ;;
            *.xz) ar p "$deb" "$data" | tar -xJf - -C "$root" ;;
            *) ar p "$deb" "$data" | tar -xf - -C "$root" ;;
        esac
    done
    rm -rf "$apt"
    lib="$root/usr/lib/x86_64-linux-gnu"
    # The suite's loader runs the binary against the suite's glibc. ggml
    # looks for its CPU backends (one per instruction set, the best one
    # picked at start-up) beside the executable, which is the loader here,
    # and in the working directory: the server starts in the backends'
    # directory, so paths given to it must be absolute (the subject's are).
    cat >"$launcher.tmp" <<EOF
#!/bin/sh
cd "$lib/ggml/backends0" || exit 127
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:$lib/llama" "$root/usr/bin/llama-server" "\$@"
EOF
fi
chmod +x "$launcher.tmp"
mv "$launcher.tmp" "$launcher"

version="$("$launcher" --version 2>&1 | grep -m1 '^version' || true)"
if [ -z "$version" ]; then
    echo "setup: $launcher does not run:" >&2
    "$launcher" --version >&2 || true
    exit 1
fi

marker_lines() {
    echo "$want"
    echo "llama-server $version"
    kit_versions " " --all gguf numpy
}
kit_write "$marker" marker_lines
kit_ready llama-server "$marker"
