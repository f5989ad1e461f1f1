#!/usr/bin/env bash
# The campaign of docs/kvpress.md: `kvcheck run --keep-going` on kvpress's
# pipeline (adapters/kvpress/pipeline_subject.py) for each press it judges
# (none, StreamingLLMPress, KeyRerotationPress over it) at compression
# ratios that keep more and fewer tokens than the sinks, with one and
# several answer tokens, one question and two, on DynamicCache and
# QuantizedCache. Writes, per
# row, the run's output and JSON report and the minimized traces under
# $OUT (default target/kvpress-campaign), prints one summary line per row,
# and last the campaign table (also $OUT/table.md).
#
#   adapters/kvpress/pipeline_campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the venv of adapters/kvpress/setup.sh (default adapters/kvpress/.venv)
#   TIME      seconds per run (default 45)
#   SEED      the op generator's seed (default 1)
#   OUT       where the reports go
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="${VENV:-adapters/kvpress/.venv}"
kvcheck="${KVCHECK:-target/debug/kvcheck}"
time="${TIME:-45}"
seed="${SEED:-1}"
out="${OUT:-target/kvpress-campaign}"

if [ ! -f "$venv/KVCHECK_KVPRESS_READY" ]; then
    echo "pipeline_campaign: no kvpress environment in $venv: run adapters/kvpress/setup.sh first" >&2
    exit 2
fi
venv_bin="$(cd "$venv" && pwd)/bin"
if [ ! -x "$kvcheck" ]; then
    cargo build --quiet -p kvcheck --bin kvcheck
fi

# name | pipeline_subject.py options
rows=(
    "none|--press none"
    "streaming|--press streaming --ratio 0.5 --sink 4"
    "streaming-sink2|--press streaming --ratio 0.25 --sink 2 --max-tokens 4"
    "streaming-high|--press streaming --ratio 0.9 --sink 4"
    "rerotate|--press rerotate --ratio 0.5 --sink 4"
    "rerotate-high|--press rerotate --ratio 0.9 --sink 4"
    "quantized|--press streaming --ratio 0.5 --sink 4 --cache quantized --tolerance 0.05"
    "questions2|--press streaming --ratio 0.25 --sink 2 --questions 2"
    "quantized-questions2|--press streaming --ratio 0.25 --sink 2 --cache quantized --tolerance 0.05 --questions 2"
)

mkdir -p "$out"
for row in "${rows[@]}"; do
    name="${row%%|*}"
    args="${row#*|}"
    if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then
        continue
    fi
    subject="exec:$venv/bin/python adapters/kvpress/pipeline_subject.py $args"
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    started=$(date +%s)
    set +e
    # ninja on PATH: quanto compiles its extension at first use.
    PATH="$venv_bin:$PATH" "$kvcheck" run --profile growth --keep-going --max-tests 300 --time "$time" \
        --seed "$seed" --jobs 1 --subject-timeout 300 --min-judged 0 --subject "$subject" \
        --out "$out/$name/traces" --json "$out/$name/report.json" >"$out/$name/output.txt" 2>&1
    status=$?
    set -e
    echo "$name: exit $status in $(( $(date +%s) - started )) s: $(grep -E '^(no divergence|[0-9]+ distinct)|cases,' "$out/$name/output.txt" | tr '\n' ' ')"
done

python3 scripts/campaign_table.py "$out"
