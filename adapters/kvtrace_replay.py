#!/usr/bin/env python3
"""Replays kvtrace/1 files through a kvcheck-subject/1 process, in Python.

A small, standard-library-only driver that checks a subject against each
trace's own `expect` (the outcomes the reference model gives), so the
Python subjects in adapters/ can be tested without building kvcheck:

    python3 adapters/kvtrace_replay.py --subject 'python3 adapters/reference_subject.py' \
        tests/vectors/*.kvtrace.json

For every op it compares the outcome (ok / refused, and with --exact-kinds
the error kind), the global end and the visible positions, and, when the
subject returns values, that every view row holds the bytes its writer (from
`expect`) wrote at that position and head, or zeros for a never-written
head. A packed cache with quantization may return a cold row quantized: such
a row must equal the docs/contract.md §6 round trip of the written bytes.

The payload is this driver's own deterministic function of (writer,
position, batch row, head, dim, K|V): finite, never zero, exactly
representable in the dtype, so a row betrays which write it came from.
"""

import argparse
import base64
import json
import shlex
import struct
import subprocess
import sys

from reference_subject import DTYPE_SIZE, cold_round_trip, encode_row

PROTOCOL = "kvcheck-subject/1"

CONFIG_DEFAULTS = {
    "batch": 1,
    "heads": 1,
    "head_dim": 1,
    "dtype": "f32",
    "sink": 0,
    "window": None,
    "growth": False,
    "global_sink": 0,
    "packed": None,
    "seed": 0,
}
PACKED_DEFAULTS = {"keep_recent_chunks": 1, "quant": "int8", "pack_sink": False}


def full_config(raw):
    """The config with every docs/kvtrace.md default filled in (what kvcheck sends)."""
    config = dict(CONFIG_DEFAULTS)
    config.update(raw)
    if config["variant"] == "packed":
        packed = dict(PACKED_DEFAULTS)
        packed.update(config.get("packed") or {})
        config["packed"] = packed
    return config


def _mix(z):
    mask = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


MANTISSA_BITS = {"f32": 23, "f16": 10, "bf16": 7}


def element(seed, dtype, kv, writer, position, batch, head, dim):
    """±(1 + m) · 2^e, e in [-6, 5], m within the dtype's mantissa: exact, never 0."""
    h = _mix(seed ^ 0x6B76636865636B00)
    for part in (writer, position, batch, head, dim, kv):
        h = _mix(h ^ ((part * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)))
    bits = MANTISSA_BITS[dtype]
    mantissa = (h & ((1 << bits) - 1)) / float(1 << bits)
    exponent = ((h >> 32) % 12) - 6
    sign = -1.0 if (h >> 63) else 1.0
    return sign * (1.0 + mantissa) * 2.0 ** exponent


class Payloads:
    """The bytes each write sent, so a view row can be traced to its writer."""

    def __init__(self, config):
        self.config = config
        self.written = {}  # (kv, writer, position, batch, head) -> row bytes

    def row(self, kv, writer, position, batch, head):
        key = (kv, writer, position, batch, head)
        if key not in self.written:
            c = self.config
            values = [
                element(c["seed"], c["dtype"], kv, writer, position, batch, head, d)
                for d in range(c["head_dim"])
            ]
            self.written[key] = encode_row(values, c["dtype"])
        return self.written[key]

    def tensor(self, kv, writer, start, length, heads):
        """[B, len, heads, D] bytes of one write."""
        return b"".join(
            self.row(kv, writer, start + i, b, h)
            for b in range(self.config["batch"])
            for i in range(length)
            for h in heads
        )


class Subject:
    """A running subject process and the request/response exchange with it."""

    def __init__(self, command):
        self.process = subprocess.Popen(
            shlex.split(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            universal_newlines=True,
            bufsize=1,
        )
        self.hello = self.request({"hello": {"protocol": PROTOCOL}})["hello"]

    def request(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("subject exited with status %s" % self.process.wait())
        return json.loads(line)

    def close(self):
        try:
            self.process.stdin.write(json.dumps({"close": {}}) + "\n")
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        status = self.process.wait(timeout=30)
        self.process.stdout.close()
        return status


def head_range(config, op):
    heads = op["write"].get("heads")
    if heads is None:
        return range(config["heads"])
    return range(heads[0], heads[0] + heads[1])


def check_values(config, payloads, op_heads, visible, writers, response):
    """Mismatches between the view bytes and the rows their writers wrote."""
    size = config["head_dim"] * DTYPE_SIZE[config["dtype"]]
    quant = (config.get("packed") or {}).get("quant", "none")
    problems = []
    for kv, key in ((0, "k"), (1, "v")):
        data = base64.b64decode(response[key])
        want_len = config["batch"] * len(visible) * len(op_heads) * size
        if len(data) != want_len:
            return ["%s has %d bytes, expected %d" % (key, len(data), want_len)]
        offset = 0
        for b in range(config["batch"]):
            for i, position in enumerate(visible):
                for j, h in enumerate(op_heads):
                    got = data[offset:offset + size]
                    offset += size
                    writer = writers[j][i]
                    if writer is None:
                        want = bytes(size)
                    else:
                        want = payloads.row(kv, writer, position, b, h)
                    if got == want:
                        continue
                    if quant != "none" and got == cold_round_trip(want, quant, config["dtype"]):
                        continue
                    problems.append(
                        "%s row (position %d, batch %d, head %d) is not what writer %s wrote"
                        % (key, position, b, h, writer)
                    )
    return problems


def replay(subject, trace, exact_kinds=True):
    """Replays one trace; returns a list of human-readable mismatches."""
    config = full_config(trace["config"])
    opened = subject.request({"open": {"config": config}})
    if "ok" not in opened:
        return ["open refused: %s" % json.dumps(opened)]
    payloads = Payloads(config)
    values = bool(subject.hello.get("capabilities", {}).get("values"))
    problems = []
    expects = trace.get("expect") or []
    for index, (op, expect) in enumerate(zip(trace["ops"], expects)):
        request = {"op": op, "index": index}
        is_write = isinstance(op, dict) and "write" in op
        if is_write:
            w = op["write"]
            # As kvcheck sends it (docs/subject-protocol.md): the hc heads a
            # write names, even in a range the contract refuses; all heads
            # for a negative hc.
            heads = head_range(config, op)
            if w.get("heads") is not None and w["heads"][0] < 0:
                heads = range(max(0, w["heads"][1]))
            if w.get("heads") is not None and w["heads"][1] < 0:
                heads = range(config["heads"])
            length = max(0, w["len"])
            start = max(0, w["start"])
            request["k"] = base64.b64encode(payloads.tensor(0, index, start, length, heads)).decode()
            request["v"] = base64.b64encode(payloads.tensor(1, index, start, length, heads)).decode()
        response = subject.request(request)
        where = "op %d %s" % (index, json.dumps(op))
        if "err" in expect:
            if "ok" in response:
                problems.append("%s: expected %s, got ok %s" % (where, expect["err"], response["ok"].get("visible")))
            elif exact_kinds and response.get("err", {}).get("kind") != expect["err"]:
                problems.append("%s: expected %s, got %s" % (where, expect["err"], json.dumps(response)))
            continue
        if "ok" not in response:
            problems.append("%s: expected ok, got %s" % (where, json.dumps(response)))
            continue
        want, got = expect["ok"], response["ok"]
        if got.get("global_end") != want["global_end"]:
            problems.append("%s: global end %s, expected %s" % (where, got.get("global_end"), want["global_end"]))
        if "visible" in want:
            if got.get("visible") != want["visible"]:
                problems.append("%s: visible %s, expected %s" % (where, got.get("visible"), want["visible"]))
            elif values:
                for problem in check_values(
                    config, payloads, head_range(config, op), want["visible"], want["writers"], got
                ):
                    problems.append("%s: %s" % (where, problem))
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subject", required=True, help="command line of the subject process")
    parser.add_argument("--any-refusal", action="store_true", help="any refusal agrees with any error kind")
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args(argv)
    subject = Subject(args.subject)
    failed = 0
    for path in args.traces:
        with open(path) as f:
            trace = json.load(f)
        problems = replay(subject, trace, exact_kinds=not args.any_refusal)
        print("%s %s" % ("ok  " if not problems else "FAIL", path))
        for problem in problems:
            print("     " + problem)
        failed += bool(problems)
    subject.close()
    print("%d passed, %d failed" % (len(args.traces) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
