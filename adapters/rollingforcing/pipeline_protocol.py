#!/usr/bin/env python3
"""Random kvtrace/1 traces of what Rolling Forcing's inference loop asks of its cache.

    python3 adapters/rollingforcing/pipeline_protocol.py --count 200 --seed 1 --out DIR

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

import argparse
import json
import os
import random
import sys


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
    config = {
        "variant": "dense",
        "batch": rng.randint(1, 2),
        "heads": rng.randint(1, 3),
        "head_dim": rng.randint(1, 4),
        "dtype": rng.choice(["f32", "f16", "bf16"]),
        "capacity": capacity,
        "sink": sink,
        "seed": rng.randint(0, 1 << 32),
    }
    return config, ops, note


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        config, ops, note = trace(rng)
        body = {"format": "kvtrace/1", "note": "%s (pipeline_protocol.py --seed %d, trace %d)" % (note, args.seed, i),
                "config": config, "ops": ops}
        with open(os.path.join(args.out, "rollingforcing-%04d.kvtrace.json" % i), "w") as f:
            json.dump(body, f, indent=1)
            f.write("\n")
    print("wrote %d Rolling Forcing traces to %s" % (args.count, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
