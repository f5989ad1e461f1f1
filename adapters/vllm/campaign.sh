#!/usr/bin/env bash
# The campaign of docs/vllm.md: `kvcheck prefix run` on vLLM's v1 KV cache
# manager (adapters/vllm/subject.py), judged by the invariants of
# docs/contract.md §17, for block sizes 1, 2 and 16 on small pools (1-4
# blocks: most allocations evict) and large ones (12-16 blocks), chunked
# prefill, an engine without speculative decoding, a row that declares no
# op vLLM answers outside to (no case cut), and the priority scheduling
# policy; then the sliding-window rows (docs/vllm.md, "Sliding-window
# groups"): `swa-*` every layer windowed (one SlidingWindowSpec group),
# `hyb-*` the hybrid allocator (layer 0 full, layer 1 windowed: two groups
# over one pool, so its small pools are 2-8 blocks), windows smaller and
# larger than a block, chunked prefill, with and without speculative
# decoding, and the priority policy. Writes, per row, the run's output
# and any minimized trace under $OUT (default target/vllm-campaign),
# prints one summary line per row, and last the campaign table (also
# $OUT/table.md), each row with the command that produced it.
#
#   adapters/vllm/campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the venv of adapters/vllm/setup.sh (default adapters/vllm/.venv)
#   TIME      seconds per row (default 60)
#   SEED      the campaign's seed (default 1)
#   OUT       where the outputs go
set -euo pipefail

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/vllm/.venv}"
campaign_init campaign "$venv/KVCHECK_VLLM_READY" adapters/vllm/setup.sh target/vllm-campaign 60

# name | subject.py options
rows=(
    "b1-small|--block-size 1 --blocks 1-4"
    "b1-large|--block-size 1 --blocks 12-16"
    "b2-small|--block-size 2 --blocks 1-4"
    "b2-large|--block-size 2 --blocks 12-16"
    "b16-small|--block-size 16 --blocks 1-4"
    "b16-large|--block-size 16 --blocks 12-16"
    "b2-chunked|--block-size 2 --chunk 3"
    "b16-chunked|--block-size 16 --chunk 8"
    "b2-no-spec|--block-size 2 --no-spec"
    "b2-uncut|--block-size 2 --ops start,compute,extend,finish,preempt,resume,read"
    "b2-priority|--block-size 2 --priority"
    "b2-priority-chunked|--block-size 2 --priority --chunk 2 --ops start,compute,preempt,resume,finish,read"
    # Sliding windows (W: keys [p - W + 1, p]); several sizes per row, one per config.
    "swa-b1-small|--block-size 1 --window 2,3,5 --blocks 1-4"
    "swa-b2-small|--block-size 2 --window 2,3,5 --blocks 1-4"
    "swa-b2-large|--block-size 2 --window 2,3,5 --blocks 12-16"
    "swa-b16-small|--block-size 16 --window 4,20 --blocks 1-4"
    "swa-b16-large|--block-size 16 --window 4,20 --blocks 12-16"
    "swa-b2-chunked|--block-size 2 --window 3 --chunk 3"
    "swa-b2-no-spec|--block-size 2 --window 3 --no-spec"
    # W = 1: vLLM caches no block of the group (docs/vllm.md), so it never hits.
    "swa-b2-w1|--block-size 2 --window 1"
    "hyb-b1-small|--block-size 1 --window 2,3,5 --hybrid --blocks 2-8"
    "hyb-b2-small|--block-size 2 --window 2,3,5 --hybrid --blocks 2-8"
    "hyb-b2-large|--block-size 2 --window 2,3,5 --hybrid --blocks 12-16"
    "hyb-b16-small|--block-size 16 --window 4,20 --hybrid --blocks 2-8"
    "hyb-b16-large|--block-size 16 --window 4,20 --hybrid --blocks 12-16"
    "hyb-b2-chunked|--block-size 2 --window 3 --hybrid --chunk 3"
    "hyb-b16-chunked|--block-size 16 --window 20 --hybrid --chunk 8"
    "hyb-b2-priority|--block-size 2 --window 3 --hybrid --priority"
    "hyb-b2-priority-chunked|--block-size 2 --window 3 --hybrid --priority --chunk 2 --ops start,compute,preempt,resume,finish,read"
)

names=()
for row in "${rows[@]}"; do
    name="${row%%|*}"
    names+=("$name")
    campaign_selected "$name" "$@" || continue
    subject="exec:$venv/bin/python adapters/vllm/subject.py ${row#*|}"
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    command=("$kvcheck" prefix run --subject "$subject" --time "$time" --seed "$seed" --subject-timeout 120
             --out "$out/$name/traces")
    echo "${row#*|}" > "$out/$name/options.txt"
    echo "$kvcheck prefix run --subject \"$subject\" --time $time --seed $seed --subject-timeout 120" \
        > "$out/$name/command.txt"
    started=$(date +%s)
    status=0
    "${command[@]}" > "$out/$name/output.txt" 2> "$out/$name/stderr.txt" || status=$?
    echo "$(( $(date +%s) - started ))" > "$out/$name/seconds.txt"
    echo "$status" > "$out/$name/status.txt"
    echo "$name: exit $status in $(cat "$out/$name/seconds.txt") s: $(grep -E 'cases, |^no failure|^failed after|^minimized' "$out/$name/output.txt" | tr '\n' ' ')"
done

# The table: one line per row with an output under $out, in the rows' order.
python3 - "$out" "${names[@]}" <<'PY'
import os
import re
import sys

out = sys.argv[1]
lines = ["| row | subject options | cases | ops judged | cases cut by an outside answer "
         "| configs outside the row | verdict | s |",
         "|---|---|---|---|---|---|---|---|"]
commands = []
for name in sys.argv[2:]:
    folder = os.path.join(out, name)
    if not os.path.exists(os.path.join(folder, "output.txt")):
        continue
    text = open(os.path.join(folder, "output.txt")).read()
    command = open(os.path.join(folder, "command.txt")).read().strip()
    options = open(os.path.join(folder, "options.txt")).read().strip()
    counts = re.search(r"(\d+) cases, (\d+) ops judged.*?; (\d+) cut by an outside answer, (\d+) configs", text)
    failed = re.search(r"^failed after (\d+) ops:\n.*?\nexpected: (P\d|refusals)?", text, re.M | re.S)
    minimized = re.search(r"^minimized from \d+ to (\d+) ops", text, re.M)
    if "no failure" in text:
        verdict = "no divergence"
    elif failed:
        verdict = "%s divergence, minimized to %s ops" % (failed.group(2) or "a",
                                                          minimized.group(1) if minimized else "?")
    else:
        verdict = "no verdict (see %s/output.txt)" % name
    cases, ops, cut, configs = counts.groups() if counts else ("?", "?", "?", "?")
    seconds = open(os.path.join(folder, "seconds.txt")).read().strip()
    lines.append("| %s | `%s` | %s | %s | %s | %s | %s | %s |" % (name, options, cases, ops, cut, configs,
                                                                 verdict, seconds))
    commands.append("- %s: `%s`" % (name, command))
table = "\n".join(lines + [""] + commands) + "\n"
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table)
print(table)
PY
