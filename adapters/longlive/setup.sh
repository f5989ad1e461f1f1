#!/usr/bin/env bash
# Builds the environment the LongLive adapter runs in: a venv
# (adapters/longlive/.venv, or $VENV) with torch, numpy, einops and
# diffusers (LongLive's model classes derive from diffusers' ModelMixin),
# from the package registry, and a copy of a LongLive checkout that the
# adapter imports. LongLive is not a package: LONGLIVE_SRC names a
# checkout of github.com/NVlabs/LongLive (branch main, LongLive 2.0), and
# its commit is recorded in the marker.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small one, or VENV to a venv that already has torch.
#
# A patched LongLive:
#   LONGLIVE_PATCH=fix.diff   the diff is applied to the copy (paths as in
#                             the LongLive repository, a/wan_5b/...)
# The marker records which, and a later run with other settings copies again.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker $VENV/KVCHECK_LONGLIVE_READY (what is installed, where the copy is,
# its commit) that the subject and the opt-in tests read, and prints how
# long it took.
#
# Environment:
#   LONGLIVE_SRC        a LongLive checkout (required)
#   LONGLIVE_COMMIT     its commit, when it is not a git work tree
#   LONGLIVE_PATCH      a diff to apply to the copy (optional)
#   DIFFUSERS_VERSION   diffusers release (default 0.31.0, LongLive's requirements.txt)
#   TORCH_VERSION       torch release (default 2.15.0)
#   TORCH_INDEX         an index serving CPU torch wheels (default: PyPI)
#   VENV                the venv to build or reuse (default adapters/longlive/.venv)
#   PYTHON              interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch_version="${TORCH_VERSION:-2.15.0}"
diffusers_version="${DIFFUSERS_VERSION:-0.31.0}"
venv="${VENV:-$here/.venv}"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
checkout_source LONGLIVE wan_5b/modules/causal_model.py https://github.com/NVlabs/LongLive "LongLive"

torch_venv "$venv" "$torch_version"
checkout_diffusers "$diffusers_version"

checkout_copy LONGLIVE . "LongLive" torch diffusers einops
