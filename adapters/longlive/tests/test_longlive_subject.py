"""The LongLive adapter against LongLive's real cache code (opt-in: needs setup.sh).

Run with the venv's interpreter:

    LONGLIVE_SRC=/path/to/LongLive adapters/longlive/setup.sh
    adapters/longlive/.venv/bin/python -m unittest discover -s adapters/longlive/tests -v

Without the environment every test is skipped with that instruction. The
cases on a finding (docs/findings/longlive-*.md) replay its minimized
trace: on the checkout the finding names it fails as recorded, and the case
skips, naming the finding, when the code behaves otherwise (a patched or
newer checkout).
"""

import os
import random
import unittest

from kvcheck.adapter import load_module, shared
from kvcheck.pipeline import testing
from kvcheck.pipeline.testing import environment, expect, with_expect

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kvtrace_replay = shared("kvtrace_replay")
loader = load_module(ADAPTER, "loader")
pipeline_protocol = load_module(ADAPTER, "pipeline_protocol")

READY, SKIP, SUBJECT = environment(ADAPTER, loader, "LongLive", "LONGLIVE_SRC")


@unittest.skipUnless(READY, SKIP)
class LongLive(testing.SubjectTest):
    command, library = SUBJECT, "LongLive"

    def test_hello_declares_what_the_pipeline_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(caps["ops"], ["write", "evict", "pin", "reset"])
        self.assertEqual(caps["features"], ["global_sink"])
        self.assertEqual(caps["variants"], ["dense"])
        self.assertIn(loader.marker()["commit"][:12], self.subject.hello["name"])

    def test_the_aligned_pipeline_protocol_agrees_with_the_contract(self):
        # Pins that come to rest after the global sink (the release configs'
        # shape), chunks starting at or after the global sink: no finding applies.
        rng = random.Random(3)
        for _ in range(6):
            config, ops, note = pipeline_protocol.trace(rng, aligned=True, recache=False)
            self.assertEqual(self.replay(with_expect(config, ops)), [], note)

    def test_rewriting_an_older_chunk_is_outside(self):
        config = kvtrace_replay.full_config({"variant": "dense", "capacity": 8, "sink": 1})
        trace = {"format": "kvtrace/1", "config": config,
                 "ops": [{"write": {"start": 0, "len": 2}}, {"write": {"start": 2, "len": 2}},
                         {"write": {"start": 0, "len": 2}}]}
        trace["expect"] = expect(config, trace["ops"])
        problems = self.replay(trace)
        self.assertEqual(len(problems), 1)
        self.assertIn("\"type\": \"Outside\"", problems[0])

    def test_finding_floating_pin_evicted(self):
        # C = 7, S = GS = 2: the pin of frames 3, 4 floats at buffer 3; the
        # roll of 2 evicts buffer [2, 4), frame 3 with it.
        self.check_finding("longlive-floating-pin-evicted", 4, "visible [0, 1, 4, 5, 6, 7, 8], expected [0, 1, 3, 4, 6, 7, 8]")

    def test_finding_recache_duplicates_sink(self):
        # S = GS = 3, the chunk 1..2 starts inside the global sink: the
        # re-cache rolls it in after slots 1, 2, which hold it already.
        self.check_finding("longlive-recache-duplicates-sink", 3, "visible [0, 1, 1, 2], expected [0, 1, 2]")


class Loader(unittest.TestCase):
    @unittest.skipUnless(READY, SKIP)
    def test_every_method_is_found_in_the_checkout(self):
        programs = loader.load()
        self.assertEqual(sorted(programs.functions), sorted(loader.PIPELINE_METHODS + ("_call_model",)))
        self.assertTrue(hasattr(programs.model, "CausalWanModel"))

    @unittest.skipUnless(READY, SKIP)
    def test_a_checkout_without_a_method_is_refused_by_name(self):
        loader.load()  # the model module imported from the real checkout; the pipeline file is read again
        with testing.altered_checkout(loader.source_dir(), (loader.PIPELINE, loader.WRAPPER),
                                      "def _zero_kv_data(", "def _zero_kv_data_renamed(") as tmp:
            with self.assertRaisesRegex(RuntimeError, "no _zero_kv_data"):
                loader.load(tmp)

    def test_pipeline_protocol_traces_are_well_formed(self):
        # No torch needed: the generator's traces keep to what the adapter expresses.
        rng = random.Random(1)
        for _ in range(50):
            config, ops, _ = pipeline_protocol.trace(rng, aligned=bool(rng.getrandbits(1)), recache=True)
            self.assertEqual(config["global_sink"], config["sink"])
            g = 0
            for op in ops:
                if op == "reset":
                    g = 0
                elif "write" in op:
                    w = op["write"]
                    self.assertLessEqual(w["start"], g)
                    g = max(g, w["start"] + w["len"])
                elif "pin" in op:
                    self.assertGreater(op["pin"]["tokens"], 0)


if __name__ == "__main__":
    unittest.main()
