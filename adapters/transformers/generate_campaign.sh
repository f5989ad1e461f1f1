#!/usr/bin/env bash
# The campaign of docs/transformers-generate.md: `kvcheck run --keep-going`
# on transformers' generate() (adapters/transformers/generate_subject.py)
# for each cache implementation, the reuse of one cache across calls, and
# assisted generation. Writes, per row, the run's output and JSON report
# and the minimized traces under $OUT (default
# target/transformers-generate-campaign), prints one summary line per row,
# and last the campaign table (also $OUT/table.md).
#
#   adapters/transformers/generate_campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the venv of adapters/transformers/setup.sh (default adapters/transformers/.venv)
#   TIME      seconds per run (default 60)
#   SEED      the op generator's seed (default 1)
#   OUT       where the reports go
set -euo pipefail

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/transformers/.venv}"
campaign_init generate_campaign "$venv/KVCHECK_READY" adapters/transformers/setup.sh \
    target/transformers-generate-campaign 60

# name | generate_subject.py options
rows=(
    "dynamic|--model llama --max-new-tokens 2"
    "dynamic-reuse|--model llama --reuse --max-new-tokens 2"
    "static|--model llama --cache static --max-new-tokens 2"
    "static-reuse|--model llama --cache static --reuse --max-new-tokens 2"
    "sliding|--model mistral --max-new-tokens 3"
    "sliding-window|--model mistral --cache sliding_window --max-new-tokens 3"
    "sliding-reuse|--model mistral --reuse --max-new-tokens 2"
    "hybrid|--model gemma2 --cache hybrid --max-new-tokens 3"
    "quantized|--model llama --cache quantized --max-new-tokens 3 --tolerance 0.01"
    "assisted|--model llama --assistant llama --max-new-tokens 4"
    "assisted-sliding|--model mistral --assistant mistral --max-new-tokens 6"
    "batching|--model llama --batching --max-new-tokens 3"
)

for row in "${rows[@]}"; do
    name="${row%%|*}"
    campaign_selected "$name" "$@" || continue
    campaign_run "$name" "exec:$venv/bin/python adapters/transformers/generate_subject.py ${row#*|}" 120
done
campaign_table
