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

import json
import os
import random
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ADAPTERS = os.path.dirname(ADAPTER)
FINDINGS = os.path.join(os.path.dirname(ADAPTERS), "docs", "findings")
sys.path.insert(0, ADAPTERS)
sys.path.insert(0, ADAPTER)

import kvtrace_replay  # noqa: E402
import loader  # noqa: E402
import pipeline_protocol  # noqa: E402

SKIP = (
    "Rolling Forcing environment absent: run ROLLINGFORCING_SRC=checkout adapters/rollingforcing/setup.sh, "
    "then this with adapters/rollingforcing/.venv/bin/python"
)

try:
    import torch  # noqa: F401

    READY = loader.is_ready()
except ImportError:
    READY = False

SUBJECT = "%s %s" % (sys.executable, os.path.join(ADAPTER, "subject.py"))


def expect(config, ops):
    """The contract's outcome of every op (the reference model of
    adapters/reference_subject.py; these traces are never refused)."""
    from reference_subject import Cache, parse_config

    cache = Cache(parse_config(config))
    out = []
    for index, op in enumerate(ops):
        if op == "reset":
            out.append({"ok": cache.reset()})
        else:
            size = config["batch"] * op["write"]["len"] * config["heads"] * cache.row_bytes
            visible, _, _ = cache.write(index, op["write"], bytes(size), bytes(size))
            writers = [[cache.resident[p][h] for p in visible] for h in range(config["heads"])]
            out.append({"ok": {"global_end": cache.global_end, "visible": visible, "writers": writers}})
    return out


def with_expect(config, ops):
    config = kvtrace_replay.full_config(config)
    return {"format": "kvtrace/1", "config": config, "ops": ops, "expect": expect(config, ops)}


def finding(name):
    with open(os.path.join(FINDINGS, name + ".kvtrace.json")) as f:
        return json.load(f)


def short_video(rng):
    """A protocol trace whose window never fills (the re-run then reads the
    whole cache, anchor included): no finding applies."""
    while True:
        config, ops, note = pipeline_protocol.trace(rng)
        g = max((op["write"]["start"] + op["write"]["len"] for op in ops if op != "reset"), default=0)
        if g <= config["capacity"]:
            return config, ops, note


@unittest.skipUnless(READY, SKIP)
class RollingForcing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.subject = kvtrace_replay.Subject(SUBJECT)

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def replay(self, trace):
        return kvtrace_replay.replay(self.subject, trace, exact_kinds=False)

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
        name = "rollingforcing-rerun-drops-anchor"
        problems = self.replay(finding(name))
        if not problems:
            self.skipTest("the loaded Rolling Forcing agrees on docs/findings/%s.kvtrace.json (docs/findings/%s.md)" % (name, name))
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("op 3 "), problems)
        self.assertIn("visible [2, 3, 4, 5], expected [0, 1, 4, 5]", problems[0])


class Loader(unittest.TestCase):
    @unittest.skipUnless(READY, SKIP)
    def test_the_model_and_the_reset_loop_are_found_in_the_checkout(self):
        programs = loader.load()
        self.assertTrue(hasattr(programs.model, "CausalWanModel"))
        self.assertIn("kv_cache_clean", programs.reset.co_names)

    @unittest.skipUnless(READY, SKIP)
    def test_a_checkout_without_the_reset_loop_is_refused(self):
        loader.load()  # the model module imported from the real checkout; the pipeline file is read again
        src = loader.source_dir()
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "pipeline"))
            with open(os.path.join(src, loader.PIPELINE)) as f:
                text = f.read().replace("def inference_rolling_forcing(", "def inference_renamed(")
            with open(os.path.join(tmp, loader.PIPELINE), "w") as f:
                f.write(text)
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
