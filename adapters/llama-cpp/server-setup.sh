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
