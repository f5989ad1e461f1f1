#!/usr/bin/env bash
# The campaign of docs/sglang-radix.md: `kvcheck prefix run` on sglang's
# radix prefix cache (adapters/sglang-radix/subject.py) for each row below,
# judged by the invariants of docs/contract.md §17. Writes, per row, the
# run's output and any minimized failure trace under $OUT (default
# target/sglang-radix-campaign), prints one summary line per row, and last
# the campaign table (also $OUT/table.md) with the command behind each row.
#
#   adapters/sglang-radix/campaign.sh [ROW...]
#
# Rows marked "P5 waived" run with `--waive P5`: sglang caches less than
# the contract by design there (decoded tokens enter the tree when the
# request finishes; a retraction frees them and evicts; a paged allocation
# evicts for an upper bound of the pages it needs), docs/sglang-radix.md
# "Where sglang departs by design". The prompt-only rows (no extend,
# preempt or resume) judge every invariant, P5 included.
#
# Environment:
#   KVCHECK   the kvcheck binary (default ${CARGO_TARGET_DIR:-target}/release/kvcheck;
#             built with `cargo build --release -p kvcheck` when absent)
#   VENV      the venv of adapters/sglang-radix/setup.sh (default adapters/sglang-radix/.venv)
#   TIME      seconds per row (default 60)
#   SEED      the campaign's seed (default 1)
#   OUT       where the reports go (default target/sglang-radix-campaign)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
venv="${VENV:-adapters/sglang-radix/.venv}"
kvcheck="${KVCHECK:-${CARGO_TARGET_DIR:-target}/release/kvcheck}"
time="${TIME:-60}"
seed="${SEED:-1}"
out="${OUT:-target/sglang-radix-campaign}"
if [ ! -f "$venv/KVCHECK_SGLANG_RADIX_READY" ]; then
    echo "campaign: no environment at $venv: run adapters/sglang-radix/setup.sh first" >&2
    exit 2
fi
if [ ! -x "$kvcheck" ]; then
    cargo build --quiet --release -p kvcheck --bin kvcheck
fi
mkdir -p "$out"
unset RUST_BACKTRACE

prompt_ops="--ops start,compute,finish,read,evict,clear"
# name | subject.py options | kvcheck options
rows=(
    "radix-b1-prompts|--page-sizes 1 $prompt_ops|"
    "radix-b1-chunked-prompts|--page-sizes 1 --chunked-prefill-size 2 $prompt_ops|"
    "radix-paged-prompts|--page-sizes 2,4,16 $prompt_ops|--waive P5"
    "radix-b1|--page-sizes 1|--waive P5"
    "radix-paged|--page-sizes 2,4,16|--waive P5"
    "radix-small-pools|--blocks 1:6|--waive P5"
    "radix-large-pools|--blocks 12:16|--waive P5"
    "radix-chunked|--page-sizes 1,2,4 --chunked-prefill-size 4|--waive P5"
    "radix-lfu|--eviction-policy lfu|--waive P5"
    "radix-slru|--eviction-policy slru|--waive P5"
    "radix-priority|--eviction-policy priority|--waive P5"
    "unified-b1-prompts|--tree unified --page-sizes 1 $prompt_ops|"
    "unified|--tree unified|--waive P5"
    "unified-tlru|--tree unified --eviction-policy tlru --eviction-policy-config '{\"threshold\":4,\"next_prompt_estimate\":1}'|--waive P5"
    # The sliding-window component (--swa W: SWAKVPool, SWATokenToKVPoolAllocator,
    # UnifiedRadixCache FULL + SWA; docs/sglang-radix.md "The sliding-window
    # component"). P5 waived: besides departures 1-3, a prompt whose match
    # ended on an SWA tombstone is inserted up to that branch point only
    # (departure 4). Interval 1 makes every decode step free what left the
    # window, as sglang's default (128) would on long sequences.
    "swa-b1-prompts|--swa 4 --page-sizes 1 --swa-eviction-interval 1 $prompt_ops|--waive P5"
    "swa-b1|--swa 4 --page-sizes 1 --swa-eviction-interval 1|--waive P5"
    "swa-window-below-page|--swa 2,3 --page-sizes 4,16 --swa-eviction-interval 1|--waive P5"
    "swa-window-above-page|--swa 6,9 --page-sizes 2,4 --swa-eviction-interval 1|--waive P5"
    "swa-small-pools|--swa 2,3 --blocks 1:6 --swa-eviction-interval 1|--waive P5"
    "swa-large-pools|--swa 5,8 --blocks 12:16 --swa-eviction-interval 1|--waive P5"
    "swa-chunked|--swa 4 --page-sizes 1,2,4 --chunked-prefill-size 4 --swa-eviction-interval 1|--waive P5"
    "swa-chunked-small|--swa 3,6 --page-sizes 1,2 --chunked-prefill-size 2 --swa-eviction-interval 1|--waive P5"
    "swa-lfu|--swa 4 --eviction-policy lfu --swa-eviction-interval 1|--waive P5"
    "swa-layers|--swa 3 --swa-layers 1,2 --page-sizes 1,2 --swa-eviction-interval 1|--waive P5"
    "swa-default-interval|--swa 4|--waive P5"
)

selected() {
    local name="$1"
    shift
    [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]
}

table="$out/table.md"
{
    echo "| row | subject options | judge | cases | ops judged | configs outside | result | seconds |"
    echo "|---|---|---|---|---|---|---|---|"
} > "$table.tmp"
for row in "${rows[@]}"; do
    IFS='|' read -r name options judge <<< "$row"
    selected "$name" "$@" || continue
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    subject="exec:$venv/bin/python adapters/sglang-radix/subject.py $options"
    # shellcheck disable=SC2086  # the judge options are words
    command=("$kvcheck" prefix run --subject "$subject" $judge --time "$time" --seed "$seed" --out "$out/$name/traces")
    printf '%q ' "${command[@]}" > "$out/$name/command.txt"
    echo >> "$out/$name/command.txt"
    started=$(date +%s)
    status=0
    "${command[@]}" > "$out/$name/output.txt" 2> "$out/$name/stderr.txt" || status=$?
    seconds=$(( $(date +%s) - started ))
    summary=$(head -n1 "$out/$name/output.txt")
    cases=$(sed -n 's/.*: \([0-9]*\) cases, .*/\1/p' <<< "$summary")
    ops=$(sed -n 's/.* cases, \([0-9]*\) ops judged.*/\1/p' <<< "$summary")
    outside=$(sed -n 's/.* \([0-9]*\) configs outside.*/\1/p' <<< "$summary")
    if grep -q '^no failure' "$out/$name/output.txt"; then
        result="no failure"
    elif [ "$status" -eq 1 ]; then
        result="failure: $(grep -m1 '^expected:' "$out/$name/output.txt" || true)"
    else
        result="exit $status"
    fi
    echo "$name: exit $status in $seconds s: ${cases:-?} cases, ${ops:-?} ops judged: $result"
    echo "| $name | \`$options\` | ${judge:-every invariant} | ${cases:-?} | ${ops:-?} | ${outside:-?} | $result | $seconds |" >> "$table.tmp"
done
mv "$table.tmp" "$table"
echo
cat "$table"
