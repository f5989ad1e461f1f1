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

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv="${VENV:-adapters/mlx-lm/.venv}"
kvcheck="${KVCHECK:-target/debug/kvcheck}"
time="${TIME:-90}"
seed="${SEED:-1}"
out="${OUT:-target/mlx-lm-server-campaign}"

if [ ! -f "$venv/KVCHECK_READY" ]; then
    echo "server_campaign: no mlx-lm environment in $venv: run adapters/mlx-lm/setup.sh first" >&2
    exit 2
fi
if [ ! -x "$kvcheck" ]; then
    cargo build --quiet -p kvcheck --bin kvcheck
fi

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

mkdir -p "$out"
for row in "${rows[@]}"; do
    name="${row%%|*}"
    options="${row#*|}"
    if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then
        continue
    fi
    for mask in "" "--mask exact-hit"; do
        label="$name${mask:+-masked}"
        # The mask goes before `--`: server options follow it.
        if [[ "$options" == *" -- "* ]]; then
            args="${options%% -- *} $mask -- ${options#* -- }"
        else
            args="$options $mask"
        fi
        subject="exec:$venv/bin/python adapters/mlx-lm/server_subject.py $args"
        rm -rf "$out/$label"
        mkdir -p "$out/$label"
        started=$(date +%s)
        set +e
        "$kvcheck" run --profile growth --keep-going --max-tests 300 --time "$time" --seed "$seed" \
            --jobs 1 --subject-timeout 120 --min-judged 0 --subject "$subject" \
            --out "$out/$label/traces" --json "$out/$label/report.json" >"$out/$label/output.txt" 2>&1
        status=$?
        set -e
        echo "$label: exit $status in $(( $(date +%s) - started )) s: $(grep -E '^(no divergence|[0-9]+ distinct)|cases,' "$out/$label/output.txt" | tr '\n' ' ')"
    done
done

# The campaign table of docs/mlx-lm-server.md, from the runs' JSON reports.
python3 scripts/campaign_table.py "$out"
