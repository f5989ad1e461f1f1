#!/usr/bin/env python3
"""Random traces of the clean protocol of docs/contract.md §8, with `expect` filled in.

The clean protocol is how a streaming video-diffusion pipeline uses its
cache and where docs/contract.md says sglang 0.5.23 agrees with the contract: the
first write at 0; each chunk appended at the global end G and then rewritten
in place any number of times (the denoise steps); every chunk
`n <= C - S`; `W = C`; `r` absent or `r <= C - S - n`; no pins, no head
ranges. This generator adds `reset` (a new stream, which starts again at 0)
and draws dense and packed (quant "none") configurations over every dtype,
batch 1-2, heads 1-3, head_dim 1-4, global_sink 0..S.

`expect` comes from adapters/reference_subject.py's model of the contract
(`kvcheck expect FILE` fills the same from kvmodel), so the traces replay
both with `kvcheck replay` and with adapters/kvtrace_replay.py.

    python3 adapters/clean_protocol.py --count 300 --seed 1 --out target/sglang-clean
    python3 adapters/clean_protocol.py --subject 'CMD' ...   # only what CMD can express
"""

import argparse
import json
import os
import random
import sys

from reference_subject import Cache, parse_config
from kvtrace_replay import Subject, full_config


ALL = {"variants": ["dense", "packed"], "features": ["recent_window", "global_sink"]}


def random_config(rng, caps=ALL):
    capacity = rng.randint(2, 16)
    sink = rng.randint(0, min(3, capacity - 1))
    config = {
        "variant": rng.choice(["dense", "dense", "packed"] if "packed" in caps["variants"] else ["dense"]),
        "batch": rng.randint(1, 2),
        "heads": rng.randint(1, 3),
        "head_dim": rng.randint(1, 4),
        "dtype": rng.choice(["f32", "f16", "bf16"]),
        "capacity": capacity,
        "sink": sink,
        "window": None,
        "growth": False,
        "global_sink": 0,
        "packed": None,
        "seed": rng.randint(0, 1 << 32),
    }
    if config["variant"] == "dense":
        if "global_sink" in caps["features"]:
            config["global_sink"] = rng.randint(0, sink)
    else:
        config["packed"] = {
            "keep_recent_chunks": rng.randint(0, 3),
            "quant": "none",
            "pack_sink": rng.random() < 0.5,
        }
    return config


def random_ops(rng, config, max_ops, caps=ALL):
    """Appends at G, each followed by 0-3 in-place rewrites; now and then a reset."""
    room = config["capacity"] - config["sink"]
    ops, global_end = [], 0
    while len(ops) < max_ops:
        if global_end > 0 and rng.random() < 0.05:
            ops.append("reset")
            global_end = 0
            continue
        n = rng.randint(1, room)
        start = global_end
        for _ in range(1 + rng.choice([0, 0, 1, 1, 2, 3])):
            write = {"start": start, "len": n}
            if "recent_window" in caps["features"] and rng.random() < 0.3:
                write["recent_window"] = rng.randint(0, room - n)
            ops.append({"write": write})
        global_end = start + n
    return ops[:max_ops]


def expect(config, ops):
    """The contract's outcome of every op (positions, writers, global end)."""
    cache = Cache(parse_config(config))
    out = []
    for index, op in enumerate(ops):
        if op == "reset":
            out.append({"ok": cache.reset()})
            continue
        w = op["write"]
        heads = range(config["heads"])
        size = config["batch"] * w["len"] * config["heads"] * cache.row_bytes
        visible, _, _ = cache.write(index, w, bytes(size), bytes(size))
        writers = [[cache.resident[p][h] for p in visible] for h in heads]
        out.append({"ok": {"global_end": cache.global_end, "visible": visible, "writers": writers}})
    return out


def generate(count, seed, max_ops, caps=ALL):
    """`count` traces; `caps` (a subject's hello capabilities) limits the
    variants and the optional recent window and global sink."""
    rng = random.Random(seed)
    for i in range(count):
        config = full_config(random_config(rng, caps))
        ops = random_ops(rng, config, rng.randint(1, max_ops), caps)
        yield i, {
            "format": "kvtrace/1",
            "note": "clean protocol of docs/contract.md §8 (adapters/clean_protocol.py --seed %d, trace %d)" % (seed, i),
            "config": config,
            "ops": ops,
            "expect": expect(config, ops),
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-ops", type=int, default=24)
    parser.add_argument("--out", required=True, help="directory for clean-NNNN.kvtrace.json")
    parser.add_argument(
        "--subject",
        help="command line of a kvcheck-subject/1 process: draw only what its hello says it can express",
    )
    args = parser.parse_args(argv)
    caps = ALL
    if args.subject:
        subject = Subject(args.subject)
        caps = dict(ALL, **subject.hello.get("capabilities", {}))
        subject.close()
    os.makedirs(args.out, exist_ok=True)
    for i, trace in generate(args.count, args.seed, args.max_ops, caps):
        with open(os.path.join(args.out, "clean-%04d.kvtrace.json" % i), "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")
    print("wrote %d clean-protocol traces to %s" % (args.count, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
