#!/usr/bin/env python3
"""Random kvtrace/1 traces of what a Self-Forcing-style chunk loop asks of its cache.

    PYTHONPATH=python python3 adapters/self-forcing/pipeline_protocol.py --count 300 --seed 1 --out DIR

The loop of Self-Forcing's `CausalInferencePipeline.inference` and of
fastvideo's causal denoising stages: `local_attn_size` C in 2..12 frames,
`sink_size` S in 0..min(3, C - 1), `num_frame_per_block` b in 1..C - S (a
chunk that fits beside the sink), sometimes an independent first frame
(chunks `[1, b, b, ...]`); every chunk is appended, rewritten for the rest
of its 1..4 denoising steps, then rewritten once more by the clean-context
rerun at the context timestep; now and then a probe (`G+0`) and a reset
(the next video). One config per trace: batch 1-2, heads 1-3, head_dim
1-4, f32/f16/bf16.

Traces carry no `expect` unless `--expect` (adapters/clean_protocol.py's
model of the contract): `kvcheck replay DIR --subject ...` runs the model
beside the subject.
"""

import sys

from kvcheck.pipeline import traces


def trace(rng):
    capacity = rng.randint(2, 12)
    sink = rng.randint(0, min(3, capacity - 1))
    block = rng.randint(1, capacity - sink)
    steps = rng.randint(1, 4)
    config = traces.random_config(rng, capacity, sink)
    ops = []
    for video in range(rng.choice([1, 1, 1, 2])):
        if video:
            ops.append("reset")
        chunks = [block] * rng.randint(1, 10)
        if rng.random() < 0.3:
            chunks.insert(0, 1)  # independent_first_frame: [1, b, b, ...]
        start = 0
        for n in chunks:
            for _ in range(steps + 1):  # the denoising steps, then the clean-context rerun
                ops.append({"write": {"start": start, "len": n}})
            start += n
            if rng.random() < 0.2:
                ops.append({"write": {"start": start, "len": 0}})
    return config, ops, None


def generate(count, seed, expect=False):
    """`count` traces of `trace` (with `expect`, the contract's outcomes filled in)."""
    return traces.generate(trace, count, seed, expect)


def main(argv=None):
    return traces.main(argv, __doc__, trace, "chunk-loop", count=300, expect=True,
                       out_help="directory for the traces", indent=None)


if __name__ == "__main__":
    sys.exit(main())
