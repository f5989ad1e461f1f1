#!/usr/bin/env bash
# Builds the environment the Rolling Forcing adapter runs in: a venv
# (adapters/rollingforcing/.venv, or $VENV) with torch, numpy, einops and
# diffusers (Rolling Forcing's model classes derive from diffusers' ModelMixin),
# from the package registry, and a copy of a Rolling Forcing checkout that the
# adapter imports. Rolling Forcing is not a package: ROLLINGFORCING_SRC names a
# checkout of github.com/TencentARC/RollingForcing, and
# its commit is recorded in the marker.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small one, or VENV to a venv that already has torch.
#
# A patched Rolling Forcing:
#   ROLLINGFORCING_PATCH=fix.diff   the diff is applied to the copy (paths as in
#                             the Rolling Forcing repository, a/wan/...)
# The marker records which, and a later run with other settings copies again.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker $VENV/KVCHECK_ROLLINGFORCING_READY (what is installed, where the copy is,
# its commit) that the subject and the opt-in tests read, and prints how
# long it took.
#
# Environment:
#   ROLLINGFORCING_SRC        a Rolling Forcing checkout (required)
#   ROLLINGFORCING_COMMIT     its commit, when it is not a git work tree
#   ROLLINGFORCING_PATCH      a diff to apply to the copy (optional)
#   DIFFUSERS_VERSION   diffusers release (default 0.31.0, Rolling Forcing's requirements.txt)
#   TORCH_VERSION       torch release (default 2.15.0)
#   TORCH_INDEX         an index serving CPU torch wheels (default: PyPI)
#   VENV                the venv to build or reuse (default adapters/rollingforcing/.venv)
#   PYTHON              interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch_version="${TORCH_VERSION:-2.15.0}"
diffusers_version="${DIFFUSERS_VERSION:-0.31.0}"
venv="${VENV:-$here/.venv}"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
checkout_source ROLLINGFORCING wan/modules/causal_model.py https://github.com/TencentARC/RollingForcing "Rolling Forcing"

torch_venv "$venv" "$torch_version"
checkout_diffusers "$diffusers_version"

checkout_copy ROLLINGFORCING . "Rolling Forcing" torch diffusers einops
