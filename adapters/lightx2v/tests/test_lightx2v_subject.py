"""The LightX2V adapter against LightX2V's real RollingKVCachePool (opt-in: needs setup.sh).

Run with the venv's interpreter:

    LIGHTX2V_SRC=/path/to/LightX2V adapters/lightx2v/setup.sh
    adapters/lightx2v/.venv/bin/python -m unittest discover -s adapters/lightx2v/tests -v

Without the environment every test is skipped with that instruction.
"""

import os
import random
import unittest

from kvcheck.adapter import load_module
from kvcheck.pipeline import testing
from kvcheck.pipeline.testing import environment, with_expect

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
loader = load_module(ADAPTER, "loader")
pipeline_protocol = load_module(ADAPTER, "pipeline_protocol")

READY, SKIP, SUBJECT = environment(ADAPTER, loader, "LightX2V", "LIGHTX2V_SRC")


@unittest.skipUnless(READY, SKIP)
class LightX2V(testing.SubjectTest):
    command = SUBJECT

    def test_hello_declares_what_the_loop_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(caps["ops"], ["write", "reset"])
        self.assertEqual(caps["features"], [])
        self.assertIn(loader.marker()["commit"][:12], self.subject.hello["name"])

    def test_the_self_forcing_protocol_agrees_with_the_contract(self):
        rng = random.Random(2)
        for _ in range(20):
            config, ops, note = pipeline_protocol.trace(rng)
            self.assertEqual(self.replay(with_expect(config, ops)), [], note)

    def test_the_ring_wraps_past_its_end(self):
        # C = 5, S = 1: a ring of 4 slots, 3-token chunks: the later chunks'
        # rows sit in two ring fragments, read back in position order.
        ops = [{"write": {"start": s, "len": 3}} for s in (0, 3, 6, 9)] + [{"write": {"start": 9, "len": 0}}]
        trace = with_expect({"variant": "dense", "capacity": 5, "sink": 1}, ops)
        self.assertEqual(trace["expect"][-1]["ok"]["visible"], [0, 8, 9, 10, 11])
        self.assertEqual(self.replay(trace), [])

    def test_chunks_of_another_length_are_outside(self):
        trace = with_expect({"variant": "dense", "capacity": 8, "sink": 1},
                            [{"write": {"start": 0, "len": 2}}, {"write": {"start": 2, "len": 3}}])
        problems = self.replay(trace)
        self.assertEqual(len(problems), 1)
        self.assertIn("\"type\": \"Outside\"", problems[0])


class Loader(unittest.TestCase):
    @unittest.skipUnless(READY, SKIP)
    def test_the_statements_are_found_in_the_checkout(self):
        programs = loader.load()
        self.assertTrue(hasattr(programs.rolling, "RollingKVCachePool"))
        self.assertIn("set_ends", programs.store.co_names)
        self.assertIn("k_cache", programs.read.co_names)

    @unittest.skipUnless(READY, SKIP)
    def test_a_checkout_without_the_read_is_refused(self):
        loader.load()  # rolling.py imported from the real checkout
        with testing.altered_checkout(loader.source_dir(), [loader.INFER],
                                      "attn_k = kv_cache.k_cache(", "attn_k = read_k(kv_cache, ") as tmp:
            with self.assertRaisesRegex(RuntimeError, "no attn_k / attn_v read"):
                loader.load(tmp)

    def test_protocol_traces_use_one_chunk_length(self):
        rng = random.Random(1)
        for _ in range(50):
            config, ops, _ = pipeline_protocol.trace(rng)
            lengths = {op["write"]["len"] for op in ops if op != "reset"}
            self.assertEqual(len(lengths), 1)
            self.assertLessEqual(next(iter(lengths)), config["capacity"] - config["sink"])


if __name__ == "__main__":
    unittest.main()
