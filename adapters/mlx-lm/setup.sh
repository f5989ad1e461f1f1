#!/usr/bin/env bash
# Builds the environment the mlx-lm adapter runs in, from the package
# registry alone: a venv (adapters/mlx-lm/.venv) with mlx-lm of
# MLX_LM_VERSION and its CPU backend `mlx[cpu]` (the Linux x86_64 wheels
# mlx and mlx-cpu), numpy and mlx-lm's own dependencies (transformers
# without torch: `import mlx_lm` loads its tokenizer utilities, and
# mlx_lm.models.cache is imported through the package). No torch.
# Idempotent: when the venv already holds the pinned versions nothing is
# installed. Writes the marker adapters/mlx-lm/.venv/KVCHECK_READY (the
# versions, one per line) that the opt-in tests look for, checks that
# mlx computes on this CPU, and prints how long it took.
#
# Environment:
#   MLX_LM_VERSION   mlx-lm release (default 0.32.2)
#   MLX_VERSION      mlx release with its CPU backend (default 0.32.4)
#   PYTHON           interpreter for the venv (default python3; mlx-lm
#                    needs Python >= 3.11)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mlx_lm_version="${MLX_LM_VERSION:-0.32.2}"
mlx_version="${MLX_VERSION:-0.32.4}"
python="${PYTHON:-python3}"
venv="$here/.venv"
marker="$venv/KVCHECK_READY"
want="mlx-lm $mlx_lm_version
mlx $mlx_version"

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
    echo "setup: mlx-lm $mlx_lm_version with mlx $mlx_version already in $venv ($(( $(date +%s) - started )) s)"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating venv $venv"
    "$python" -m venv "$venv"
fi
vpy="$venv/bin/python"
rm -f "$marker"

echo "setup: installing mlx-lm==$mlx_lm_version, mlx[cpu]==$mlx_version, numpy"
"$vpy" -m pip install --quiet --disable-pip-version-check \
    "mlx-lm==$mlx_lm_version" "mlx[cpu]==$mlx_version" numpy

# The Linux wheels are built for the CPU backend; a wheel that installs but
# cannot compute here is caught now rather than by the first trace.
"$vpy" - <<'PY'
import mlx.core as mx
a = mx.arange(6, dtype=mx.float32).reshape(2, 3)
got = (a @ a.T).tolist()
assert got == [[5.0, 14.0], [14.0, 50.0]], got
from mlx_lm.models.cache import KVCache, RotatingKVCache, QuantizedKVCache
print(f"setup: mlx computes on {mx.default_device()}")
PY
if "$vpy" -c 'import torch' 2>/dev/null; then
    echo "setup: torch is importable in $venv; the mlx-lm adapter must not depend on it" >&2
fi
echo "$want" > "$marker"
echo "setup: mlx-lm $mlx_lm_version with mlx $mlx_version ready in $venv ($(( $(date +%s) - started )) s)"
