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

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="${VENV:-adapters/transformers/.venv}"
kvcheck="${KVCHECK:-target/debug/kvcheck}"
out="${OUT:-target/transformers-generate-campaign}"

if [ ! -f "$venv/KVCHECK_READY" ]; then
    echo "generate_campaign: no transformers environment in $venv: run adapters/transformers/setup.sh first" >&2
    exit 2
fi
if [ ! -x "$kvcheck" ]; then
    cargo build --quiet -p kvcheck --bin kvcheck
fi

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

mkdir -p "$out"
for row in "${rows[@]}"; do
    name="${row%%|*}"
    if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then
        continue
    fi
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    started=$(date +%s)
    status=0
    "$kvcheck" run --profile growth --keep-going --max-tests 300 --time "${TIME:-60}" --seed "${SEED:-1}" \
        --jobs 1 --subject-timeout 120 --min-judged 0 \
        --subject "exec:$venv/bin/python adapters/transformers/generate_subject.py ${row#*|}" \
        --out "$out/$name/traces" --json "$out/$name/report.json" >"$out/$name/output.txt" 2>&1 || status=$?
    echo "$name: exit $status in $(( $(date +%s) - started )) s: $(grep -E '^(no divergence|[0-9]+ distinct)' "$out/$name/output.txt" | tr '\n' ' ')"
done

python3 scripts/campaign_table.py "$out"
