#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build: every cargo-fuzz target, its seed corpus
# as <target>_seed_corpus.zip and the trace_load dictionary.
cd "$SRC/kvcheck"
cargo fuzz build -O --debug-assertions
out_dir=fuzz/target/x86_64-unknown-linux-gnu/release
for target in dense_lockstep packed_lockstep model_invariants trace_load; do
    cp "$out_dir/$target" "$OUT/"
    if [ -d "fuzz/corpus/$target" ]; then
        (cd "fuzz/corpus/$target" && zip -q -r "$OUT/${target}_seed_corpus.zip" .)
    fi
done
cp fuzz/trace_load.dict "$OUT/trace_load.dict"
