#!/usr/bin/env python3
"""Random traces of the protocols on which mlx-lm's caches agree with docs/contract.md.

An LLM generation loop uses its cache in one way: a prompt appended in
chunks (prefill), then one token at a time (decode), with rejected draft
tokens trimmed off the end and written again (speculative decoding) and the
cache trimmed back for prompt-cache reuse. These generators draw random
traces of that protocol restricted to where docs/mlx-lm.md says mlx-lm's
contract and docs/contract.md coincide (`kvcheck replay` runs the model beside the
subject, so the traces carry no `expect`):

- `rotating` (`RotatingKVCache(max_size=C, keep=0)`): no sink (`S = 0`);
  `W = C`, or a sliding window `W < C`; chunks of 1..W tokens appended at
  the global end (a third of them single-token decode steps); while
  `G < C` (before the cache first fills, when `is_trimmable()` holds), also
  rewrites of the tail (`s < G <= s + n`) and rewinds.
- `kv` (`KVCache()`): `growth` configs (the cache never evicts); any sink
  with `W = C`, or `S = 0` and a window `W < C`; appends of 1..W tokens,
  rewrites of the tail and rewinds anywhere.

    python3 adapters/mlx-lm/protocol.py --cache rotating --count 300 --seed 1 --out target/mlx-lm/rotating
    target/debug/kvcheck replay target/mlx-lm/rotating --subject exec:'adapters/mlx-lm/.venv/bin/python adapters/mlx-lm/subject.py'
"""

import argparse
import json
import os
import random
import sys

# This script's one bootstrap: kvcheck's Rust tests (tests/external/mlx_lm.rs)
# run it with a bare `python3`, no venv and no PYTHONPATH, so it finds
# adapters/kvtrace_replay.py beside its folder (whose reference_subject.py
# finds the kvcheck package itself).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvtrace_replay import full_config  # noqa: E402


def random_config(rng, cache, keep=0):
    capacity = rng.randint(2 + keep, 12 + keep) if cache == "rotating" else rng.randint(1, 6)
    windowed = (keep > 0 or rng.random() < 0.4) and capacity > 1
    sink = 0 if cache == "rotating" or windowed else rng.randint(0, capacity - 1)
    return full_config(
        {
            "variant": "dense",
            "batch": rng.randint(1, 2),
            "heads": rng.randint(1, 3),
            "head_dim": rng.randint(1, 4),
            "dtype": rng.choice(["f32", "f16", "bf16"]),
            "capacity": capacity,
            "sink": sink,
            # With keep tokens the window must hide them: W <= C - keep.
            "window": rng.randint(1, capacity - max(1, keep)) if windowed else None,
            "growth": cache == "kv",
            "seed": rng.randint(0, 1 << 32),
        }
    )


def random_ops(rng, config, count, cache):
    capacity = config["capacity"]
    window = config["window"] or capacity
    ops, end = [], 0
    while len(ops) < count:
        trimmable = cache == "kv" or end < capacity
        roll = rng.random()
        if end > 0 and trimmable and roll < 0.1:
            ops.append({"rewind": {"to": rng.randint(0, end)}})
            end = ops[-1]["rewind"]["to"]
            continue
        if end > 0 and trimmable and roll < 0.25:
            start = rng.randint(max(0, end - window), end - 1)
            n = rng.randint(end - start, window)
        else:
            start = end
            n = 1 if rng.random() < 0.35 else rng.randint(1, window)
        ops.append({"write": {"start": start, "len": n}})
        end = max(end, start + n)
    return ops


def generate(cache, count, seed, max_ops, keep=0):
    rng = random.Random(seed)
    for i in range(count):
        config = random_config(rng, cache, keep)
        ops = random_ops(rng, config, rng.randint(1, max_ops), cache)
        yield i, {
            "format": "kvtrace/1",
            "note": "mlx-lm %s protocol (adapters/mlx-lm/protocol.py --cache %s%s --seed %d, trace %d)"
            % (cache, cache, " --keep %d" % keep if keep else "", seed, i),
            "config": config,
            "ops": ops,
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=["rotating", "kv"], default="rotating")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-ops", type=int, default=24)
    parser.add_argument(
        "--keep",
        type=int,
        default=0,
        help="rotating only: draw sliding-window configs with W <= C - KEEP, for a subject run with --keep KEEP"
        " (the window must hide the kept tokens, so the contract's view is the right one)",
    )
    parser.add_argument("--out", required=True, help="directory for <cache>-NNNN.kvtrace.json")
    args = parser.parse_args(argv)
    if args.keep and args.cache != "rotating":
        parser.error("--keep is for --cache rotating")
    os.makedirs(args.out, exist_ok=True)
    for i, trace in generate(args.cache, args.count, args.seed, args.max_ops, args.keep):
        with open(os.path.join(args.out, "%s-%04d.kvtrace.json" % (args.cache, i)), "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")
    print("wrote %d %s-protocol traces to %s" % (args.count, args.cache, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
