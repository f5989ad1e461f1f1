#!/usr/bin/env python3
"""Random kvtrace/1 traces of what LightX2V's self-forcing loop asks of its cache.

    python3 adapters/lightx2v/pipeline_protocol.py --count 200 --seed 1 --out DIR

`WanSFRunner` with `sink_size` S in 0..3, chunks of n in 1..4 tokens (one
token per frame, `num_frame_per_chunk` n), `local_attn_size` C = S + n +
0..8 (the capacity; the window is the whole cache): every segment is
appended at the global end, rewritten for the rest of its 1..4 denoising
steps and once more by `end_run_segment`'s re-run, for 1..12 segments; now
and then a reset (the next video). Batch 1..2, heads 1..3, head_dim 1..4,
f32/f16/bf16.

Traces carry no `expect`: `kvcheck replay DIR --subject ...` runs the model
beside the subject.
"""

import sys

from kvcheck.pipeline import traces


def trace(rng):
    sink, n = rng.randint(0, 3), rng.randint(1, 4)
    capacity = sink + n + rng.randint(0, 8)
    steps = rng.randint(1, 4)
    ops = []
    for video in range(rng.choice([1, 1, 1, 2])):
        if video:
            ops.append("reset")
        for segment in range(rng.randint(1, 12)):
            for _ in range(steps + 1):  # the denoising steps, then the re-run
                ops.append({"write": {"start": segment * n, "len": n}})
    config = traces.random_config(rng, capacity, sink)
    note = "LightX2V self-forcing: local_attn_size %d, sink_size %d, num_frame_per_chunk %d, %d denoising steps" % (
        capacity, sink, n, steps)
    return config, ops, note


def main(argv=None):
    return traces.main(argv, __doc__, trace, "lightx2v", label="LightX2V")


if __name__ == "__main__":
    sys.exit(main())
