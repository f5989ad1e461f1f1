"""The Rolling Forcing adapter against Rolling Forcing's real cache code (opt-in: needs setup.sh).

Run with the venv's interpreter:

    ROLLINGFORCING_SRC=/path/to/RollingForcing adapters/rollingforcing/setup.sh
    adapters/rollingforcing/.venv/bin/python -m unittest discover -s adapters/rollingforcing/tests -v

Without the environment every test is skipped with that instruction. The
case on the finding (docs/findings/rollingforcing-rerun-drops-anchor.md)
replays its minimized trace: on the checkout the finding names it fails as
recorded, and the case skips, naming the finding, when the code behaves
otherwise (a patched or newer checkout).
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

READY, SKIP, SUBJECT = environment(ADAPTER, loader, "Rolling Forcing", "ROLLINGFORCING_SRC")


def short_video(rng):
    """A protocol trace whose window never fills (the re-run then reads the
    whole cache, anchor included): no finding applies."""
    while True:
        config, ops, note = pipeline_protocol.trace(rng)
        g = max((op["write"]["start"] + op["write"]["len"] for op in ops if op != "reset"), default=0)
        if g <= config["capacity"]:
            return config, ops, note


@unittest.skipUnless(READY, SKIP)
class RollingForcing(testing.SubjectTest):
    command, library = SUBJECT, "Rolling Forcing"

    def test_hello_declares_what_the_pipeline_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(caps["ops"], ["write", "reset"])
        self.assertEqual(caps["variants"], ["dense"])
        self.assertIn(loader.marker()["commit"][:12], self.subject.hello["name"])

    def test_videos_within_the_window_agree_with_the_contract(self):
        rng = random.Random(3)
        for _ in range(4):
            config, ops, note = short_video(rng)
            self.assertEqual(self.replay(with_expect(config, ops)), [], note)

    def test_an_append_of_other_than_one_block_is_outside(self):
        config = kvtrace_replay.full_config({"variant": "dense", "capacity": 8, "sink": 2})
        trace = {"format": "kvtrace/1", "config": config,
                 "ops": [{"write": {"start": 0, "len": 2}}, {"write": {"start": 2, "len": 3}}]}
        trace["expect"] = expect(config, trace["ops"])
        problems = self.replay(trace)
        self.assertEqual(len(problems), 1)
        self.assertIn("\"type\": \"Outside\"", problems[0])

    def test_finding_rerun_drops_anchor(self):
        # C = 4, S = 2: three blocks fill the cache of 6 frames; the clean
        # re-run of the third (the probe) reads frames 2..5, not the anchor 0, 1.
        self.check_finding("rollingforcing-rerun-drops-anchor", 3, "visible [2, 3, 4, 5], expected [0, 1, 4, 5]")


class Loader(unittest.TestCase):
    @unittest.skipUnless(READY, SKIP)
    def test_the_model_and_the_reset_loop_are_found_in_the_checkout(self):
        programs = loader.load()
        self.assertTrue(hasattr(programs.model, "CausalWanModel"))
        self.assertIn("kv_cache_clean", programs.reset.co_names)

    @unittest.skipUnless(READY, SKIP)
    def test_a_checkout_without_the_reset_loop_is_refused(self):
        loader.load()  # the model module imported from the real checkout; the pipeline file is read again
        with testing.altered_checkout(loader.source_dir(), [loader.PIPELINE],
                                      "def inference_rolling_forcing(", "def inference_renamed(") as tmp:
            with self.assertRaisesRegex(RuntimeError, "no CausalInferencePipeline.inference_rolling_forcing"):
                loader.load(tmp)

    def test_pipeline_protocol_traces_are_well_formed(self):
        # No torch needed: every write is one block, appended or run again.
        rng = random.Random(1)
        for _ in range(50):
            config, ops, _ = pipeline_protocol.trace(rng)
            self.assertGreaterEqual(config["capacity"], 2 * config["sink"])
            g = 0
            for op in ops:
                if op == "reset":
                    g = 0
                    continue
                w = op["write"]
                self.assertEqual(w["len"], config["sink"])
                self.assertIn(w["start"], (g, g - config["sink"]))
                g = max(g, w["start"] + w["len"])


if __name__ == "__main__":
    unittest.main()
