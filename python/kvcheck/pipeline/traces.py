"""The plumbing of a pipeline adapter's pipeline_protocol.py: random kvtrace/1
traces of what the library's loop asks of its cache.

The adapter writes `trace(rng, **options)`, which draws one config (most
of it `random_config`'s) and its ops with `rng` (a `random.Random`) and
returns `(config, ops, note)` (`note` a line saying which loop settings it
drew, or None); `main` does the rest:

    traces.main(argv, __doc__, trace, "longlive", label="LongLive", count=200,
                options=[("--aligned", {"action": "store_true", "help": ...})])

writes `DIR/<prefix>-NNNN.kvtrace.json` for `--count`, `--seed`, `--out`
(and the `options`, passed to `trace` by their names). `generate` yields the
same traces in order; with `expect` each carries the contract's outcomes
(adapters/clean_protocol.py's model, the config with its defaults filled in)
so that adapters/kvtrace_replay.py replays it without kvcheck.
"""

import argparse
import json
import os
import random

from ..adapter import shared


def random_config(rng, capacity, sink, **more):
    """A dense config of `capacity` and `sink` (and `more`), the rest drawn
    with `rng` in this order: batch 1-2, heads 1-3, head_dim 1-4, the dtype
    (f32, f16, bf16), and last the payload seed."""
    config = {
        "variant": "dense",
        "batch": rng.randint(1, 2),
        "heads": rng.randint(1, 3),
        "head_dim": rng.randint(1, 4),
        "dtype": rng.choice(["f32", "f16", "bf16"]),
        "capacity": capacity,
        "sink": sink,
    }
    config.update(more)
    config["seed"] = rng.randint(0, 1 << 32)
    return config


def generate(trace, count, seed, expect=False, **options):
    """`count` traces of `trace` from `random.Random(seed)`, each a kvtrace/1
    dict: `format`, `note` (when the trace has one, with the seed and its
    index), `config`, `ops`, and with `expect` the contract's outcomes."""
    rng = random.Random(seed)
    for i in range(count):
        config, ops, note = trace(rng, **options)
        body = {"format": "kvtrace/1"}
        if note is not None:
            body["note"] = "%s (pipeline_protocol.py --seed %d, trace %d)" % (note, seed, i)
        body["config"], body["ops"] = config, ops
        if expect:
            body["config"] = shared("kvtrace_replay").full_config(config)
            body["expect"] = shared("clean_protocol").expect(body["config"], ops)
        yield body


def main(argv, doc, trace, prefix, label=None, count=200, options=(), expect=False, out_help=None, indent=1):
    """The generator's command line: `--count` (default `count`), `--seed`,
    then `options` (pairs of flag and add_argument keywords), `--out`, and
    with `expect` an `--expect` flag; writes each trace as
    `<out>/<prefix>-NNNN.kvtrace.json` (JSON indented by `indent`, None for
    one line) and says how many it wrote (naming `label`, when given)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=count)
    parser.add_argument("--seed", type=int, default=1)
    for flag, keywords in options:
        parser.add_argument(flag, **keywords)
    parser.add_argument("--out", required=True, help=out_help)
    if expect:
        parser.add_argument("--expect", action="store_true", help="fill in `expect` from the contract's model")
    args = parser.parse_args(argv)
    chosen = {flag.lstrip("-").replace("-", "_"): None for flag, _ in options}
    chosen = {name: getattr(args, name) for name in chosen}
    os.makedirs(args.out, exist_ok=True)
    for i, body in enumerate(generate(trace, args.count, args.seed, expect and args.expect, **chosen)):
        with open(os.path.join(args.out, "%s-%04d.kvtrace.json" % (prefix, i)), "w") as f:
            json.dump(body, f, indent=indent)
            if indent is not None:
                f.write("\n")
    if label is None:
        print("%d traces in %s" % (args.count, args.out))
    else:
        print("wrote %d %s traces to %s" % (args.count, label, args.out))
    return 0
