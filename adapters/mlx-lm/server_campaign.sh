#!/usr/bin/env bash
# The campaign of docs/mlx-lm-server.md: `kvcheck run --keep-going` on
# mlx_lm.server (adapters/mlx-lm/server_subject.py) for each cache its
# models make and each serving path, first as it is, then with the
# requests of the known exact-hit finding held back (--mask exact-hit) so
# that the search looks past it. Writes, per row, the run's output and
# JSON report and the minimized traces under $OUT (default
# target/mlx-lm-server-campaign), prints one summary line per row, and
# last the campaign table (also $OUT/table.md): cases, ops, requests
# served, the share of drawn ops outside the domain, search seconds and
# the findings of every run under $OUT.
#
#   adapters/mlx-lm/server_campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the mlx-lm venv of adapters/mlx-lm/setup.sh (default adapters/mlx-lm/.venv)
#   TIME      seconds per run (default 90)
#   SEED      the op generator's seed (default 1)
#   OUT       where the reports go
set -euo pipefail

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/mlx-lm/.venv}"
campaign_init server_campaign "$venv/KVCHECK_READY" adapters/mlx-lm/setup.sh target/mlx-lm-server-campaign 90

# name | server_subject.py options (before `--`, then mlx_lm.server's own)
rows=(
    "kv-batch|--model llama"
    "kv-single|--model llama --path single"
    "kv-chat|--model llama --api chat"
    "kv-tokens3|--model llama --max-tokens 3"
    "rotating|--model gemma3"
    "arrays|--model qwen3-next"
    "chunked|--model llama4"
    "quantized|--model llama --judge cold --tolerance 0.02 -- --kv-bits 8 --quantized-kv-start 0"
    "draft|--model llama --draft llama --max-tokens 3"
    "draft-rotating|--model gemma3 --draft gemma3 --max-tokens 3"
)

for row in "${rows[@]}"; do
    name="${row%%|*}"
    options="${row#*|}"
    campaign_selected "$name" "$@" || continue
    for mask in "" "--mask exact-hit"; do
        # The mask goes before `--`: server options follow it.
        if [[ "$options" == *" -- "* ]]; then
            args="${options%% -- *} $mask -- ${options#* -- }"
        else
            args="$options $mask"
        fi
        campaign_run "$name${mask:+-masked}" "exec:$venv/bin/python adapters/mlx-lm/server_subject.py $args" 120
    done
done
campaign_table
