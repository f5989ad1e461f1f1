#!/usr/bin/env bash
# Builds the environment the fastvideo adapter runs in, from the package
# registry alone: a venv (adapters/fastvideo/.venv, or $VENV) with torch,
# numpy and fastvideo of FASTVIDEO_VERSION.
#
# fastvideo is installed without its dependencies (--no-deps): the adapter
# never imports it (its package pulls in a distributed runtime and compiled
# kernels), it parses the installed files and compiles their cache
# statements (adapters/fastvideo/subject.py), which need torch alone.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small one, or VENV to a venv that already has torch.
#
# A patched library instead of the release:
#   FASTVIDEO_PATCH=fix.diff  the release, then the diff applied to the
#                             installed package (paths as in the fastvideo
#                             repository, a/fastvideo/...)
# The marker records which, and a later run with other settings reinstalls.
#
# Idempotent. Writes the marker $VENV/KVCHECK_FASTVIDEO_READY (what is
# installed) that the opt-in tests look for, and prints how long it took.
#
# Environment:
#   FASTVIDEO_VERSION  fastvideo release (default 0.2.1)
#   FASTVIDEO_PATCH    a diff to apply to the installed release (optional)
#   TORCH_VERSION      torch release (default 2.15.0)
#   TORCH_INDEX        an index serving CPU torch wheels (default: PyPI)
#   VENV               the venv to build or reuse (default adapters/fastvideo/.venv)
#   PYTHON             interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${FASTVIDEO_VERSION:-0.2.1}"
torch_version="${TORCH_VERSION:-2.15.0}"
venv="${VENV:-$here/.venv}"
patch_file="${FASTVIDEO_PATCH:-}"
marker="$venv/KVCHECK_FASTVIDEO_READY"

# shellcheck source=../torch-venv.sh
. "$here/../torch-venv.sh"
torch_venv "$venv" "$torch_version"

if [ -n "$patch_file" ]; then
    patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
    want="source: release $version + patch $(sha256sum "$patch_file" | cut -c1-16) $patch_file"
else
    want="source: release $version"
fi

if [ "$(head -n1 "$marker" 2>/dev/null)" != "$want" ]; then
    rm -f "$marker"
    # --force-reinstall restores the release's pristine files after a patch.
    echo "setup: installing fastvideo $version (no dependencies)"
    "$vpy" -m pip install --quiet --force-reinstall --no-deps "fastvideo==$version"
    if [ -n "$patch_file" ]; then
        site="$("$vpy" -c 'import importlib.util, os; print(os.path.dirname(list(importlib.util.find_spec("fastvideo").submodule_search_locations)[0]))')"
        echo "setup: applying $patch_file to $site/fastvideo"
        patch -d "$site" -p1 --forward --batch < "$patch_file"
        find "$site/fastvideo" -name '__pycache__' -prune -exec rm -rf {} +
    fi
fi

{
    echo "$want"
    "$vpy" - <<'PY'
from importlib.metadata import version
for dist in ("torch", "fastvideo"):
    print(dist, version(dist))
PY
} > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "setup: fastvideo environment ready in $venv ($(( $(date +%s) - started )) s):"
sed 's/^/  /' "$marker"
