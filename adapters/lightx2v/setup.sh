#!/usr/bin/env bash
# Builds the environment the LightX2V adapter runs in: a venv
# (adapters/lightx2v/.venv, or $VENV) with torch, numpy and packaging from
# the package registry, and a copy of a LightX2V checkout that the adapter
# imports. LightX2V is not on PyPI (`pip index versions lightx2v` finds
# nothing): LIGHTX2V_SRC names a checkout of github.com/ModelTC/LightX2V,
# and its commit is recorded in the marker.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small one, or VENV to a venv that already has torch.
#
# A patched LightX2V:
#   LIGHTX2V_PATCH=fix.diff   the diff is applied to the copy (paths as in
#                             the LightX2V repository, a/lightx2v/...)
# The marker records which, and a later run with other settings copies again.
#
# Idempotent. Writes the marker $VENV/KVCHECK_LIGHTX2V_READY (where the copy
# is, its commit, the installed versions) that the subject and the opt-in
# tests read, and prints how long it took.
#
# Environment:
#   LIGHTX2V_SRC        a LightX2V checkout (required)
#   LIGHTX2V_COMMIT     its commit, when it is not a git work tree
#   LIGHTX2V_PATCH      a diff to apply to the copy (optional)
#   TORCH_VERSION       torch release (default 2.15.0)
#   TORCH_INDEX         an index serving CPU torch wheels (default: PyPI)
#   VENV                the venv to build or reuse (default adapters/lightx2v/.venv)
#   PYTHON              interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch_version="${TORCH_VERSION:-2.15.0}"
venv="${VENV:-$here/.venv}"
patch_file="${LIGHTX2V_PATCH:-}"
marker="$venv/KVCHECK_LIGHTX2V_READY"
copy="$venv/lightx2v-src"

if [ -z "${LIGHTX2V_SRC:-}" ] || [ ! -f "$LIGHTX2V_SRC/lightx2v/common/kvcache/rolling.py" ]; then
    echo "setup: LIGHTX2V_SRC must name a LightX2V checkout (git clone https://github.com/ModelTC/LightX2V)" >&2
    exit 2
fi
src="$(cd "$LIGHTX2V_SRC" && pwd)"
commit="${LIGHTX2V_COMMIT:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unversioned)}"

# shellcheck source=../torch-venv.sh
. "$here/../torch-venv.sh"
torch_venv "$venv" "$torch_version"

"$vpy" -c 'import packaging' 2>/dev/null || "$vpy" -m pip install --quiet packaging

if [ -n "$patch_file" ]; then
    patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
    want="source: checkout $src $commit + patch $(sha256sum "$patch_file" | cut -c1-16) $patch_file"
else
    want="source: checkout $src $commit"
fi

if [ "$(head -n1 "$marker" 2>/dev/null)" != "$want" ]; then
    rm -f "$marker"
    echo "setup: copying $src to $copy"
    rm -rf "$copy"
    mkdir -p "$copy"
    # The Python sources are all the adapter imports.
    (cd "$src" && find ./lightx2v -name '*.py' -not -path './.git/*' -print0 | tar -cf - --null -T -) | tar -xf - -C "$copy"
    if [ -n "$patch_file" ]; then
        echo "setup: applying $patch_file"
        patch -d "$copy" -p1 --forward --batch < "$patch_file"
    fi
fi

{
    echo "$want"
    echo "src: $copy"
    echo "commit: $commit"
    [ -n "$patch_file" ] && echo "patch: $patch_file"
    "$vpy" - <<'PY'
from importlib.metadata import version, PackageNotFoundError
for dist in ("torch", "packaging"):
    try:
        print("%s: %s" % (dist, version(dist)))
    except PackageNotFoundError:
        pass
PY
} > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "setup: LightX2V environment ready in $venv ($(( $(date +%s) - started )) s):"
sed 's/^/  /' "$marker"
