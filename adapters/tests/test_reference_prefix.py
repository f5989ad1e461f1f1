"""The stdlib reference prefix subject, through the prefix family of kvcheck-subject/1.

Run: PYTHONPATH=python python3 -m unittest discover -s adapters/tests -v

Every trace here names the outcome of each op (kvtrace/1's `expect`) and
is replayed through the subject's session; every read, and a probe of
every running request after every op, must return the payload of the
request's own computed tokens (docs/contract.md §16).
"""

import base64
import json
import os
import random
import re
import struct
import subprocess
import sys
import unittest

from kvcheck.adapter import load_module, script_env
from kvcheck.prefix import HARNESS_HELLO as HELLO, OPS, PrefixSession, payload_bits

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
ROOT = os.path.dirname(ADAPTERS)
reference = load_module(ADAPTERS, "reference_prefix_subject")



def doc_example():
    """The prefix trace of docs/kvtrace.md ("An example"), read from the page."""
    with open(os.path.join(ROOT, "docs", "kvtrace.md")) as f:
        text = f.read()
    section = text[text.index("### An example"):]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def rows_of(ok):
    data = base64.b64decode(ok["rows"])
    return list(struct.unpack("<%dI" % (len(data) // 4), data))


class Replay:
    """A reference subject behind its session, checked after every op."""

    def __init__(self, test, config):
        defaults = {"variant": "prefix", "layers": 1, "row_width": 1, "hit": "leave_one", "seed": 0}
        self.test, self.config = test, dict(defaults, **config)
        self.session = PrefixSession(reference.ReferencePrefix())
        self.session.handle(HELLO)
        test.assertEqual(self.session.handle({"open": {"config": self.config}}),
                         {"ok": {"in_use": 0, "cached": 0, "free": self.config["blocks"]}})
        self.index = 0

    @property
    def subject(self):
        return self.session.subject

    def payload(self, request):
        record = self.subject.requests[request]
        c = self.config
        rows = payload_bits(c["seed"], record.tokens[: record.computed], c["layers"], c["row_width"])
        return [x for layer in rows for row in layer for x in row]

    def op(self, op):
        """The op's outcome as a trace's `expect` writes it."""
        response = self.session.handle({"op": op, "index": self.index})
        self.index += 1
        if "err" in response:
            outcome = {"err": response["err"]["kind"]}
        else:
            self.test.assertIn("ok", response, "op %s: %s" % (op, response))
            ok = dict(response["ok"])
            if "rows" in ok:
                self.test.assertEqual(rows_of(ok), self.payload(op["read"]["request"]), "op %s" % op)
                del ok["rows"]
            outcome = {"ok": ok}
        self.probe()
        return outcome

    def probe(self):
        """The read probe of every request, as kvcheck sends it after every op."""
        for request, record in list(self.subject.requests.items()):
            response = self.session.handle({"read": {"request": request}})
            if record.preempted:
                self.test.assertEqual(response["err"]["kind"], "preempted")
            else:
                self.test.assertEqual(response["ok"]["read"], record.computed)
                self.test.assertEqual(rows_of(response["ok"]), self.payload(request), "request %d" % request)

    def run(self, ops, expect):
        for i, (op, want) in enumerate(zip(ops, expect)):
            self.test.assertEqual(self.op(op), want, "op %d: %s" % (i, op))


def ok(in_use, cached, free, **first):
    return {"ok": dict(first, in_use=in_use, cached=cached, free=free)}


def start(r, tokens):
    return {"start": {"request": r, "tokens": tokens}}


def compute(r, count):
    return {"compute": {"request": r, "count": count}}


def extend(r, tokens):
    return {"extend": {"request": r, "tokens": tokens}}


def one(op, r):
    return {op: {"request": r}}


class DocExample(unittest.TestCase):
    def test_the_kvtrace_example_agrees_exactly(self):
        trace = doc_example()
        self.assertEqual(len(trace["ops"]), 25)
        Replay(self, trace["config"]).run(trace["ops"], trace["expect"])

    def test_hello(self):
        caps = PrefixSession(reference.ReferencePrefix()).handle(HELLO)["hello"]["capabilities"]
        self.assertEqual(caps, {"ops": list(OPS), "hit": ["leave_one", "whole"], "policy": "contract", "steps": "free"})


class Scenarios(unittest.TestCase):
    """Hand-written cases of §12-§15, each outcome worked out by hand."""

    def test_merge_two_requests_that_computed_one_prefix(self):
        s = Replay(self, {"blocks": 8, "block_size": 2})
        s.run([start(0, [1, 2, 3]), start(1, [1, 2, 3]), compute(0, 3), compute(1, 3),
               one("finish", 0), one("finish", 1), start(2, [1, 2, 9])],
              [ok(2, 0, 6, hit=0), ok(4, 0, 4, hit=0), ok(4, 0, 4),
               ok(3, 0, 5),  # r1's [1 2] merges onto r0's: one block per prefix
               ok(2, 0, 6),  # r0's partial block is freed, [1 2] is still held by r1
               ok(0, 1, 7), ok(2, 0, 6, hit=2)])

    def test_merge_onto_a_cached_block(self):
        s = Replay(self, {"blocks": 4, "block_size": 2, "hit": "whole"})
        s.run([start(0, [1, 2]), start(1, [1, 2, 3]), compute(0, 2), one("finish", 0), compute(1, 3)],
              [ok(1, 0, 3, hit=0), ok(3, 0, 1, hit=0), ok(3, 0, 1), ok(2, 1, 1),
               ok(2, 0, 2)])  # [1 2] was cached: r1 holds it, its own copy is free

    def test_eviction_order(self):
        s = Replay(self, {"blocks": 4, "block_size": 1})
        s.run([start(0, [1, 2]), compute(0, 2), one("finish", 0),
               start(1, [5, 6]), compute(1, 2), one("finish", 1),
               {"evict": {"blocks": 1}}],
              [ok(2, 0, 2, hit=0), ok(2, 0, 2), ok(0, 2, 2),
               ok(2, 2, 0, hit=0), ok(2, 2, 0), ok(0, 4, 0),
               ok(0, 3, 1)])
        # The oldest release first (op 2), and of one release the longest.
        self.assertEqual(sorted(s.subject.pool.cached), [(1,), (5,), (5, 6)])
        # r2 hits [1] and needs two blocks, one free: the oldest other is
        # [5 6] (op 5, the longest first), not [1], which r2 holds before
        # it allocates.
        s.run([start(2, [1, 2, 3])], [ok(3, 1, 0, hit=1)])
        self.assertEqual(sorted(s.subject.pool.cached), [(5,)])
        # [5] is r3's hit, so nothing else can be evicted: no room, nothing changes.
        s.run([start(3, [5, 7]), start(3, [5])], [{"err": "no_room"}, ok(4, 0, 0, hit=0)])

    def test_copy_on_write_of_a_shared_partial_block(self):
        s = Replay(self, {"blocks": 6, "block_size": 2, "layers": 2, "row_width": 3})
        s.run([start(0, [1, 2, 3]), compute(0, 3), {"fork": {"request": 0, "into": 1}},
               extend(1, [4]), compute(1, 1), extend(0, [5]), compute(0, 1),
               one("read", 0), one("read", 1)],
              [ok(2, 0, 4, hit=0), ok(2, 0, 4), ok(2, 0, 4),
               ok(3, 0, 3),  # r1 writes into the shared [3]: a copy first
               ok(3, 0, 3),
               ok(3, 0, 3),  # r0 alone holds the old partial block now: no copy
               ok(3, 0, 3), ok(3, 0, 3, read=4), ok(3, 0, 3, read=4)])

    def test_copy_on_write_of_a_sealed_block_after_rollback(self):
        s = Replay(self, {"blocks": 4, "block_size": 2})
        s.run([start(0, [1, 2, 3, 4]), compute(0, 4), {"rollback": {"request": 0, "count": 1}},
               extend(0, [7]), compute(0, 1), one("read", 0), start(1, [1, 2, 3, 4, 5])],
              [ok(2, 0, 2, hit=0), ok(2, 0, 2),
               ok(2, 0, 2),  # the cut sealed block stays: r0 still reads its position 2
               ok(2, 1, 1),  # copied: [1 2 3 4] is cached, never written
               ok(2, 1, 1), ok(2, 1, 1, read=4),
               ok(4, 0, 0, hit=4)])

    def test_rollback_releases_whole_blocks_to_the_cache(self):
        s = Replay(self, {"blocks": 4, "block_size": 2})
        s.run([start(0, [1, 2, 3, 4, 5]), compute(0, 5), {"rollback": {"request": 0, "count": 4}},
               start(1, [1, 2, 3, 4, 6])],
              [ok(3, 0, 1, hit=0), ok(3, 0, 1),
               ok(1, 1, 2),  # [1 2 3 4] is cached, the partial [5] free; [1 2] kept, cut
               ok(3, 0, 1, hit=4)])
        self.assertEqual(s.subject.requests[0].tokens, [1])

    def test_preempt_and_resume_hit_the_requests_own_blocks(self):
        s = Replay(self, {"blocks": 4, "block_size": 2})
        s.run([start(0, [1, 2, 3, 4, 5]), compute(0, 5), one("preempt", 0), one("read", 0),
               one("resume", 0), one("resume", 0), compute(0, 1), one("read", 0)],
              [ok(3, 0, 1, hit=0), ok(3, 0, 1), ok(0, 2, 2), {"err": "preempted"},
               ok(3, 0, 1, hit=4), {"err": "not_preempted"}, ok(3, 0, 1), ok(3, 0, 1, read=5)])

    def test_a_request_rolled_back_to_nothing_resumes_with_no_block(self):
        s = Replay(self, {"blocks": 2, "block_size": 2})
        s.run([start(0, [1, 2]), compute(0, 2), {"rollback": {"request": 0, "count": 2}},
               one("preempt", 0), one("resume", 0), extend(0, [3]), one("read", 0)],
              [ok(1, 0, 1, hit=0), ok(1, 0, 1), ok(0, 1, 1), ok(0, 1, 1),
               ok(0, 1, 1, hit=0), ok(1, 1, 0), ok(1, 1, 0, read=0)])

    def test_hit_rules(self):
        for rule, hit in (("leave_one", 2), ("whole", 4)):
            with self.subTest(hit=rule):
                s = Replay(self, {"blocks": 4, "block_size": 2, "hit": rule})
                s.run([start(0, [1, 2, 3, 4]), compute(0, 4), one("finish", 0), start(1, [1, 2, 3, 4])],
                      [ok(2, 0, 2, hit=0), ok(2, 0, 2), ok(0, 2, 2),
                       # leave_one: [1 2] reused, [1 2 3 4] still cached, one new block
                       ok(2, 1, 1, hit=2) if rule == "leave_one" else ok(2, 0, 2, hit=4)])
                self.assertEqual(s.subject.requests[1].computed, hit)

    def test_a_running_requests_sealed_blocks_are_hits(self):
        s = Replay(self, {"blocks": 6, "block_size": 1})
        s.run([start(0, [4, 5, 6]), compute(0, 2), start(1, [4, 5, 6]), compute(1, 1), compute(0, 1)],
              [ok(3, 0, 3, hit=0), ok(3, 0, 3),
               ok(4, 0, 2, hit=2),  # [4] and [4 5] are r0's, computed: shared at once
               ok(4, 0, 2),  # r1 seals [4 5 6] first
               ok(3, 0, 3)])  # and r0's [4 5 6] merges onto it

    def test_clear_keeps_blocks_in_use(self):
        s = Replay(self, {"blocks": 4, "block_size": 1})
        s.run([start(0, [1, 2]), compute(0, 2), start(1, [3]), compute(1, 1), one("finish", 1), "clear",
               {"evict": {"blocks": 0}}, {"evict": {"blocks": 1}}],
              [ok(2, 0, 2, hit=0), ok(2, 0, 2), ok(3, 0, 1, hit=0), ok(3, 0, 1), ok(2, 1, 1), ok(2, 0, 2),
               ok(2, 0, 2), {"err": "evict_too_many"}])


class RandomOps(unittest.TestCase):
    """Random ops: every probe is the payload, the accounting adds up, and the
    stored prefixes stay closed under prefixes (§14)."""

    def test_random_ops_keep_the_invariants(self):
        rng = random.Random(5)
        for case in range(30):
            config = {"blocks": rng.randint(1, 8), "block_size": rng.choice([1, 2, 3]),
                      "layers": rng.randint(1, 2), "row_width": rng.randint(1, 2),
                      "hit": rng.choice(["leave_one", "whole"]), "seed": rng.randrange(1 << 64)}
            s = Replay(self, config)
            for _ in range(40):
                requests = s.subject.requests
                r = rng.choice(list(requests)) if requests and rng.random() < 0.8 else rng.randint(0, 4)
                record = requests.get(r)
                left = len(record.tokens) - record.computed if record else 1
                op = rng.choice([
                    start(r, [rng.choice([1, 2]) for _ in range(rng.randint(0, 6))]),
                    compute(r, rng.choice([left, left, rng.randint(-1, left + 1)])),
                    compute(r, left),
                    extend(r, [rng.choice([1, 2]) for _ in range(rng.randint(0, 3))]),
                    {"fork": {"request": r, "into": rng.randint(0, 4)}},
                    {"rollback": {"request": r, "count": rng.randint(-1, 3)}},
                    one("finish", r), one("preempt", r), one("resume", r), one("read", r),
                    {"evict": {"blocks": rng.randint(-1, 2)}}, "clear",
                ])
                outcome = s.op(op)
                if "ok" in outcome:
                    counts = outcome["ok"]
                    self.assertEqual(counts["in_use"] + counts["cached"] + counts["free"], config["blocks"])
                stored = s.subject.pool.sealed
                b = config["block_size"]
                for prefix in stored:
                    self.assertTrue(len(prefix) == b or prefix[:-b] in stored, "%s is stored without its parent" % (prefix,))


class OverTheWire(unittest.TestCase):
    def test_the_script_serves_and_exits_cleanly(self):
        requests = [HELLO, {"open": {"config": {"variant": "prefix", "blocks": 2, "block_size": 2, "layers": 1,
                                                 "row_width": 1, "hit": "leave_one", "seed": 0}}},
                    {"op": start(0, [1, 2, 3]), "index": 0}, {"op": compute(0, 3), "index": 1},
                    {"read": {"request": 0}}, {"close": {}}]
        process = subprocess.run(
            [sys.executable, os.path.join(ADAPTERS, "reference_prefix_subject.py")],
            input="".join(json.dumps(r) + "\n" for r in requests),
            capture_output=True, universal_newlines=True, env=script_env(), timeout=60,
        )
        self.assertEqual((process.returncode, process.stderr), (0, ""))
        responses = [json.loads(line) for line in process.stdout.splitlines()]
        self.assertEqual(responses[0]["hello"]["capabilities"]["policy"], "contract")
        self.assertEqual(responses[1:4], [ok(0, 0, 2), ok(2, 0, 0, hit=0), ok(2, 0, 0)])
        self.assertEqual(rows_of(responses[4]["ok"]), [x for row in payload_bits(0, [1, 2, 3], 1, 1)[0] for x in row])


if __name__ == "__main__":
    unittest.main()
