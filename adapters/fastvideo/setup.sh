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

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
torch_venv "$venv" "$torch_version"

kit_patch
want="source: release $version$patch_tag"
if kit_stale "$marker"; then
    # --force-reinstall restores the release's pristine files after a patch.
    echo "setup: installing fastvideo $version (no dependencies)"
    "$vpy" -m pip install --quiet --force-reinstall --no-deps "fastvideo==$version"
    if [ -n "$patch_file" ]; then
        kit_patch_site fastvideo 1
    fi
fi

kit_marker "$marker" --all torch fastvideo
kit_ready fastvideo "$marker"
