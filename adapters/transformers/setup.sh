#!/usr/bin/env bash
# Builds the environment the transformers adapter runs in, from the package
# registry alone: a venv (adapters/transformers/.venv, or $VENV) with torch,
# numpy and transformers of TRANSFORMERS_VERSION, plus the quantization
# backends of QUANT_BACKENDS (each optional: one that fails to install is
# reported and skipped; `subject.py --cache NAME` on it then fails at open).
# The default is HQQ alone, whose CPU path runs as installed;
# optimum-quanto installs too but builds a C++ extension with ninja and a
# compiler at first use.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Where the PyTorch CPU wheel index can be
# reached, set TORCH_INDEX to it to get the small CPU-only wheel instead, or
# VENV to a venv that already has torch.
#
# A patched library instead of the release:
#   TRANSFORMERS_PATCH=fix.diff  the release, then the diff applied to the
#                                installed package (paths as in the
#                                transformers repository, a/src/transformers/...)
#   TRANSFORMERS_SRC=checkout    a transformers checkout, installed from its tree
# The marker records which, and a later run with other settings reinstalls.
# `cargo test`'s replay of tests/external/transformers expects the release
# in adapters/transformers/.venv (a fixed finding no longer diverges there):
# build patched libraries in another VENV.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker $VENV/KVCHECK_READY (the source, then the installed versions) that
# the opt-in tests look for, and prints how long it took.
#
# Environment:
#   TRANSFORMERS_VERSION  transformers release (default 5.25.0)
#   TRANSFORMERS_PATCH    a diff to apply to the installed release (optional)
#   TRANSFORMERS_SRC      a transformers checkout to install instead (optional)
#   TORCH_VERSION         torch release (default 2.15.0)
#   QUANT_BACKENDS        space-separated subset of "quanto hqq"
#                         (default "hqq"; empty for none)
#   QUANTO_VERSION        optimum-quanto release (default 0.2.7)
#   HQQ_VERSION           hqq release (default 0.2.8.post1)
#   TORCH_INDEX           an index serving CPU torch wheels (default: PyPI)
#   VENV                  the venv to build or reuse (default adapters/transformers/.venv)
#   PYTHON                interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
transformers_version="${TRANSFORMERS_VERSION:-5.25.0}"
torch_version="${TORCH_VERSION:-2.15.0}"
backends="${QUANT_BACKENDS-hqq}"
quanto_version="${QUANTO_VERSION:-0.2.7}"
hqq_version="${HQQ_VERSION:-0.2.8.post1}"
venv="${VENV:-$here/.venv}"
patch_file="${TRANSFORMERS_PATCH:-}"
src="${TRANSFORMERS_SRC:-}"
marker="$venv/KVCHECK_READY"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive TRANSFORMERS
torch_venv "$venv" "$torch_version"

kit_release_want "$transformers_version"
if kit_stale "$marker"; then
    kit_install_release transformers "$transformers_version" transformers 2 "torch==$torch_version"
fi

for backend in $backends; do
    case "$backend" in
        quanto) dist=optimum-quanto; want_backend="$quanto_version" ;;
        hqq) dist=hqq; want_backend="$hqq_version" ;;
        *) echo "setup: unknown QUANT_BACKENDS entry '$backend' (known: quanto hqq)" >&2; exit 2 ;;
    esac
    if ! kit_installed "$dist" "$want_backend"; then
        echo "setup: installing $dist $want_backend"
        # Optional: a backend that does not install on this machine is
        # reported and the rest of the environment stays usable.
        if ! "$vpy" -m pip install --quiet "torch==$torch_version" "$dist==$want_backend"; then
            echo "setup: $dist $want_backend did not install; the quantized cache on $backend stays off"
        fi
    fi
done

kit_marker "$marker" torch transformers optimum-quanto hqq
kit_ready transformers "$marker"
