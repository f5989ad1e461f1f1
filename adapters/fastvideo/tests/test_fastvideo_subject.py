"""The fastvideo adapter against fastvideo's real cache code (opt-in: needs setup.sh).

Run with the venv's interpreter:

    adapters/fastvideo/setup.sh
    adapters/fastvideo/.venv/bin/python -m unittest discover -s adapters/fastvideo/tests -v

Without the environment every test is skipped with that instruction. The
cases on a finding (docs/findings/fastvideo-*.md) replay its minimized trace
and check the divergence on the release; on a library that behaves
otherwise (a patched or newer one) the trace must replay clean, and the
test says so by skipping with the finding's name.
"""

import json
import os
import sys
import tempfile
import unittest

from kvcheck.adapter import ADAPTERS, CHECKOUT, load_file, load_module, shared

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kvtrace_replay = shared("kvtrace_replay")

SKIP = (
    "fastvideo environment absent: run adapters/fastvideo/setup.sh, "
    "then this with adapters/fastvideo/.venv/bin/python"
)

try:
    from importlib.metadata import PackageNotFoundError, version

    import torch  # noqa: F401

    # The installed distribution, not an import: with adapters/ on the path,
    # `fastvideo` would also name this adapter's own folder.
    READY = bool(version("fastvideo"))
except (ImportError, PackageNotFoundError):
    READY = False

SUBJECT = "%s %s" % (sys.executable, os.path.join(ADAPTER, "subject.py"))
FINDINGS = os.path.join(CHECKOUT, "docs", "findings")


def finding(slug):
    with open(os.path.join(FINDINGS, "fastvideo-%s.kvtrace.json" % slug)) as f:
        return json.load(f)


class Case(unittest.TestCase):
    options = ""

    @classmethod
    def setUpClass(cls):
        cls.subject = kvtrace_replay.Subject("%s %s" % (SUBJECT, cls.options))

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def chunk_loop(self, count, seed):
        # Self-Forcing's generator: fastvideo's loop is the same.
        pipeline_protocol = load_file(os.path.join(ADAPTERS, "self-forcing", "pipeline_protocol.py"),
                                      "self_forcing_pipeline_protocol")

        problems = {}
        for i, trace in enumerate(pipeline_protocol.generate(count, seed, expect=True)):
            found = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
            if found:
                problems[i] = found[:3]
        return problems


@unittest.skipUnless(READY, SKIP)
class CausalWan(Case):
    options = "--model causal-wan"

    def test_hello_declares_what_the_chunk_loop_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(sorted(caps["ops"]), ["reset", "write"])
        self.assertEqual(caps["variants"], ["dense"])
        self.assertEqual(caps["features"], [])
        self.assertIn("causal-wan (latent 2x2)", self.subject.hello["name"])

    def test_the_chunk_loop_agrees_with_the_contract(self):
        # A slice of docs/fastvideo.md's 300 chunk-loop traces.
        self.assertEqual(self.chunk_loop(12, 7), {})

    def test_finding_chunk_overwrites_sink(self):
        trace = finding("chunk-overwrites-sink")
        problems = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
        if not problems:
            self.skipTest("this fastvideo refuses a chunk that does not fit beside the sink "
                          "(docs/findings/fastvideo-chunk-overwrites-sink.md)")
        # C = 3, S = 1: the 3-frame chunk 3+3 lands on the sink slot.
        self.assertEqual(problems, ['op 2 {"write": {"start": 3, "len": 3}}: expected chunk_too_large, got ok [3, 4, 5]'])


@unittest.skipUnless(READY, SKIP)
class CausalWanOddLatent(Case):
    options = "--model causal-wan --latent 3x3"

    def test_finding_odd_latent_reads_unwritten_slots(self):
        trace = finding("odd-latent-reads-unwritten-slots")
        problems = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
        if not problems:
            self.skipTest("this fastvideo places chunks by the model's tokens per frame "
                          "(docs/findings/fastvideo-odd-latent-reads-unwritten-slots.md)")
        self.assertEqual(len(problems), 1)
        self.assertIn("op 1", problems[0])
        self.assertIn("UnknownRows", problems[0])


@unittest.skipUnless(READY, SKIP)
class LingBotWorld2(Case):
    options = "--model lingbot-world2"

    def test_hello_names_lingbot(self):
        self.assertIn("lingbot-world2", self.subject.hello["name"])

    def test_the_chunk_loop_agrees_with_the_contract(self):
        self.assertEqual(self.chunk_loop(12, 8), {})


@unittest.skipUnless(READY, SKIP)
class DreamXWorld(Case):
    options = "--model dreamx-world"

    def video(self, capacity, sink, chunks, steps):
        """One video of `chunks` chunks, each appended and rewritten `steps` times, with `expect`."""
        clean_protocol = shared("clean_protocol")

        ops, start = [], 0
        for n in chunks:
            ops += [{"write": {"start": start, "len": n}}] * (steps + 1)
            start += n
        config = kvtrace_replay.full_config({"variant": "dense", "capacity": capacity, "sink": sink,
                                             "batch": 2, "heads": 2, "head_dim": 3})
        return {"format": "kvtrace/1", "config": config, "ops": ops, "expect": clean_protocol.expect(config, ops)}

    def test_the_preset_geometry_agrees(self):
        # DreamX-World's preset: a sink of 3 frames, chunks of 3, a 12-frame window (here 6 chunks, 4 steps).
        trace = self.video(12, 3, [3] * 6, 4)
        self.assertEqual(kvtrace_replay.replay(self.subject, trace, exact_kinds=False), [])

    def test_finding_dreamx_sink_keeps_first_step(self):
        trace = finding("dreamx-sink-keeps-first-step")
        problems = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
        if not problems:
            self.skipTest("this fastvideo rewrites the sink frames of a later chunk "
                          "(docs/findings/fastvideo-dreamx-sink-keeps-first-step.md)")
        # C = 4, S = 3: the rewrite of the chunk 2+1 leaves position 2 (a sink frame) as op 1 wrote it.
        self.assertTrue(problems and all(p.startswith('op 2 {"write": {"start": 2, "len": 1}}: ') and "position 2" in p
                                         for p in problems), problems)

    def test_a_sink_longer_than_one_chunk_over_a_video(self):
        # Chunks of 2 frames under a sink of 3: only the sink frame of the second chunk is stale.
        trace = self.video(6, 3, [2, 2, 2], 1)
        problems = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
        if not problems:
            self.skipTest("this fastvideo rewrites the sink frames of a later chunk "
                          "(docs/findings/fastvideo-dreamx-sink-keeps-first-step.md)")
        self.assertTrue(all("(position 2," in p for p in problems), problems)


@unittest.skipUnless(READY, SKIP)
class Loader(unittest.TestCase):
    def test_a_release_without_the_statement_is_refused_by_name(self):
        subject = load_module(ADAPTER, "subject")

        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "models", "dits"))
            with open(os.path.join(root, "models", "dits", "causal_wanvideo.py"), "w") as f:
                f.write("class CausalWanSelfAttention:\n    def __init__(self):\n        pass\n")
            with open(os.path.join(root, "models", "dits", "_relative_rope.py"), "w") as f:
                f.write("def relativistic_window_offsets(a, b, c):\n    return a, b, c\n")
            saved = subject.package_dir
            subject.package_dir = lambda: root
            try:
                with self.assertRaisesRegex(RuntimeError, "CausalWanSelfAttention.forward"):
                    subject.CausalWan(torch)
            finally:
                subject.package_dir = saved


if __name__ == "__main__":
    unittest.main()
