#!/usr/bin/env bash
# Reproduces docs/sglang.md: sglang's real caches checked through the
# kvcheck-subject/1 protocol.
#
#   scripts/sglang-findings.sh            # clean protocol, findings, ops/s
#   scripts/sglang-findings.sh releases   # every release 0.5.13 ... 0.5.23
#   SGLANG_RELEASES="0.5.16 0.5.23" scripts/sglang-findings.sh releases
#
# 1. adapters/sglang/setup.sh (venv with torch, the sglang kvcache sources);
# 2. builds kvcheck (KVCHECK=path skips the build);
# 3. the clean protocol of docs/contract.md §8: 300 random traces
#    (adapters/clean_protocol.py), replayed with exact error kinds;
# 4. the divergence classes: scripts/sglang_findings.py runs ten engine
#    searches in triage mode (--keep-going: every divergence grouped by
#    signature, one minimized representative each), matches the findings
#    to the classes of docs/contract.md §8, replays them unmasked, and saves
#    tests/external/sglang/*.kvtrace.json and findings.json;
# 5. with `releases`: the clean protocol and the saved findings replayed on
#    each release of SGLANG_RELEASES, default 0.5.13 to 0.5.23
#    (scripts/sglang_releases.py).
#
# Output goes to target/sglang-findings/ (report.md, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUST_BACKTRACE

version="${SGLANG_VERSION:-0.5.23}"
work=target/sglang-findings
mkdir -p "$work"

SGLANG_VERSION="$version" adapters/sglang/setup.sh
python=adapters/sglang/.venv/bin/python
if [ -z "${KVCHECK:-}" ]; then
    # The dev profile builds every dependency with opt-level 3 (Cargo.toml);
    # the Python subject, not kvcheck, bounds the rate here.
    cargo build -p kvcheck
    KVCHECK=target/debug/kvcheck
fi
subject="exec:$python adapters/sglang/subject.py --version $version"

if [ "${1:-}" = "releases" ]; then
    python3 scripts/sglang_releases.py --kvcheck "$KVCHECK" --python "$python" \
        --work "$work/releases" --report "$work/releases.md" ${SGLANG_RELEASES:-}
    exit 0
fi

echo "== clean protocol (docs/contract.md §8): 300 traces, sglang $version"
rm -rf "$work/clean"
python3 adapters/clean_protocol.py --count 300 --seed 1 --out "$work/clean"
ops=$(python3 - "$work/clean" <<'PY'
import glob, json, sys
print(sum(len(json.load(open(f))["ops"]) for f in glob.glob(sys.argv[1] + "/*.kvtrace.json")))
PY
)
first_ops=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["ops"]))' "$work/clean/clean-0000.kvtrace.json")
echo "$(ls "$work"/clean/*.kvtrace.json | wc -l) traces, $ops ops"
now() { python3 -c 'import time; print(time.monotonic())'; }
"$KVCHECK" replay -q --exact-kinds --subject-timeout 120 --subject "$subject" "$work/clean" | tail -n 1
# The rate: the 300 traces replayed five times over by one process, less a
# replay of one trace alone, which measures the process start (interpreter,
# torch, the sglang modules).
start=$(now)
"$KVCHECK" replay -q --exact-kinds --subject-timeout 120 --subject "$subject" "$work/clean/clean-0000.kvtrace.json" > /dev/null 2>&1
one=$(now)
"$KVCHECK" replay -q --exact-kinds --subject-timeout 120 --subject "$subject" \
    "$work/clean" "$work/clean" "$work/clean" "$work/clean" "$work/clean" > /dev/null 2>&1
all=$(now)
python3 - "$start" "$one" "$all" "$ops" "$first_ops" <<'PY'
import sys
start, one, end = map(float, sys.argv[1:4])
ops, first = 5 * int(sys.argv[4]), int(sys.argv[5])
startup, total = one - start, end - one
print("rate run: %d ops in %.1f s; process start and one trace alone: %.1f s" % (ops, total, startup))
print("through the protocol: %d ops in %.1f s = %.0f ops/s (each op: one request, sglang's call on the cache and its position twins, one response, checked by kvcheck)"
      % (ops - first, total - startup, (ops - first) / (total - startup)))
PY

echo "== divergence classes"
python3 scripts/sglang_findings.py --kvcheck "$KVCHECK" --python "$python" --version "$version" \
    --work "$work/searches" --report "$work/report.md"
