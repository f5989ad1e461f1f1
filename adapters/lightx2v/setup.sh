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

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
checkout_source LIGHTX2V lightx2v/common/kvcache/rolling.py https://github.com/ModelTC/LightX2V "LightX2V"

torch_venv "$venv" "$torch_version"

"$vpy" -c 'import packaging' 2>/dev/null || "$vpy" -m pip install --quiet packaging

checkout_copy LIGHTX2V ./lightx2v "LightX2V" torch packaging
