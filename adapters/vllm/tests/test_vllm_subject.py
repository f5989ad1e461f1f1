"""vLLM's v1 KV cache manager as a prefix subject (adapters/vllm/subject.py).

The first tests need only the standard library: the page documents every
op the subject declares. The rest drive vLLM's `KVCacheManager` and need
the environment of adapters/vllm/setup.sh; without it they skip, saying
so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/vllm/tests -v
    adapters/vllm/.venv/bin/python -m unittest discover -s adapters/vllm/tests -v
"""

import base64
import json
import os
import random
import struct
import subprocess
import sys
import unittest

from kvcheck.adapter import class_attribute
from kvcheck.prefix import HARNESS_HELLO as HELLO, PrefixSession, payload_bits

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER))
SUBJECT = os.path.join(ADAPTER, "subject.py")

VENV = os.environ.get("VENV") or os.path.join(ADAPTER, ".venv")
try:
    import vllm  # noqa: F401

    HAVE_LIBRARY = os.path.exists(os.path.join(VENV, "KVCHECK_VLLM_READY"))
except ImportError:
    HAVE_LIBRARY = False
SKIP = "vLLM environment absent: run adapters/vllm/setup.sh, then this with its venv's python"

if HAVE_LIBRARY:
    sys.path.insert(0, ADAPTER)
    import subject  # noqa: E402



def declared_ops():
    """The `ops` of VllmManagerSubject, read from the source (no import)."""
    return class_attribute(SUBJECT, "VllmManagerSubject", "ops")


class Page(unittest.TestCase):
    def test_every_declared_op_is_mapped_on_the_page(self):
        with open(os.path.join(ROOT, "docs", "vllm.md")) as f:
            page = f.read()
        for op in declared_ops():
            self.assertIn("| `%s" % op, page, op)


class Pool:
    """A subject behind its session, with the record kvcheck keeps.

    With `window`, every layer is windowed (`--window`), or with `hybrid`
    layer 1 only (`--window --hybrid`); `check_reads` then expects a
    windowed layer's rows of positions [s, c) only, s = max(0, c - W + 1)
    (docs/contract.md §19), c kept here apart from the subject's own
    record."""

    def __init__(self, test, blocks, block_size, spec=True, seed=5, window=None, hybrid=False):
        self.test = test
        self.config = {"variant": "prefix", "blocks": blocks, "block_size": block_size, "layers": 2,
                       "row_width": 3, "hit": "leave_one", "seed": seed}
        self.windowed = []
        if window:
            self.windowed = [1] if hybrid else [0, 1]
            self.config["window"] = {"size": window, "layers": self.windowed}
        self.window = window
        self.session = PrefixSession(subject.VllmManagerSubject(
            spec=spec, windows=[window] if window else None, hybrid=hybrid))
        self.hello = self.session.handle(HELLO)
        self.counts = self.session.handle({"open": {"config": self.config}})["ok"]
        self.index = 0
        self.tokens = {}
        # An outside answer cuts a kvcheck case: what follows is not judged.
        self.cut = False

    def op(self, op):
        response = self.session.handle({"op": op, "index": self.index})
        self.index += 1
        self.cut = self.cut or "outside" in response
        for kind in ("ok", "err"):
            if kind in response:
                counts = {k: response[kind][k] for k in ("in_use", "cached", "free")}
                self.test.assertEqual(sum(counts.values()), self.config["blocks"], response)
                if kind == "err":
                    self.test.assertEqual(counts, self.counts, "a refusal changed the counts")
                self.counts = counts
        return response

    def ok(self, op):
        response = self.op(op)
        self.test.assertIn("ok", response, (op, response))
        return response["ok"]

    def start(self, request, tokens):
        hit = self.ok({"start": {"request": request, "tokens": tokens}})["hit"]
        self.ok({"compute": {"request": request, "count": len(tokens) - hit}})
        self.tokens[request] = list(tokens)
        return hit

    def extend(self, request, tokens):
        self.ok({"extend": {"request": request, "tokens": tokens}})
        self.ok({"compute": {"request": request, "count": len(tokens)}})
        self.tokens[request] += tokens

    def rollback(self, request, count):
        response = self.op({"rollback": {"request": request, "count": count}})
        if "ok" in response:
            del self.tokens[request][len(self.tokens[request]) - count:]
        return response

    def resume(self, request):
        hit = self.ok({"resume": {"request": request}})["hit"]
        self.ok({"compute": {"request": request, "count": len(self.tokens[request]) - hit}})
        return hit

    def window_start(self, request):
        """s of docs/contract.md §19 for a running request computed whole."""
        c = len(self.tokens[request])
        return max(0, c - self.window + 1) if self.window else 0

    def rows(self, request):
        """What a read of the request returns, as u32 values."""
        response = self.session.handle({"read": {"request": request}})
        if "err" in response:
            self.test.assertEqual(response["err"]["kind"], "preempted")
            return None
        self.test.assertEqual(response["ok"]["read"], len(self.tokens[request]))
        data = base64.b64decode(response["ok"]["rows"])
        return list(struct.unpack("<%dI" % (len(data) // 4), data))

    def expected(self, request):
        tokens = self.tokens[request]
        payload = payload_bits(self.config["seed"], tokens, 2, 3)
        s = self.window_start(request)
        return [x for layer, rows in enumerate(payload)
                for row in (rows[s:] if layer in self.windowed else rows) for x in row]

    def check_reads(self):
        for request in self.tokens:
            got = self.rows(request)
            if got is not None:
                self.test.assertEqual(got, self.expected(request),
                                      "request %d reads other rows than its payload" % request)

    def tables(self, request):
        """The request's block table of each KV cache group (0: vLLM's null block)."""
        return self.session.subject.vllm.tables(str(request))


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class TheManager(unittest.TestCase):
    def test_hello(self):
        pool = Pool(self, 4, 2)
        caps = pool.hello["hello"]["capabilities"]
        self.assertEqual(caps["policy"], "own")
        self.assertEqual(caps["steps"], "whole")
        self.assertEqual(caps["hit"], ["leave_one"])
        self.assertIn("rollback", caps["ops"])
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 0, "free": 4})
        without = PrefixSession(subject.VllmManagerSubject(spec=False)).handle(HELLO)
        self.assertNotIn("rollback", without["hello"]["capabilities"]["ops"])

    def test_a_shared_prefix_is_hit_in_whole_blocks_leaving_one_token(self):
        pool = Pool(self, 8, 2)
        self.assertEqual(pool.start(0, [1, 2, 3, 4, 5]), 0)
        # vLLM caches full blocks as soon as they are allocated.
        self.assertEqual(pool.counts, {"in_use": 3, "cached": 0, "free": 5})
        # A running request's blocks are hit too.
        self.assertEqual(pool.start(1, [1, 2, 3, 9]), 2)
        pool.check_reads()
        pool.ok({"finish": {"request": 0}})
        del pool.tokens[0]
        # [1, 2] is still request 1's; [3, 4] becomes cached, [5] free.
        self.assertEqual(pool.counts, {"in_use": 2, "cached": 1, "free": 5})
        # A prompt cached whole recomputes its last block (leave_one, B = 2).
        self.assertEqual(pool.start(2, [1, 2, 3, 4]), 2)
        self.assertEqual(pool.start(3, [1, 2, 3, 4, 5]), 4)
        pool.check_reads()

    def test_drafts_are_rejected_right_after_their_step_only(self):
        pool = Pool(self, 8, 2)
        pool.start(0, [1, 2])
        pool.extend(0, [3, 4, 5])  # the sampled 3, drafts 4 and 5
        pool.check_reads()
        self.assertIn("ok", pool.rollback(0, 1))
        pool.check_reads()
        # Only the one draft left is still rejectable, never an accepted token.
        self.assertIn("outside", pool.rollback(0, 2))
        pool.start(1, [8, 9])
        # Another request's step came: the draft 4 was accepted ...
        self.assertIn("outside", pool.rollback(0, 1))
        # ... and its block [3, 4] cached (update_from_output's cache_blocks).
        self.assertEqual(pool.start(2, [1, 2, 3, 4, 0]), 4)
        pool.extend(0, [10])
        pool.check_reads()

    def test_preemption_recomputes_from_the_cache(self):
        pool = Pool(self, 6, 2)
        pool.start(0, [1, 2, 3, 4, 5])
        pool.extend(0, [6])
        pool.ok({"preempt": {"request": 0}})
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 3, "free": 3})
        pool.check_reads()
        self.assertEqual(pool.resume(0), 4)  # [1..6] cached whole: the last block again
        pool.check_reads()

    def test_no_room_changes_nothing(self):
        pool = Pool(self, 3, 2)
        pool.start(0, [1, 2, 3, 4])
        response = pool.op({"start": {"request": 1, "tokens": [5, 6, 7, 8, 9]}})
        self.assertEqual(response["err"]["kind"], "no_room")
        pool.extend(0, [5, 6])
        response = pool.op({"extend": {"request": 0, "tokens": [7]}})
        self.assertEqual(response["err"]["kind"], "no_room")
        pool.check_reads()
        pool.extend(0, [])  # nothing to schedule
        pool.check_reads()

    def test_clear_while_a_request_holds_blocks_is_outside(self):
        pool = Pool(self, 4, 1)
        pool.start(0, [1, 2, 3])
        self.assertIn("outside", pool.op("clear"))
        pool.ok({"finish": {"request": 0}})
        del pool.tokens[0]
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 3, "free": 1})
        self.assertEqual(pool.ok("clear"), {"in_use": 0, "cached": 0, "free": 4})
        self.assertEqual(pool.start(1, [1, 2, 3]), 0)

    def test_random_steps_keep_the_payload_and_the_accounting(self):
        rng = random.Random(7)
        for case in range(40):
            pool = Pool(self, rng.choice([2, 3, 5, 16]), rng.choice([1, 2, 4]), seed=case)
            random_steps(self, pool, rng)


def random_steps(test, pool, rng, steps=30):
    """Random starts, decode steps with drafts and rejections, preemptions,
    resumptions and finishes, every one followed by a read of every
    request: the payload and the accounting hold throughout."""
    nxt = 0
    for _ in range(steps):
        if pool.cut:
            return
        running = [r for r in pool.tokens if "err" not in pool.session.handle({"read": {"request": r}})]
        roll = rng.random()
        if roll < 0.35 or not running:
            tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 9))]
            response = pool.op({"start": {"request": nxt, "tokens": tokens}})
            if "ok" in response:
                pool.ok({"compute": {"request": nxt, "count": len(tokens) - response["ok"]["hit"]}})
                pool.tokens[nxt] = tokens
            nxt += 1
        elif roll < 0.7:
            request, tokens = rng.choice(running), [rng.randrange(3) for _ in range(rng.randrange(1, 4))]
            if "ok" in pool.op({"extend": {"request": request, "tokens": tokens}}):
                pool.ok({"compute": {"request": request, "count": len(tokens)}})
                pool.tokens[request] += tokens
                if rng.random() < 0.5:
                    pool.rollback(request, rng.randrange(len(tokens)))
        elif roll < 0.8:
            request = rng.choice(running)
            pool.ok({"preempt": {"request": request}})
        elif roll < 0.9:
            preempted = [r for r in pool.tokens if r not in running]
            if preempted:
                request = rng.choice(preempted)
                response = pool.op({"resume": {"request": request}})
                if "ok" in response:
                    pool.ok({"compute": {"request": request,
                                         "count": len(pool.tokens[request]) - response["ok"]["hit"]}})
        else:
            request = rng.choice(list(pool.tokens))
            pool.ok({"finish": {"request": request}})
            del pool.tokens[request]
        if not pool.cut:
            pool.check_reads()


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class SlidingWindow(unittest.TestCase):
    """`--window W` (every layer windowed: one SlidingWindowSpec group) and
    `--window W --hybrid` (layer 0 full, layer 1 windowed: two groups)."""

    def test_hello_declares_the_window_and_the_groups(self):
        caps = Pool(self, 4, 2, window=3).hello["hello"]["capabilities"]
        self.assertEqual(caps["window"], {"sizes": [3], "layers": None})
        self.assertEqual(caps["groups"], {"full": 0, "window": 1})
        caps = Pool(self, 4, 2, window=3, hybrid=True).hello["hello"]["capabilities"]
        self.assertEqual(caps["window"], {"sizes": [3], "layers": [1]})
        self.assertEqual(caps["groups"], {"full": 1, "window": 1})
        plain = PrefixSession(subject.VllmManagerSubject()).handle(HELLO)["hello"]["capabilities"]
        self.assertNotIn("window", plain)
        args = subject.VllmManagerSubject.from_args(["--window", "4,2", "--hybrid", "--block-size", "2"])
        self.assertEqual((args.window, args.groups), ({"sizes": [2, 4], "layers": [1]}, {"full": 1, "window": 1}))

    def test_a_hybrid_of_other_than_two_layers_is_outside(self):
        session = PrefixSession(subject.VllmManagerSubject(windows=[3], hybrid=True))
        session.handle(HELLO)
        config = {"variant": "prefix", "blocks": 4, "block_size": 2, "layers": 3, "row_width": 1,
                  "hit": "leave_one", "seed": 0, "window": {"size": 3, "layers": [1]}}
        self.assertIn("outside", session.handle({"open": {"config": config}}))

    def test_blocks_behind_the_window_are_freed_and_a_read_returns_the_window(self):
        pool = Pool(self, 6, 2, window=3)
        pool.start(0, [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(pool.counts, {"in_use": 4, "cached": 0, "free": 2})
        # Positions [5, 7) only: 2 rows of each layer.
        self.assertEqual(len(pool.rows(0)), 2 * 2 * 3)
        pool.check_reads()
        # The next step's allocate_slots frees what lies wholly below
        # c - W + 1 = 5 (blocks [0 1] and [2 3]); they stay cached.
        pool.extend(0, [8])
        self.assertEqual(pool.counts, {"in_use": 2, "cached": 2, "free": 2})
        self.assertEqual(pool.tables(0)[0][:2], [0, 0])
        pool.check_reads()
        pool.extend(0, [9, 10])
        self.assertEqual(pool.counts, {"in_use": 2, "cached": 3, "free": 1})
        pool.check_reads()

    def test_the_hybrid_keeps_the_full_layer_and_frees_the_windowed_one(self):
        pool = Pool(self, 12, 2, window=3, hybrid=True)
        pool.start(0, [1, 2, 3, 4, 5, 6, 7])
        # Four blocks in each group's table.
        self.assertEqual(pool.counts, {"in_use": 8, "cached": 0, "free": 4})
        full, window = pool.tables(0)
        self.assertFalse(set(full) & set(window))
        pool.check_reads()
        pool.extend(0, [8])
        full, window = pool.tables(0)
        self.assertNotIn(0, full)
        self.assertEqual(window[:2], [0, 0])
        self.assertEqual(pool.counts, {"in_use": 6, "cached": 2, "free": 4})
        # Layer 0: positions [0, 8); layer 1: [6, 8).
        self.assertEqual(len(pool.rows(0)), (8 + 2) * 3)
        pool.check_reads()
        # A request of the same prefix hits both groups.
        self.assertEqual(pool.start(1, [1, 2, 3, 4, 5, 6, 7, 8, 9]), 8)
        pool.check_reads()

    def test_a_windowed_hit_needs_only_the_window_cached(self):
        pool = Pool(self, 4, 2, window=3)
        pool.start(0, [1, 2, 3, 4, 5, 6, 7])
        pool.extend(0, [8])
        pool.ok({"finish": {"request": 0}})
        del pool.tokens[0]
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 4, "free": 0})
        # Another prompt evicts the two oldest cached blocks: [1 2], [3 4].
        pool.start(1, [9, 9, 9])
        self.assertEqual(pool.counts, {"in_use": 2, "cached": 2, "free": 0})
        # The prefix [1 .. 8] is still hit whole: the window of position 8
        # is [6, 8], in the cached block [7 8]; the blocks below are nulls.
        self.assertEqual(pool.start(2, [1, 2, 3, 4, 5, 6, 7, 8, 9]), 8)
        self.assertEqual(pool.tables(2)[0][:3], [0, 0, 0])
        pool.check_reads()

    def test_a_rejection_moves_the_window_back_and_vllm_kept_its_keys(self):
        pool = Pool(self, 8, 1, window=3)
        pool.start(0, [1, 2, 3])
        pool.extend(0, [4, 5, 6])  # the sampled 4, drafts 5 and 6
        pool.check_reads()  # [4, 6)
        self.assertIn("ok", pool.rollback(0, 2))
        # c = 4: the next query attends [2, 4], and vLLM freed only below
        # the 3 - 3 + 1 = 1 it had computed when it scheduled the step.
        self.assertEqual(pool.window_start(0), 2)
        pool.check_reads()
        pool.extend(0, [7])
        pool.check_reads()

    def test_a_refused_step_that_freed_blocks_behind_the_window_is_outside(self):
        pool = Pool(self, 3, 1, window=2)
        pool.start(0, [1, 2])
        pool.start(1, [5])
        # allocate_slots frees position 0 (below c - W + 1 = 1) and only then
        # finds 1 block for the 3 new tokens: vLLM's refusal changed the
        # pool, the contract's may not.
        response = pool.op({"extend": {"request": 0, "tokens": [3, 4, 5]}})
        self.assertIn("left the window", response["outside"]["reason"])
        # Nothing freed: a plain no_room.
        pool = Pool(self, 3, 1, window=3)
        pool.start(0, [1, 2])
        pool.start(1, [5])
        self.assertEqual(pool.op({"extend": {"request": 0, "tokens": [3, 4]}})["err"]["kind"], "no_room")

    def test_random_steps_keep_the_windowed_payload_and_the_accounting(self):
        rng = random.Random(11)
        for case in range(48):
            hybrid = case % 2 == 1
            blocks = rng.choice([2, 3, 5, 16]) * (2 if hybrid else 1)
            pool = Pool(self, blocks, rng.choice([1, 2, 4]), seed=case,
                        window=rng.choice([1, 2, 3, 5, 8]), hybrid=hybrid)
            random_steps(self, pool, rng)


FINDING = "vllm-priority-preemption-caches-unwritten-blocks"


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class Findings(unittest.TestCase):
    """The minimized trace of the finding (tests/traces/): it shows the
    finding on the release, or the test skips naming it (a patched vLLM)."""

    def replay_finding(self, fields, **options):
        """The finding's saved ops on a priority subject of chunks of 2 (its
        config with `fields` changed, the subject with `options`): (the
        config, the session, the last answer), or a skip on a vLLM that
        drops the unwritten blocks."""
        with open(os.path.join(HERE, "traces", FINDING + ".kvtrace.json")) as f:
            trace = json.load(f)
        config = dict(trace["config"], **fields)
        session = PrefixSession(subject.VllmManagerSubject(priority=True, chunk=2, block_size=2, **options))
        session.handle(HELLO)
        self.assertIn("ok", session.handle({"open": {"config": config}}))
        for index, op in enumerate(trace["ops"]):
            response = session.handle({"op": op, "index": index})
            self.assertIn("ok", response, (op, response))
        if response["ok"]["hit"] == 2:
            self.skipTest("this vLLM drops the unwritten blocks of a preempted request from the "
                          "prefix cache (docs/findings/%s.md)" % FINDING)
        return config, session, response

    def test_priority_preemption_leaves_unwritten_blocks_cached(self):
        # start r0 [0 1 2 0] (its first chunk, [0 1], scheduled), compute 2
        # (the forward pass; the next step allocates the chunk [2 0], whose
        # full block vLLM caches at once), preempt r0 (the priority victim,
        # before that chunk's forward pass), start r3 [0 1 2 0 2].
        config, session, response = self.replay_finding({})
        # Only [0 1] was ever computed, but r3 is handed [0 1 2 0] ...
        self.assertEqual(response["ok"]["hit"], 4)
        # ... and reads, for positions 2 and 3, a block never written.
        read = session.handle({"read": {"request": 3}})["ok"]
        data = base64.b64decode(read["rows"])
        got = list(struct.unpack("<%dI" % (len(data) // 4), data))
        want = [x for layer in payload_bits(config["seed"], [0, 1, 2, 0], 1, 1) for row in layer for x in row]
        self.assertEqual(got[:2], want[:2])
        self.assertEqual(got[2:], [0, 0])
        self.assertNotEqual(got[2:], want[2:])

    def test_the_finding_holds_in_both_groups_of_the_hybrid(self):
        # The finding's ops on the hybrid (layer 1 windowed, W = 3): both
        # groups cache the chunk [2 0] the preempted request never wrote.
        _, session, response = self.replay_finding(
            {"layers": 2, "window": {"size": 3, "layers": [1]}}, windows=[3], hybrid=True)
        self.assertEqual(response["ok"]["hit"], 4)
        full, window = session.subject.vllm.tables("3")
        self.assertNotIn(0, full[:2])
        self.assertNotEqual(window[1], 0)  # the window [2, 4] reads the unwritten block


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class TheProcess(unittest.TestCase):
    def test_protocol_lines_only_on_stdout(self):
        lines = [HELLO,
                 {"open": {"config": {"variant": "prefix", "blocks": 2, "block_size": 1, "layers": 1,
                                      "row_width": 1, "hit": "leave_one", "seed": 0}}},
                 {"op": {"start": {"request": 0, "tokens": [1, 2]}}, "index": 0},
                 {"op": {"compute": {"request": 0, "count": 2}}, "index": 1},
                 {"read": {"request": 0}},
                 {"op": "clear", "index": 2},
                 {"op": {"finish": {"request": 0}}, "index": 3},
                 {"op": "clear", "index": 4},
                 {"close": {}}]
        done = subprocess.run([sys.executable, SUBJECT], input="".join(json.dumps(x) + "\n" for x in lines),
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        answers = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual(len(answers), 8, done.stdout)
        self.assertTrue(answers[0]["hello"]["name"].startswith("vllm "))
        self.assertEqual(answers[2], {"ok": {"hit": 0, "in_use": 2, "cached": 0, "free": 0}})
        bits = payload_bits(0, [1, 2], 1, 1)
        rows = base64.b64decode(answers[4]["ok"]["rows"])
        self.assertEqual(list(struct.unpack("<2I", rows)), [bits[0][0][0], bits[0][1][0]])
        self.assertIn("outside", answers[5])
        self.assertEqual(answers[7], {"ok": {"in_use": 0, "cached": 0, "free": 2}})


if __name__ == "__main__":
    unittest.main()
