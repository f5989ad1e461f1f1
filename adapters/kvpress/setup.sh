#!/usr/bin/env bash
# Builds the environment of the kvpress front door
# (adapters/kvpress/pipeline_subject.py) from the package registry alone: a
# venv (adapters/kvpress/.venv, or $VENV) with torch, kvpress of
# KVPRESS_VERSION (which brings the transformers it supports: below 5.3),
# optimum-quanto and ninja (transformers' QuantizedCache on the CPU: quanto
# compiles a C++ extension with ninja at first use).
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Set TORCH_INDEX to an index serving CPU
# wheels to get the small CPU-only wheel instead, or VENV to a venv that
# already has torch.
#
# A patched library instead of the release:
#   KVPRESS_PATCH=fix.diff  the release, then the diff applied to the
#                           installed package (paths as in the kvpress
#                           repository, a/kvpress/presses/...)
#   KVPRESS_SRC=checkout    a kvpress checkout, installed from its tree
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker $VENV/KVCHECK_KVPRESS_READY (the source, then the installed
# versions) that the opt-in tests look for.
#
# Environment:
#   KVPRESS_VERSION  kvpress release (default 0.5.5)
#   KVPRESS_PATCH    a diff to apply to the installed release (optional)
#   KVPRESS_SRC      a kvpress checkout to install instead (optional)
#   TORCH_VERSION    torch release (default 2.15.0)
#   QUANTO_VERSION   optimum-quanto release (default 0.2.7)
#   TORCH_INDEX      an index serving CPU torch wheels (default: PyPI)
#   VENV             the venv to build or reuse (default adapters/kvpress/.venv)
#   PYTHON           interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kvpress_version="${KVPRESS_VERSION:-0.5.5}"
torch_version="${TORCH_VERSION:-2.15.0}"
quanto_version="${QUANTO_VERSION:-0.2.7}"
venv="${VENV:-$here/.venv}"
patch_file="${KVPRESS_PATCH:-}"
src="${KVPRESS_SRC:-}"
marker="$venv/KVCHECK_KVPRESS_READY"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive KVPRESS
torch_venv "$venv" "$torch_version"

kit_release_want "$kvpress_version"
if kit_stale "$marker"; then
    kit_install_release kvpress "$kvpress_version" kvpress 1 "torch==$torch_version"
fi
if ! kit_installed optimum-quanto "$quanto_version"; then
    echo "setup: installing optimum-quanto $quanto_version and ninja"
    "$vpy" -m pip install --quiet "torch==$torch_version" "optimum-quanto==$quanto_version" ninja
fi

# quanto compiles its CPU extension at first use: do it here, once, rather
# than in the first request of a run (where a timeout could cut it short).
echo "setup: compiling optimum-quanto's CPU extension"
PATH="$venv/bin:$PATH" "$vpy" -c 'from optimum.quanto.library.extensions import cpp; cpp.ext.lib'

kit_marker "$marker" --all kvpress transformers torch optimum-quanto ninja
kit_ready kvpress "$marker"
