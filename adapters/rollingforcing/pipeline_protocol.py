#!/usr/bin/env python3
"""Random kvtrace/1 traces of what Rolling Forcing's inference loop asks of its cache.

    PYTHONPATH=python python3 adapters/rollingforcing/pipeline_protocol.py --count 200 --seed 1 --out DIR

`CausalInferencePipeline.inference_rolling_forcing` with a window of one
block (`num_denoising_steps` 1, so that a denoising read is a function of
the cache: see docs/rollingforcing.md), a block (the anchor, the sink S) of
1..3 frames, a window `max_attention_size` C of 2S..2S+8 frames, and
1..12 blocks a video: each block is appended at the global end by its
denoising forward and rewritten by its clean re-run (`updating_cache=True`);
now and then a reset (the next video).

Traces carry no `expect`: `kvcheck replay DIR --subject ...` runs the model
beside the subject.
"""

import sys

from kvcheck.pipeline import traces


def trace(rng):
    sink = rng.randint(1, 3)
    capacity = 2 * sink + rng.randint(0, 8)
    ops = []
    for video in range(rng.choice([1, 1, 1, 2])):
        if video:
            ops.append("reset")
        for block in range(rng.randint(1, 12)):
            start = block * sink
            ops.append({"write": {"start": start, "len": sink}})  # the denoising forward
            ops.append({"write": {"start": start, "len": sink}})  # the clean re-run
    note = "Rolling Forcing: block (anchor) %d frames, max_attention_size %d, one-block windows" % (sink, capacity)
    config = traces.random_config(rng, capacity, sink)
    return config, ops, note


def main(argv=None):
    return traces.main(argv, __doc__, trace, "rollingforcing", label="Rolling Forcing")


if __name__ == "__main__":
    sys.exit(main())
