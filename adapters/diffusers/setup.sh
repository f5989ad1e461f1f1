#!/usr/bin/env bash
# Builds the environment the diffusers adapter runs in, from the package
# registry alone: a venv (adapters/diffusers/.venv, or $VENV) with torch,
# numpy and diffusers of DIFFUSERS_VERSION (with its own dependencies; not
# transformers, which only the pipeline module and the findings'
# reproductions import: TRANSFORMERS_VERSION installs it too).
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small one, or VENV to a venv that already has torch.
#
# A patched library instead of the release:
#   DIFFUSERS_PATCH=fix.diff  the release, then the diff applied to the
#                             installed package (paths as in the diffusers
#                             repository, a/src/diffusers/...)
#   DIFFUSERS_SRC=checkout    a diffusers checkout, installed from its tree
# The marker records which, and a later run with other settings reinstalls.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker $VENV/KVCHECK_DIFFUSERS_READY (what is installed) that the opt-in
# tests look for, and prints how long it took.
#
# Environment:
#   DIFFUSERS_VERSION     diffusers release (default 0.42.1)
#   DIFFUSERS_PATCH       a diff to apply to the installed release (optional)
#   DIFFUSERS_SRC         a diffusers checkout to install instead (optional)
#   TRANSFORMERS_VERSION  also install this transformers (default: none)
#   TORCH_VERSION         torch release (default 2.15.0)
#   TORCH_INDEX           an index serving CPU torch wheels (default: PyPI)
#   VENV                  the venv to build or reuse (default adapters/diffusers/.venv)
#   PYTHON                interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${DIFFUSERS_VERSION:-0.42.1}"
torch_version="${TORCH_VERSION:-2.15.0}"
venv="${VENV:-$here/.venv}"
patch_file="${DIFFUSERS_PATCH:-}"
src="${DIFFUSERS_SRC:-}"
marker="$venv/KVCHECK_DIFFUSERS_READY"

if [ -n "$patch_file" ] && [ -n "$src" ]; then
    echo "setup: DIFFUSERS_PATCH and DIFFUSERS_SRC exclude each other" >&2
    exit 2
fi

# shellcheck source=../torch-venv.sh
. "$here/../torch-venv.sh"
torch_venv "$venv" "$torch_version"

# What this run wants installed, as the marker records it.
if [ -n "$src" ]; then
    src="$(cd "$src" && pwd)"
    want="source: checkout $src $(git -C "$src" rev-parse HEAD 2>/dev/null || echo unversioned)"
elif [ -n "$patch_file" ]; then
    patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
    want="source: release $version + patch $(sha256sum "$patch_file" | cut -c1-16) $patch_file"
else
    want="source: release $version"
fi

installed() {
    # Whether distribution $1 is installed at exactly version $2.
    "$vpy" - "$1" "$2" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
}

if [ "$(head -n1 "$marker" 2>/dev/null)" != "$want" ]; then
    rm -f "$marker"
    if [ -n "$src" ]; then
        echo "setup: installing diffusers from $src"
        "$vpy" -m pip install --quiet --force-reinstall --no-deps "$src"
        "$vpy" -m pip install --quiet "$src"
    else
        # The marker differs (first run, another version, a patch or a checkout
        # before): --force-reinstall --no-deps restores the release's pristine
        # files, the second install brings any dependency still missing.
        echo "setup: installing diffusers $version"
        "$vpy" -m pip install --quiet --force-reinstall --no-deps "diffusers==$version"
        "$vpy" -m pip install --quiet "diffusers==$version"
        if [ -n "$patch_file" ]; then
            site="$("$vpy" -c 'import importlib.util, os; print(os.path.dirname(list(importlib.util.find_spec("diffusers").submodule_search_locations)[0]))')"
            echo "setup: applying $patch_file to $site/diffusers"
            # a/src/diffusers/... -> diffusers/... under site-packages
            patch -d "$site" -p2 --forward --batch < "$patch_file"
            find "$site/diffusers" -name '__pycache__' -prune -exec rm -rf {} +
        fi
    fi
fi

if [ -n "${TRANSFORMERS_VERSION:-}" ] && ! installed transformers "$TRANSFORMERS_VERSION"; then
    echo "setup: installing transformers $TRANSFORMERS_VERSION"
    "$vpy" -m pip install --quiet "transformers==$TRANSFORMERS_VERSION"
fi

{
    echo "$want"
    "$vpy" - <<'PY'
from importlib.metadata import version, PackageNotFoundError
for dist in ("torch", "diffusers", "transformers"):
    try:
        print(dist, version(dist))
    except PackageNotFoundError:
        pass
PY
} > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "setup: diffusers environment ready in $venv ($(( $(date +%s) - started )) s):"
sed 's/^/  /' "$marker"
