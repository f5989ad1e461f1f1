"""sglang's RadixCache as a prefix subject (adapters/sglang-radix/subject.py).

The first test needs only the standard library: the page documents every
op the subject declares. The rest drive sglang's RadixCache through its
scheduler's calls and need the environment of adapters/sglang-radix/setup.sh;
without it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/sglang-radix/tests -v
    adapters/sglang-radix/.venv/bin/python -m unittest discover -s adapters/sglang-radix/tests -v
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



def declared_ops():
    """The `ops` of SglangRadixSubject, read from the source (no import)."""
    return class_attribute(SUBJECT, "SglangRadixSubject", "ops")


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


class SwaPool(Pool):
    """A subject in its sliding-window mode (`--swa`) behind its session:
    layer 1 windowed, layer 0 full attention, the computed counts the
    window rule reads (docs/contract.md §19) kept here as kvcheck keeps
    them."""

    def __init__(self, test, blocks, block_size, window, layers=2, row_width=3, seed=5, interval=1, chunk=None):
        self.test = test
        self.config = {"variant": "prefix", "blocks": blocks, "block_size": block_size, "layers": layers,
                       "row_width": row_width, "hit": "leave_one", "seed": seed,
                       "window": {"size": window, "layers": [1]}}
        self.subject = subject.SglangRadixSubject(swa=(window,), swa_eviction_interval=interval,
                                                  chunked_prefill_size=chunk)
        self.session = PrefixSession(self.subject)
        self.hello = self.session.handle(HELLO)
        self.opened = self.session.handle({"open": {"config": self.config}})
        self.counts = self.opened.get("ok")
        self.index = 0
        self.tokens = {}
        self.computed = {}

    def driver(self):
        return self.subject.radix

    def window_start(self, r):
        return max(0, self.computed[r] - self.config["window"]["size"] + 1)

    def check_reads(self):
        """Every running request reads layer 0's rows of [0, c) and layer
        1's of [s, c), its own prefixes' payload."""
        for r, tokens in self.tokens.items():
            response = self.session.handle({"read": {"request": r}})
            if "err" in response:
                self.test.assertEqual(response["err"]["kind"], "preempted")
                continue
            c, s = self.computed[r], self.window_start(r)
            rows = payload_bits(self.config["seed"], tokens[:c], self.config["layers"], self.config["row_width"])
            want = flat([rows[0]]) + flat([rows[1][s:c]]) + flat(rows[2:])
            self.test.assertEqual(rows_of(response["ok"]), want, (r, c, s))

    def swa_slots(self, r, first, end):
        """The SWA sub-pool slots positions [first, end) of request r map to
        (0: freed, sglang's cleared full->SWA mapping)."""
        d = self.driver()
        req = d.reqs[r]
        row = d.req_to_token_pool.req_to_token[req.kv.req_pool_idx, first:end].long()
        return d.allocator.translate_loc_from_full_to_swa(row).tolist()




@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class SglangSlidingWindow(unittest.TestCase):
    """`--swa`: SWAKVPool, SWATokenToKVPoolAllocator and UnifiedRadixCache
    with the FULL and SWA components, on the CPU."""

    def test_hello_declares_the_window_and_the_groups(self):
        pool = SwaPool(self, 16, 1, 3)
        caps = pool.hello["hello"]["capabilities"]
        self.assertEqual(caps["window"], {"sizes": [3], "layers": [1]})
        self.assertEqual(caps["groups"], {"full": 1, "window": 0})
        self.assertIn("UnifiedRadixCache + SWA", pool.hello["hello"]["name"])
        self.assertEqual(pool.counts, {"in_use": 0, "cached": 0, "free": 16})
        # sglang's sliding_window_size is W - 1 (exclusive of the query)
        self.assertEqual(pool.driver().tree.sliding_window_size, 2)

    def test_a_read_after_the_window_moved_returns_the_window_only(self):
        for page in (1, 2, 4):
            for window in (2, 3, 6):
                pool = SwaPool(self, 16, page, window)
                pool.start(0, [1, 2, 3, 4, 5])
                pool.check_reads()
                for token in (6, 7, 8, 9, 10, 11, 12):
                    pool.extend(0, [token % 4])
                    pool.check_reads()
                response = pool.session.handle({"read": {"request": 0}})
                c, s = pool.computed[0], pool.window_start(0)
                self.assertEqual(response["ok"]["read"], c)
                # layer 0: c rows; layer 1: c - s = W - 1 rows; 3 values each
                self.assertEqual(len(rows_of(response["ok"])), 3 * (c + (c - s)), (page, window))

    def test_out_of_window_slots_are_freed_while_decoding(self):
        # maybe_evict_swa at each decode step (SGLANG_SWA_EVICTION_INTERVAL 1):
        # free_swa_out_of_window_slots frees the SWA slots below
        # pre_len - ceil_align(max(sliding_window_size, page), page) that the
        # tree does not hold; the full slots stay.
        pool = SwaPool(self, 16, 1, 3)
        pool.start(0, [1, 2, 3])
        for token in range(4, 12):
            pool.extend(0, [token])
        slots = pool.swa_slots(0, 0, pool.computed[0])
        # the prompt [0, 3) is the tree's (inserted after the prefill: the
        # decode frees start at cache_protected_len); the decoded positions
        # [3, 8) are freed, [8, 11) live: c = 11, s = 9, sglang keeps one more
        self.assertTrue(all(slots[:3]), slots)
        self.assertEqual(slots[3:8], [0] * 5, slots)
        self.assertTrue(all(slots[8:]), slots)
        d = pool.driver()
        self.assertGreater(d.allocator.swa_available_size(), d.allocator.full_available_size())
        pool.check_reads()
        # with sglang's default interval (128) nothing is freed in 11 tokens
        pool = SwaPool(self, 16, 1, 3, interval=None)
        pool.start(0, [1, 2, 3])
        for token in range(4, 12):
            pool.extend(0, [token])
        self.assertTrue(all(pool.swa_slots(0, 3, pool.computed[0])))
        pool.check_reads()

    def test_a_hit_reads_the_window_from_the_tree(self):
        for page in (1, 2, 4):
            pool = SwaPool(self, 16, page, 3)
            prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9]
            pool.start(0, prompt)
            pool.finish(0)
            # the prompt's last window is live in the tree: a full hit
            # (capped at len - 1, page-aligned), then its rows read right
            response = pool.op({"start": {"request": 1, "tokens": prompt + [10]}})
            hit = response["ok"]["hit"]
            self.assertEqual(hit, len(prompt) // page * page, page)
            pool.tokens[1] = prompt + [10]
            pool.computed[1] = hit
            pool.check_reads()  # c = hit: the window [hit - 2, hit) from the tree
            pool.op({"compute": {"request": 1, "count": len(prompt) + 1 - hit}})
            pool.computed[1] = len(prompt) + 1
            pool.check_reads()

    def test_a_hit_stops_where_the_window_was_freed(self):
        # Decoded tokens below the window lost their SWA slots while the
        # request ran; release_kv_cache inserts them as tombstones, and a
        # match needs sliding_window_size live SWA tokens before its end.
        pool = SwaPool(self, 16, 1, 3)
        pool.start(0, [1, 2, 3, 4])
        for token in (5, 6, 7, 8, 9, 10):
            pool.extend(0, [token])
        pool.finish(0)
        # [1 .. 9]'s last window, positions 7 and 8, is live: a hit of 9
        self.assertEqual(pool.start(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]), 9)
        # [1 .. 6]'s, positions 4 and 5, was freed: the match falls back to
        # the prompt's end, whose window [2, 4) the tree kept
        self.assertEqual(pool.start(2, [1, 2, 3, 4, 5, 6, 12]), 4)
        pool.check_reads()

    def test_a_read_between_an_extend_and_its_compute_keeps_the_window(self):
        # The minimized P3 trace of the first --swa 4 run (seed 1, B = 2,
        # N = 8): an extend of three tokens is three decode steps; run in a
        # row with their frees, the third freed position 5, still in the
        # window of the 8 tokens computed. The subject defers each step's
        # frees to the compute of the step before it (driver.py, extend).
        pool = SwaPool(self, 8, 2, 4, row_width=2, seed=2)
        pool.start(1, [0, 1, 2])
        pool.extend(1, [0, 1, 2])
        pool.extend(1, [2])
        pool.extend(1, [1])
        response = pool.op({"extend": {"request": 1, "tokens": [2, 1, 0]}})
        self.assertIn("ok", response)
        pool.tokens[1] += [2, 1, 0]
        pool.check_reads()  # c = 8, s = 5: positions [5, 8) of layer 1
        pool.op({"compute": {"request": 1, "count": 3}})
        pool.computed[1] += 3
        pool.check_reads()
        self.assertEqual(pool.driver().deferred[1], [])

    def test_a_prompt_matched_on_a_tombstone_is_inserted_to_its_branch_point(self):
        # Departure 4 (docs/sglang-radix.md), the minimized P5 trace of the
        # prompt-only row (seed 1, B = 1, N = 9, W = 4): r0's checkpoint
        # tombstones the SWA of its prompt's head; r1 = [0, 1] matches node
        # [0] in full but not in SWA (hit 0, swa_branching_seqlen 1), and its
        # checkpoint inserts [0] only (SWAComponent.prepare_for_caching_req),
        # recovering that node's SWA: [0, 1] is not a hit until r1 finishes.
        pool = SwaPool(self, 9, 1, 4, row_width=1, seed=3)
        self.assertEqual(pool.start(0, [0, 2, 0, 0, 2]), 0)
        self.assertEqual(pool.start(1, [0, 1]), 0)
        self.assertEqual(pool.start(2, [0, 1, 1]), 1)
        pool.finish(1)
        self.assertEqual(pool.start(3, [0, 1, 1]), 2)
        pool.check_reads()

    def test_the_swa_check_sees_a_leaked_swa_slot(self):
        # A slot taken from the SWA allocator and never mapped (a leak the
        # full pool's counts cannot show) is answered as an exception.
        pool = SwaPool(self, 8, 1, 3)
        pool.start(0, [1, 2, 3])
        pool.driver().allocator.swa_attn_allocator.alloc(1)
        response = pool.session.handle({"op": {"evict": {"blocks": 1}}, "index": pool.index})
        self.assertIn("exception", response)
        self.assertIn("SWA pool accounting", response["exception"]["message"])

    def test_chunked_prefill_reads_right(self):
        for page in (1, 2):
            pool = SwaPool(self, 16, page, 3, chunk=2)
            pool.start(0, [1, 2, 3, 4, 5, 6, 7])
            pool.check_reads()
            pool.extend(0, [8])
            pool.finish(0)
            self.assertEqual(pool.start(1, [1, 2, 3, 4, 5, 6, 7, 9]) % page, 0)
            pool.check_reads()

    def test_a_pool_sglang_refuses_is_outside(self):
        # validate_swa_pool_size: sliding_window_size + page_size >= SWA tokens
        pool = SwaPool(self, 2, 4, 6)
        self.assertIn("outside", pool.opened)

    def test_random_cases_keep_the_counts_the_rows_and_the_swa_pool(self):
        # counts() runs driver.SWARadixDriver.swa_check after every op: every
        # SWA page free or mapped from a full slot, never both or neither.
        rng = random.Random(13)
        for case in range(30):
            page = rng.choice([1, 2, 4])
            window = rng.choice([2, 3, 5, 8])
            blocks = rng.choice([8, 12, 16])
            if window - 1 + page >= blocks * page:
                continue
            pool = SwaPool(self, blocks, page, window, seed=case, chunk=rng.choice([None, 4]))
            next_id = 0
            for _ in range(30):
                running = [r for r in pool.tokens if pool.computed.get(r) is not None]
                roll = rng.random()
                if roll < 0.35 or not running:
                    base = list(rng.choice(list(pool.tokens.values()))) if pool.tokens and rng.random() < 0.6 else []
                    tokens = base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
                    pool.start(next_id, tokens)
                    next_id += 1
                elif roll < 0.75:
                    pool.extend(rng.choice(running), [rng.randrange(3) for _ in range(rng.randrange(1, 4))])
                elif roll < 0.9:
                    pool.finish(rng.choice(running))
                else:
                    pool.op(rng.choice(["clear", {"evict": {"blocks": rng.randrange(1, 4)}}]))
                pool.check_reads()
            for r in list(pool.tokens):
                pool.finish(r)
            ok = pool.op("clear")["ok"]
            self.assertEqual(ok["free"], blocks, case)
            d = pool.driver()
            self.assertEqual(d.allocator.swa_available_size(), blocks * page, case)

if __name__ == "__main__":
    unittest.main()
