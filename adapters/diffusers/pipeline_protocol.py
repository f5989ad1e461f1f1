#!/usr/bin/env python3
"""Random kvtrace/1 traces of what a diffusers video pipeline asks of its cache.

    PYTHONPATH=python python3 adapters/diffusers/pipeline_protocol.py --cache sana-wm-refiner --count 300 --seed 1 --out DIR
    PYTHONPATH=python python3 adapters/diffusers/pipeline_protocol.py --cache anyflow-far --count 100 --seed 1 --out DIR

`sana-wm-refiner`: `SanaWMLTX2Refiner.__call__` with `sink_size` S in 1..3
(`--sink-min 0` admits 0), `block_size` b in 1..4 and `kv_max_frames` =
S + h, h in 1..10 recent frames: the config has `capacity` C =
`kv_max_frames` + b and `sink` S; the trace writes the sink `0+S` once,
then 1..12 blocks of b frames, each appended and rewritten in place for
the rest of its 1..4 denoising steps (one count per trace, as a sigma
schedule is), and now and then a reset (the next video).

`anyflow-far`: `AnyFlowFARPipeline.__call__` on a `growth` config (the
cache keeps every frame): 1..8 chunks of 1..4 frames (the released
`chunk_partition` is `1, 3, 3, 3, 3, 3, 3, 2`), each appended and rewritten
for the rest of its 1..4 denoising steps, and now and then a reset.

Traces carry no `expect`: `kvcheck replay DIR --subject ...` runs the model
beside the subject.
"""

import argparse
import json
import os
import random
import sys

from kvcheck.pipeline.traces import random_config


def config(rng, capacity, sink, growth=False):
    return random_config(rng, capacity, sink, growth=growth)


def video(ops, chunks):
    """Appends every chunk at the global end, rewritten for the rest of its steps."""
    start = 0
    for n, repeat in chunks:
        for _ in range(repeat):
            ops.append({"write": {"start": start, "len": n}})
        start += n


def refiner(rng, sink_min):
    sink = rng.randint(sink_min, 3)
    block = rng.randint(1, 4)
    recent = rng.randint(1, 10)
    steps = rng.randint(1, 4)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        if ops:
            ops.append("reset")
        chunks = ([(sink, 1)] if sink else []) + [(block, steps)] * rng.randint(1, 12)
        video(ops, chunks)
    note = "SANA-WM refiner: sink_size %d, block_size %d, kv_max_frames %d, %d denoising steps" % (
        sink, block, sink + recent, steps)
    return config(rng, sink + recent + block, sink), ops, note


def anyflow(rng):
    steps = rng.randint(1, 4)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        if ops:
            ops.append("reset")
        video(ops, [(rng.randint(1, 4), steps) for _ in range(rng.randint(1, 8))])
    note = "AnyFlow-FAR: %d denoising steps per chunk" % steps
    return config(rng, rng.randint(2, 16), rng.randint(0, 1), growth=True), ops, note


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=["sana-wm-refiner", "anyflow-far"], required=True)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sink-min", type=int, default=1, help="sana-wm-refiner: smallest sink_size drawn (default 1)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        cfg, ops, note = refiner(rng, args.sink_min) if args.cache == "sana-wm-refiner" else anyflow(rng)
        trace = {"format": "kvtrace/1", "note": "%s (pipeline_protocol.py --seed %d, trace %d)" % (note, args.seed, i),
                 "config": cfg, "ops": ops}
        with open(os.path.join(args.out, "%s-%04d.kvtrace.json" % (args.cache, i)), "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")
    print("wrote %d %s traces to %s" % (args.count, args.cache, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
