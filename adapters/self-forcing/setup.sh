#!/usr/bin/env bash
# Builds the environment the Self-Forcing adapter runs in: a venv
# (adapters/self-forcing/.venv, or $VENV) with torch and numpy from the
# package registry, and a Self-Forcing source checkout, which is not on any
# registry: SELF_FORCING_SRC names it (github guandeh17/Self-Forcing; a
# `git clone` or an unpacked archive). Nothing of the checkout is installed
# or imported: adapters/self-forcing/subject.py parses its files and
# compiles their cache statements, which need torch alone.
#
# A patched checkout is the checkout with the patch applied
# (`git -C "$SELF_FORCING_SRC" apply fix.diff`); the marker records the
# commit and whether the tree differs from it.
#
# Idempotent. Writes the marker $VENV/KVCHECK_SELF_FORCING_READY (`src:`
# the checkout's path, `commit:`) that the subject and the opt-in tests read.
#
# Environment:
#   SELF_FORCING_SRC  the checkout (required)
#   TORCH_VERSION     torch release (default 2.15.0)
#   TORCH_INDEX       an index serving CPU torch wheels (default: PyPI)
#   VENV              the venv to build or reuse (default adapters/self-forcing/.venv)
#   PYTHON            interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch_version="${TORCH_VERSION:-2.15.0}"
venv="${VENV:-$here/.venv}"
src="${SELF_FORCING_SRC:-}"
marker="$venv/KVCHECK_SELF_FORCING_READY"

if [ -z "$src" ] || [ ! -f "$src/wan/modules/causal_model.py" ] || [ ! -f "$src/pipeline/causal_inference.py" ]; then
    echo "setup: SELF_FORCING_SRC must name a Self-Forcing checkout (wan/modules/causal_model.py, pipeline/causal_inference.py)" >&2
    exit 2
fi
src="$(cd "$src" && pwd)"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
torch_venv "$venv" "$torch_version"

if commit="$(git -C "$src" rev-parse HEAD 2>/dev/null)"; then
    git -C "$src" diff --quiet HEAD -- 2>/dev/null || commit="$commit (modified)"
elif [ -f "$src/KVCHECK_COMMIT" ]; then
    commit="$(cat "$src/KVCHECK_COMMIT") (archive)"
else
    commit="unversioned"
fi

# The marker (kvcheck.adapter.Checkout reads its `key: value` lines): the
# source, the checkout's path and commit, torch's version.
want="source: checkout $commit
src: $src
commit: $commit"
kit_marker "$marker" --all torch
kit_ready Self-Forcing "$marker"
