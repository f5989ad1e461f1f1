"""sglang's RadixCache as a prefix subject (adapters/sglang-radix/subject.py).

The first test needs only the standard library: the page documents every
op the subject declares. The rest drive sglang's RadixCache through its
scheduler's calls and need the environment of adapters/sglang-radix/setup.sh;
without it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/sglang-radix/tests -v
    adapters/sglang-radix/.venv/bin/python -m unittest discover -s adapters/sglang-radix/tests -v
"""

import ast
import base64
import json
import os
import random
import struct
import subprocess
import sys
import unittest

from kvcheck.prefix import PrefixSession, payload_bits

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER))
SUBJECT = os.path.join(ADAPTER, "subject.py")

VENV = os.environ.get("VENV") or os.path.join(ADAPTER, ".venv")
try:
    import sglang  # noqa: F401
    import torch  # noqa: F401

    HAVE_LIBRARY = os.path.exists(os.path.join(VENV, "KVCHECK_SGLANG_RADIX_READY"))
except ImportError:
    HAVE_LIBRARY = False
SKIP = (
    "sglang radix-cache environment absent: run adapters/sglang-radix/setup.sh, "
    "then this with adapters/sglang-radix/.venv/bin/python"
)

if HAVE_LIBRARY:
    sys.path.insert(0, ADAPTER)
    import subject  # noqa: E402

HELLO = {"hello": {"protocol": "kvcheck-subject/1", "revision": 5, "family": "prefix"}}


def declared_ops():
    """The `ops` of SglangRadixSubject, read from the source (no import)."""
    with open(SUBJECT) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SglangRadixSubject":
            for item in node.body:
                if isinstance(item, ast.Assign) and item.targets[0].id == "ops":
                    return ast.literal_eval(item.value)
    raise AssertionError("no ops in SglangRadixSubject")


class Page(unittest.TestCase):
    def test_every_declared_op_is_mapped_on_the_page(self):
        with open(os.path.join(ROOT, "docs", "sglang-radix.md")) as f:
            page = f.read()
        for op in declared_ops():
            self.assertIn("| `%s" % op, page, op)


def rows_of(response):
    data = base64.b64decode(response["rows"])
    return list(struct.unpack("<%dI" % (len(data) // 4), data))


def flat(rows):
    return [x for layer in rows for row in layer for x in row]


class Pool:
    """A subject behind its session, with the record kvcheck keeps."""

    def __init__(self, test, blocks, block_size, layers=2, row_width=3, seed=5):
        self.test = test
        self.config = {"variant": "prefix", "blocks": blocks, "block_size": block_size, "layers": layers,
                       "row_width": row_width, "hit": "leave_one", "seed": seed}
        self.session = PrefixSession(subject.SglangRadixSubject())
        self.hello = self.session.handle(HELLO)
        self.counts = self.session.handle({"open": {"config": self.config}})["ok"]
        self.index = 0
        self.tokens = {}
        self.computed = {}

    def op(self, op):
        response = self.session.handle({"op": op, "index": self.index})
        self.index += 1
        self.test.assertNotIn("exception", response, response)
        body = response.get("ok") or response.get("err")
        counts = (body["in_use"], body["cached"], body["free"])
        self.test.assertEqual(sum(counts), self.config["blocks"], (op, response))
        self.test.assertTrue(min(counts) >= 0, (op, response))
        return response

    def start(self, r, tokens):
        """start, then the compute `steps: whole` sends; the hit."""
        response = self.op({"start": {"request": r, "tokens": tokens}})
        if "err" in response:
            return response
        hit = response["ok"]["hit"]
        self.tokens[r] = list(tokens)
        self.computed[r] = len(tokens)
        self.op({"compute": {"request": r, "count": len(tokens) - hit}})
        return hit

    def extend(self, r, tokens):
        response = self.op({"extend": {"request": r, "tokens": tokens}})
        if "ok" in response:
            self.tokens[r] += tokens
            self.computed[r] += len(tokens)
            self.op({"compute": {"request": r, "count": len(tokens)}})
        return response

    def finish(self, r):
        response = self.op({"finish": {"request": r}})
        self.tokens.pop(r, None)
        self.computed.pop(r, None)
        return response

    def check_reads(self):
        """P3: every running request reads its own prefixes' payload."""
        for r, tokens in self.tokens.items():
            response = self.session.handle({"read": {"request": r}})
            if "err" in response:
                self.test.assertEqual(response["err"]["kind"], "preempted")
                continue
            want = flat(payload_bits(self.config["seed"], tokens[: self.computed[r]],
                                     self.config["layers"], self.config["row_width"]))
            self.test.assertEqual(rows_of(response["ok"]), want, r)


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class SglangRadix(unittest.TestCase):
    def test_hello_declares_what_the_scheduler_can_express(self):
        pool = Pool(self, 8, 1)
        caps = pool.hello["hello"]["capabilities"]
        self.assertEqual(caps["policy"], "own")
        self.assertEqual(caps["steps"], "whole")
        self.assertEqual(caps["hit"], ["leave_one"])
        self.assertNotIn("fork", caps["ops"])
        self.assertNotIn("rollback", caps["ops"])
        self.assertTrue(pool.hello["hello"]["name"].startswith("sglang "))
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 0, "free": 8})

    def test_the_whole_hit_rule_is_outside(self):
        session = PrefixSession(subject.SglangRadixSubject())
        session.handle(HELLO)
        config = {"variant": "prefix", "blocks": 4, "block_size": 1, "layers": 1, "row_width": 1,
                  "hit": "whole", "seed": 0}
        self.assertIn("outside", session.handle({"open": {"config": config}}))

    def test_known_answer_rows(self):
        # docs/contract.md §16: seed 0, tokens [1, 2, 3], L = 2, D = 2.
        pool = Pool(self, 8, 1, layers=2, row_width=2, seed=0)
        pool.start(0, [1, 2, 3])
        response = pool.session.handle({"read": {"request": 0}})
        self.assertEqual(rows_of(response["ok"]), [
            0x41730000, 0x40590000, 0xC1EF0000, 0xBD3A0000, 0xC26D0000, 0x40040000,
            0xBCDD0000, 0x3CCE0000, 0xBD040000, 0xBDC70000, 0xC1CF0000, 0x3E760000,
        ])

    def test_a_prompt_is_shared_once_its_prefill_ran(self):
        # checkpoint_kv_cache inserts the prompt right after its prefill:
        # a running request's prompt is a hit for the next one.
        pool = Pool(self, 16, 1)
        self.assertEqual(pool.start(0, [1, 2, 3, 4]), 0)
        self.assertEqual(pool.start(1, [1, 2, 3, 4, 5]), 4)
        # the prompt cached whole still computes its last token (leave_one)
        self.assertEqual(pool.start(2, [1, 2, 3, 4]), 3)
        pool.check_reads()

    def test_decoded_tokens_are_shared_after_finish_only(self):
        # sglang inserts a request's decoded tokens at finish (release_kv_cache
        # with checkpoint): docs/contract.md §18, "a later hit".
        pool = Pool(self, 16, 1)
        pool.start(0, [1, 2, 3])
        pool.extend(0, [4])
        pool.extend(0, [5])
        self.assertEqual(pool.start(1, [1, 2, 3, 4, 5, 6]), 3)
        pool.finish(0)
        self.assertEqual(pool.start(2, [1, 2, 3, 4, 5, 6]), 5)
        pool.check_reads()

    def test_pages_hit_in_whole_pages(self):
        for page in (2, 4):
            pool = Pool(self, 12, page)
            tokens = list(range(10, 21))
            pool.start(0, tokens)
            pool.finish(0)
            hit = pool.start(1, tokens)
            self.assertEqual(hit, (len(tokens) - 1) // page * page, page)
            pool.check_reads()

    def test_no_room_changes_nothing(self):
        pool = Pool(self, 4, 1)
        pool.start(0, [1, 2, 3])
        before = pool.op({"evict": {"blocks": 0}})["ok"]
        response = pool.op({"start": {"request": 1, "tokens": [7, 8]}})
        self.assertEqual(response["err"]["kind"], "no_room")
        self.assertEqual({k: response["err"][k] for k in ("in_use", "cached", "free")}, before)
        response = pool.op({"extend": {"request": 0, "tokens": [4, 5]}})
        self.assertEqual(response["err"]["kind"], "no_room")
        pool.check_reads()

    def test_retraction_keeps_the_prompt_in_the_tree(self):
        pool = Pool(self, 16, 1)
        pool.start(0, [1, 2, 3, 4])
        pool.extend(0, [5])
        pool.op({"preempt": {"request": 0}})
        pool.computed[0] = 0
        response = pool.op({"resume": {"request": 0}})
        # the prompt was checkpointed after its prefill; the decoded token was
        # freed by release_kv_cache(checkpoint=False)
        self.assertEqual(response["ok"]["hit"], 4)
        pool.computed[0] = 5
        pool.op({"compute": {"request": 0, "count": 1}})
        pool.check_reads()

    def test_retraction_evicts_for_the_requests_left(self):
        # schedule_batch.release_req: release_kv_cache(checkpoint=False), then
        # evict_from_tree_cache(remaining * SGLANG_RETRACT_DECODE_STEPS): the
        # retracted prompt goes too while another request runs (by design,
        # docs/sglang-radix.md; the minimized P5 trace of seed 2).
        pool = Pool(self, 8, 1)
        pool.start(1, [0])
        pool.start(2, [2, 2])
        ok = pool.op({"preempt": {"request": 2}})["ok"]
        self.assertEqual((ok["in_use"], ok["cached"], ok["free"]), (1, 0, 7))
        self.assertEqual(pool.op({"resume": {"request": 2}})["ok"]["hit"], 0)

    def test_a_paged_prefill_evicts_for_a_page_more_than_it_needs(self):
        # alloc_paged_token_slots_extend evicts for extend + page_size tokens,
        # not for the pages the extend needs (known upstream: sglang pull
        # requests #32217, #34958); the minimized P5 trace of the
        # radix-paged-prompts domain, seed 2.
        pool = Pool(self, 6, 2)
        pool.start(0, [0])
        pool.start(1, [0, 1, 2])
        pool.start(2, [0, 1, 2, 0])
        pool.finish(2)
        before = pool.op({"evict": {"blocks": 0}})["ok"]
        self.assertEqual((before["in_use"], before["cached"], before["free"]), (3, 1, 2))
        # two new pages needed, two free: the cached page [2, 0] is evicted anyway
        self.assertEqual(pool.start(4, [0, 1, 2, 2, 1]), 2)
        pool.finish(0)
        self.assertEqual(pool.start(0, [0, 1, 2, 0, 1]), 2)
        pool.check_reads()

    def test_clear_with_no_request_frees_every_block(self):
        for page in (1, 2):
            pool = Pool(self, 8, page)
            pool.start(0, [1, 2, 3, 4, 5])
            pool.extend(0, [6])
            pool.finish(0)
            ok = pool.op("clear")["ok"]
            self.assertEqual((ok["in_use"], ok["cached"], ok["free"]), (0, 0, 8))

    def test_random_cases_keep_the_counts_and_the_rows(self):
        rng = random.Random(11)
        for case in range(24):
            pool = Pool(self, rng.choice([4, 8, 16]), rng.choice([1, 2, 4]), seed=case)
            next_id = 0
            for _ in range(30):
                running = list(pool.tokens)
                roll = rng.random()
                if roll < 0.4 or not running:
                    base = list(rng.choice(list(pool.tokens.values()))) if pool.tokens and rng.random() < 0.6 else []
                    tokens = base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
                    pool.start(next_id, tokens)
                    next_id += 1
                elif roll < 0.7:
                    pool.extend(rng.choice(running), [rng.randrange(3) for _ in range(rng.randrange(1, 3))])
                elif roll < 0.85:
                    pool.finish(rng.choice(running))
                else:
                    pool.op("clear")
                pool.check_reads()
            for r in list(pool.tokens):
                pool.finish(r)
            ok = pool.op("clear")["ok"]
            self.assertEqual(ok["free"], pool.config["blocks"], case)

    def test_the_protocol_through_a_process(self):
        config = {"variant": "prefix", "blocks": 8, "block_size": 2, "layers": 1, "row_width": 2,
                  "hit": "leave_one", "seed": 3}
        lines = [
            HELLO,
            {"open": {"config": config}},
            {"op": {"start": {"request": 0, "tokens": [5, 6, 7]}}, "index": 0},
            {"op": {"compute": {"request": 0, "count": 3}}, "index": 1},
            {"read": {"request": 0}},
            {"close": {}},
        ]
        result = subprocess.run([sys.executable, SUBJECT], input="".join(json.dumps(x) + "\n" for x in lines),
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual(len(answers), 5, result.stdout)
        self.assertEqual(answers[1], {"ok": {"in_use": 0, "cached": 0, "free": 8}})
        self.assertEqual(answers[2]["ok"]["hit"], 0)
        self.assertEqual(rows_of(answers[4]["ok"]), flat(payload_bits(3, [5, 6, 7], 1, 2)))


if __name__ == "__main__":
    unittest.main()
