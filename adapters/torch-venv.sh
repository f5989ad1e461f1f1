# Sourced by the setup.sh of the torch-based adapters (transformers,
# vllm-omni): builds a venv with a pinned torch and numpy from the package
# registry, skipping what is already there.
#
#   torch_venv VENV TORCH_VERSION
#
# creates VENV with $PYTHON (default python3) unless it exists, installs
# torch==TORCH_VERSION and numpy unless that torch is installed, from
# $TORCH_INDEX when set (an index serving CPU wheels, PyPI as the extra
# index), else from PyPI (whose torch brings CUDA libraries the adapters
# never load), and sets `vpy` to the venv's interpreter.
torch_venv() {
    local venv="$1" torch_version="$2"
    if [ ! -x "$venv/bin/python" ]; then
        echo "setup: creating venv $venv"
        "${PYTHON:-python3}" -m venv "$venv"
    fi
    vpy="$venv/bin/python"
    if ! "$vpy" - "$torch_version" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
import numpy  # noqa: F401
sys.exit(0 if version("torch") == sys.argv[1] else 1)
PY
        echo "setup: installing torch $torch_version and numpy"
        if [ -n "${TORCH_INDEX:-}" ]; then
            "$vpy" -m pip install --quiet --index-url "$TORCH_INDEX" \
                --extra-index-url https://pypi.org/simple "torch==$torch_version" numpy
        else
            "$vpy" -m pip install --quiet "torch==$torch_version" numpy
        fi
    fi
}
