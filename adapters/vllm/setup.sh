#!/usr/bin/env bash
# Builds the environment of the vLLM prefix-cache subject
# (adapters/vllm/subject.py): a venv (adapters/vllm/.venv, or $VENV) with
# vLLM's release from the package registry. It brings vLLM's pinned torch
# (a CUDA build, some gigabytes); nothing here loads CUDA: the subject
# drives vLLM's v1 KV cache manager (vllm.v1.core.kv_cache_manager), which
# is plain Python over a block pool, on the CPU, and keeps its payload in
# a numpy array.
#
#   VLLM_PATCH=fix.diff  the release, then the diff applied to the
#                        installed package (paths as in vLLM's repository,
#                        a/vllm/v1/core/...): how a patch is verified.
#
# Idempotent: when the marker $VENV/KVCHECK_VLLM_READY records what is
# wanted (the release and the patch), nothing is done; other settings
# reinstall the release (pristine files first) and patch it again. The
# subject's opt-in tests look for the marker.
#
# Environment:
#   VLLM_VERSION  the vLLM release (default 0.33.0)
#   VLLM_PATCH    a diff to apply to the installed release (optional)
#   VENV          the venv to build or reuse (default adapters/vllm/.venv)
#   PYTHON        interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${VLLM_VERSION:-0.33.0}"
venv="${VENV:-$here/.venv}"
patch_file="${VLLM_PATCH:-}"
if [ -n "$patch_file" ] && [ ! -f "$patch_file" ]; then
    echo "setup: VLLM_PATCH=$patch_file is not a file" >&2
    exit 2
fi

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_venv "$venv"
venv="$(cd "$venv" && pwd)"
marker="$venv/KVCHECK_VLLM_READY"
src=""
kit_release_want "$version"

if ! kit_stale "$marker"; then
    echo "setup: vLLM environment already ready in $venv:"
    kit_show "$marker"
    exit 0
fi

# vLLM pins its torch; pip brings it with the rest of its dependencies.
kit_install_release vllm "$version" vllm 1

# The manager must build and answer here, on the CPU, without a GPU or a
# model: one full-attention group of 4 usable blocks of 2 tokens.
echo "setup: checking that vLLM's KV cache manager answers on the CPU"
"$vpy" - "$here" <<'PY'
import sys

sys.path.insert(0, sys.argv[1])
import manager

pool = manager.VllmManager(blocks=4, block_size=2)
first = pool.start("0", [1, 2, 3, 4, 5])
pool.compute("0", 0, [[[7], [7], [7], [7], [7]]])
pool.finish("0")
second = pool.start("1", [1, 2, 3, 4, 6])
if (first, second, pool.counts()) != (0, 4, (3, 0, 1)):
    sys.exit("setup: vLLM answered hits %r, %r and counts %r for two prompts of a common prefix"
             % (first, second, pool.counts()))
PY

kit_marker "$marker" --all vllm torch numpy
kit_ready vLLM "$marker"
