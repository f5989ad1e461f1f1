#!/usr/bin/env bash
# Builds the environment the transformers adapter runs in, from the package
# registry alone: a venv (adapters/transformers/.venv) with torch, numpy and
# transformers of TRANSFORMERS_VERSION, plus the quantization backends of
# QUANT_BACKENDS (each optional: one that fails to install is reported and
# skipped; `subject.py --cache NAME` on it then fails at open). The default
# is HQQ alone, whose CPU path runs as installed; optimum-quanto installs
# too but builds a C++ extension with ninja and a compiler at first use.
#
# PyPI's torch brings CUDA libraries (about 3 GB) that the adapter never
# uses: everything runs on the CPU. Where the PyTorch CPU wheel index can be
# reached, set TORCH_INDEX to it to get the small CPU-only wheel instead.
#
# Idempotent: a step whose result is already there is skipped. Writes the
# marker adapters/transformers/.venv/KVCHECK_READY (the installed versions)
# that the opt-in tests look for, and prints how long it took.
#
# Environment:
#   TRANSFORMERS_VERSION  transformers release (default 5.25.0)
#   TORCH_VERSION         torch release (default 2.15.0)
#   QUANT_BACKENDS        space-separated subset of "quanto hqq"
#                         (default "hqq"; empty for none)
#   QUANTO_VERSION        optimum-quanto release (default 0.2.7)
#   HQQ_VERSION           hqq release (default 0.2.8.post1)
#   TORCH_INDEX           an index serving CPU torch wheels (default: PyPI)
#   PYTHON                interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
transformers_version="${TRANSFORMERS_VERSION:-5.25.0}"
torch_version="${TORCH_VERSION:-2.15.0}"
backends="${QUANT_BACKENDS-hqq}"
quanto_version="${QUANTO_VERSION:-0.2.7}"
hqq_version="${HQQ_VERSION:-0.2.8.post1}"
venv="$here/.venv"

# shellcheck source=../torch-venv.sh
. "$here/../torch-venv.sh"
torch_venv "$venv" "$torch_version"

installed() {
    # Whether distribution $1 is installed at exactly version $2.
    "$vpy" - "$1" "$2" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
}

if ! installed transformers "$transformers_version"; then
    echo "setup: installing transformers $transformers_version"
    "$vpy" -m pip install --quiet "torch==$torch_version" "transformers==$transformers_version"
fi

for backend in $backends; do
    case "$backend" in
        quanto) dist=optimum-quanto; want="$quanto_version" ;;
        hqq) dist=hqq; want="$hqq_version" ;;
        *) echo "setup: unknown QUANT_BACKENDS entry '$backend' (known: quanto hqq)" >&2; exit 2 ;;
    esac
    if ! installed "$dist" "$want"; then
        echo "setup: installing $dist $want"
        # Optional: a backend that does not install on this machine is
        # reported and the rest of the environment stays usable.
        if ! "$vpy" -m pip install --quiet "torch==$torch_version" "$dist==$want"; then
            echo "setup: $dist $want did not install; the quantized cache on $backend stays off"
        fi
    fi
done

"$vpy" - > "$venv/KVCHECK_READY" <<'PY'
from importlib.metadata import version, PackageNotFoundError
for dist in ("torch", "transformers", "optimum-quanto", "hqq"):
    try:
        print(dist, version(dist))
    except PackageNotFoundError:
        pass
PY
echo "setup: transformers environment ready in $venv ($(( $(date +%s) - started )) s):"
sed 's/^/  /' "$venv/KVCHECK_READY"
