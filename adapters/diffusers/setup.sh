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

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive DIFFUSERS
torch_venv "$venv" "$torch_version"

kit_release_want "$version"
if kit_stale "$marker"; then
    kit_install_release diffusers "$version" diffusers 2
fi

if [ -n "${TRANSFORMERS_VERSION:-}" ] && ! kit_installed transformers "$TRANSFORMERS_VERSION"; then
    echo "setup: installing transformers $TRANSFORMERS_VERSION"
    "$vpy" -m pip install --quiet "transformers==$TRANSFORMERS_VERSION"
fi

kit_marker "$marker" torch diffusers transformers
kit_ready diffusers "$marker"
