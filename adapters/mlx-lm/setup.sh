#!/usr/bin/env bash
# Builds the environment the mlx-lm adapter runs in, from the package
# registry alone: a venv (adapters/mlx-lm/.venv, or $VENV) with mlx-lm of
# MLX_LM_VERSION and its CPU backend `mlx[cpu]` (the Linux x86_64 wheels
# mlx and mlx-cpu), numpy and mlx-lm's own dependencies (transformers
# without torch: `import mlx_lm` loads its tokenizer utilities, and
# mlx_lm.models.cache is imported through the package). No torch.
#
# A patched library instead of the release:
#   MLX_LM_PATCH=fix.diff  the release, then the diff applied to the
#                          installed package (paths as in the mlx-lm
#                          repository, a/mlx_lm/...)
#   MLX_LM_SRC=checkout    an mlx-lm checkout, installed from its tree
# The marker records which, and a later run with other settings reinstalls.
# `cargo test`'s replay of tests/external/mlx-lm expects the release in
# adapters/mlx-lm/.venv (a fixed finding no longer diverges there): build
# patched libraries in another VENV.
#
# Idempotent: when the venv already holds what the marker records, nothing
# is installed. Writes the marker $VENV/KVCHECK_READY (the versions, one
# per line, then the source when it is not the release alone) that the
# opt-in tests look for, checks that mlx computes on this CPU, and prints
# how long it took.
#
# Environment:
#   MLX_LM_VERSION   mlx-lm release (default 0.32.2)
#   MLX_VERSION      mlx release with its CPU backend (default 0.32.4)
#   MLX_LM_PATCH     a diff to apply to the installed release (optional)
#   MLX_LM_SRC       an mlx-lm checkout to install instead (optional)
#   VENV             the venv to build or reuse (default adapters/mlx-lm/.venv)
#   PYTHON           interpreter for the venv (default python3; mlx-lm
#                    needs Python >= 3.11)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mlx_lm_version="${MLX_LM_VERSION:-0.32.2}"
mlx_version="${MLX_VERSION:-0.32.4}"
venv="${VENV:-$here/.venv}"
patch_file="${MLX_LM_PATCH:-}"
src="${MLX_LM_SRC:-}"
marker="$venv/KVCHECK_READY"

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_exclusive MLX_LM

# What this run wants installed, as the marker records it: the release
# alone keeps the two lines the marker has always held.
want="mlx-lm $mlx_lm_version
mlx $mlx_version"
if [ -n "$src" ]; then
    kit_src
    want="mlx-lm checkout $src $src_commit
mlx $mlx_version"
elif [ -n "$patch_file" ]; then
    kit_patch
    want="$want
source: release $mlx_lm_version$patch_tag"
fi

# The whole marker is what this run wants.
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
    echo "setup: mlx-lm environment already in $venv ($(kit_elapsed) s):"
    kit_show "$marker"
    exit 0
fi

kit_venv "$venv"
rm -f "$marker"

if [ -n "$src" ]; then
    echo "setup: installing mlx-lm from $src, mlx[cpu]==$mlx_version, numpy"
    "$vpy" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$src"
    "$vpy" -m pip install --quiet --disable-pip-version-check "$src" "mlx[cpu]==$mlx_version" numpy
else
    # --force-reinstall --no-deps restores the release's pristine files
    # after a patch or a checkout; the second install brings the rest.
    echo "setup: installing mlx-lm==$mlx_lm_version, mlx[cpu]==$mlx_version, numpy"
    "$vpy" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "mlx-lm==$mlx_lm_version"
    "$vpy" -m pip install --quiet --disable-pip-version-check \
        "mlx-lm==$mlx_lm_version" "mlx[cpu]==$mlx_version" numpy
    if [ -n "$patch_file" ]; then
        # a/mlx_lm/... -> mlx_lm/... under site-packages
        kit_patch_site mlx_lm 1
    fi
fi

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
kit_ready mlx-lm "$marker"
