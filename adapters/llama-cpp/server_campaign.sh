#!/usr/bin/env bash
# The campaign of docs/llama-server.md: `kvcheck run --keep-going` on
# llama.cpp's llama-server (adapters/llama-cpp/server_subject.py) for each
# way it keeps a slot's cache: prompt caching alone, chunk reuse by K
# shift, slots chosen by similarity or named, the host-memory prompt
# cache, save and restore of a slot, context shift, a sliding-window model
# (with and without --swa-full, with context checkpoints, slots restored
# from a file or from host memory), every K/V cache type the CPU runs,
# shared completions, speculative decoding, and several tokens per
# request. Writes, per row, the run's output and JSON report and the
# minimized traces under $OUT (default target/llama-server-campaign),
# prints one summary line per row, and last the campaign table (also
# $OUT/table.md).
#
#   adapters/llama-cpp/server_campaign.sh [ROW...]
#
# Environment:
#   KVCHECK   the kvcheck binary (default target/debug/kvcheck; built when absent)
#   VENV      the venv of adapters/llama-cpp/server-setup.sh (default adapters/llama-cpp/.venv-server)
#   TIME      seconds per run (default 45)
#   SEED      the op generator's seed (default 1)
#   OUT       where the reports go
set -euo pipefail

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/llama-cpp/.venv-server}"
campaign_init server_campaign "$venv/KVCHECK_LLAMA_SERVER_READY" adapters/llama-cpp/server-setup.sh \
    target/llama-server-campaign 45

# name | server_subject.py options (before `--`, then llama-server's own)
rows=(
    "prompt-cache|--model llama"
    "tokens4|--model llama --max-tokens 4"
    "slots-named|--model llama --slot rotate"
    "one-slot|--model llama -- -np 1"
    "no-cache-ram|--model llama -- --cache-ram 0"
    "interleaved|--model llama --interleave"
    "roundtrip|--model llama --roundtrip"
    "completions2|--model llama --completions 2 --max-tokens 3"
    "separate-slots|--model llama --slot rotate -- -np 3 --no-kv-unified"
    "draft|--model llama --draft --max-tokens 6"
    "ngram|--model llama --max-tokens 8 -- --spec-type ngram-simple"
    "cache-reuse|--model llama --layers 1 -- --cache-reuse 2"
    "context-shift|--model llama --layers 1 --max-tokens 200 -- -c 256 -np 1 --context-shift --keep 4"
    "shift-roundtrip|--model llama --layers 1 --roundtrip --max-tokens 200 -- -c 256 -np 1 --context-shift --keep 4"
    "shift-reuse|--model llama --layers 1 --max-tokens 200 -- -c 256 -np 1 --context-shift --keep 4 --cache-reuse 2"
    "swa|--model gemma2"
    "swa-full|--model gemma2 -- --swa-full"
    "swa-full-roundtrip|--model gemma2 --roundtrip -- --swa-full"
    "swa-full-interleaved|--model gemma2 --interleave -- --swa-full"
    "swa-tokens4|--model gemma2 --max-tokens 4 -- -np 1"
    "swa-checkpoint1|--model gemma2 --max-tokens 3 -- -np 1 --ctx-checkpoints 1"
    "swa-roundtrip|--model gemma2 --roundtrip"
    "swa-interleaved|--model gemma2 --interleave"
    "swa-interleaved-np1|--model gemma2 --interleave -- -np 1"
    "swa-draft|--model gemma2 --draft --max-tokens 6 -- -np 1"
    "f32|--model llama -- -ctk f32 -ctv f32"
    "bf16|--model llama --tolerance 0.05 -- -ctk bf16 -ctv bf16"
    "q8_0|--model llama --head-dim 32 --tolerance 0.05 -- -ctk q8_0 -ctv q8_0 -fa on"
    "q4_0|--model llama --head-dim 32 --tolerance 0.2 -- -ctk q4_0 -ctv q4_0 -fa on"
    "q8_0-rotated-shift|--model llama --layers 1 --head-dim 64 --max-tokens 200 --tolerance 0.05 -- -c 256 -np 1 --context-shift --keep 4 -ctk q8_0 -ctv q8_0 -fa on"
    "q8_0-rotated-reuse|--model llama --layers 1 --head-dim 64 --tolerance 0.05 -- --cache-reuse 2 -ctk q8_0 -ctv q8_0 -fa on"
    "q8_0-reuse|--model llama --layers 1 --head-dim 32 --tolerance 0.05 -- --cache-reuse 2 -ctk q8_0"
    "q8_0-shift|--model llama --layers 1 --head-dim 32 --max-tokens 200 --tolerance 0.05 -- -c 256 -np 1 --context-shift --keep 4 -ctk q8_0"
    "bf16-reuse|--model llama --layers 1 --tolerance 0.05 -- -ctk bf16 -ctv bf16 --cache-reuse 2"
)

for row in "${rows[@]}"; do
    name="${row%%|*}"
    campaign_selected "$name" "$@" || continue
    campaign_run "$name" "exec:$venv/bin/python adapters/llama-cpp/server_subject.py ${row#*|}" 300
done
campaign_table
