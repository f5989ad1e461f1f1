#!/usr/bin/env bash
# The campaign of docs/mistralrs.md: `kvcheck run --keep-going` on
# mistral.rs's Python entry point (adapters/mistralrs/subject.py) for each
# way it keeps a conversation's cache: the prefix cache on and off, several
# tokens and several choices per request, other clients' requests in
# between and in flight at once, the bf16 and f16 dtypes, and sliding-window
# models (mistral: every layer slides; gemma2: every other layer), with the
# prefix cache on and off. Writes, per row, the run's output and JSON
# report and the minimized traces under $OUT (default
# target/mistralrs-campaign), prints one summary line per row, and last the
# campaign table (also $OUT/table.md).
#
#   adapters/mistralrs/campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the venv of adapters/mistralrs/setup.sh (default adapters/mistralrs/.venv)
#   TIME      seconds per run (default 30)
#   SEED      the op generator's seed (default 1)
#   OUT       where the reports go
set -euo pipefail

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/mistralrs/.venv}"
campaign_init campaign "$venv/KVCHECK_MISTRALRS_READY" adapters/mistralrs/setup.sh \
    target/mistralrs-campaign 30

# name | subject.py options
rows=(
    "prefix-cache|--model llama"
    "no-prefix-cache|--model llama --prefix-cache 0"
    "tokens4|--model llama --max-tokens 4"
    "choices2|--model llama --choices 2 --max-tokens 3"
    "interleaved|--model llama --interleave --max-tokens 2"
    "parallel4|--model llama --parallel 4 --max-tokens 2"
    "parallel4-no-prefix-cache|--model llama --parallel 4 --max-tokens 2 --prefix-cache 0"
    "bf16|--model llama --dtype bf16 --tolerance 0.05"
    "f16|--model llama --dtype f16 --tolerance 0.05"
    "swa|--model mistral --window 4"
    "swa-no-prefix-cache|--model mistral --window 4 --prefix-cache 0"
    "swa-tokens4-no-prefix-cache|--model mistral --window 4 --max-tokens 4 --prefix-cache 0"
    "swa-parallel4-no-prefix-cache|--model mistral --window 4 --parallel 4 --max-tokens 2 --prefix-cache 0"
    "gemma2|--model gemma2 --window 4"
    "gemma2-no-prefix-cache|--model gemma2 --window 4 --prefix-cache 0"
)

for row in "${rows[@]}"; do
    name="${row%%|*}"
    campaign_selected "$name" "$@" || continue
    campaign_run "$name" "exec:$venv/bin/python adapters/mistralrs/subject.py ${row#*|}" 60
done
campaign_table
