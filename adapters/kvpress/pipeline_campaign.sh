#!/usr/bin/env bash
# The campaign of docs/kvpress.md: `kvcheck run --keep-going` on kvpress's
# pipeline (adapters/kvpress/pipeline_subject.py) for each press it judges
# (none, StreamingLLMPress, KeyRerotationPress over it) at compression
# ratios that keep more and fewer tokens than the sinks, with one and
# several answer tokens, one question and two, on DynamicCache and
# QuantizedCache, and the decoding presses (DecodingPress,
# PrefillDecodingPress, CompressionRatioDecodingPress over
# StreamingLLMPress), which compress while the answer is generated. Writes, per
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

# shellcheck source=../campaign-kit.sh
. "$(dirname "${BASH_SOURCE[0]}")/../campaign-kit.sh"
venv="${VENV:-adapters/kvpress/.venv}"
campaign_init pipeline_campaign "$venv/KVCHECK_KVPRESS_READY" adapters/kvpress/setup.sh target/kvpress-campaign 45

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
    "decoding|--press decoding --sink 2 --interval 2 --target 8 --max-tokens 6"
    "decoding-every-step|--press decoding --sink 2 --interval 1 --target 5 --max-tokens 4"
    "prefill-decoding|--press prefill-decoding --ratio 0.5 --sink 2 --interval 2 --target 8 --max-tokens 4"
    "ratio-decoding|--press ratio-decoding --ratio 0.25 --sink 2 --interval 2 --max-tokens 6"
    "decoding-quantized|--press decoding --sink 2 --interval 2 --target 8 --max-tokens 5 --cache quantized --tolerance 0.02"
    "decoding-quantized-even|--press decoding --sink 2 --interval 2 --target 8 --max-tokens 4 --cache quantized --tolerance 0.02"
)

for row in "${rows[@]}"; do
    name="${row%%|*}"
    campaign_selected "$name" "$@" || continue
    campaign_run "$name" "exec:$venv/bin/python adapters/kvpress/pipeline_subject.py ${row#*|}" 300
done
campaign_table
