"""kvpress's pipeline as a subject: its call mapping, what StreamingLLMPress
documents it keeps, and the pipeline against a recompute without a cache.

The first tests need only the standard library. The rest build a tiny
Llama and run the pipeline, and need the environment of
adapters/kvpress/setup.sh; without it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/kvpress/tests -v
    adapters/kvpress/.venv/bin/python -m unittest discover -s adapters/kvpress/tests -v

adapters/ must stay off sys.path in this process (no PYTHONPATH naming
it): its folder diffusers/ would stand in for the optional diffusers
package that the libraries kvpress loads probe for. What these tests share
with the other adapters' comes from the kvcheck package (kvcheck.adapter),
and the adapter's file is loaded by path.
"""

import os
import sys
import unittest

import kvcheck
from kvcheck.adapter import ADAPTERS
from kvcheck.adapter import FRONT_DOOR_CONFIG as GROWTH
from kvcheck.adapter import front_door_write as write
from kvcheck.adapter import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)

pipeline_subject = load_file(os.path.join(ADAPTER, "pipeline_subject.py"), "kvpress_pipeline_subject")

try:
    import kvpress  # noqa: F401
    import torch  # noqa: F401

    HAVE_KVPRESS = True
except ImportError:
    HAVE_KVPRESS = False
SKIP = "kvpress environment absent: run adapters/kvpress/setup.sh, then this with its venv's python"



class Mapping(unittest.TestCase):
    def test_adapters_is_off_the_path(self):
        # The module docstring's caveat: adapters/diffusers would shadow diffusers.
        self.assertNotIn(ADAPTERS, [os.path.abspath(p or os.curdir) for p in sys.path])

    def test_kept_positions_are_the_sinks_then_the_most_recent(self):
        kept = pipeline_subject.kept_positions
        self.assertEqual(kept(16, 0.5, 2), [0, 1] + list(range(10, 16)))
        self.assertEqual(kept(16, 0.3, 2), [0, 1] + list(range(7, 16)))  # int(16 * 0.7) = 11
        self.assertEqual(kept(13, 0.0, 4), list(range(13)))
        # kvpress's compute_n_kept: max(1, int(L * (1 - ratio))), a float truncated.
        self.assertEqual(kept(10, 0.9, 0), [9])
        # Fewer kept than sinks: the first ones, as "never pruned" reads.
        self.assertEqual(kept(13, 0.7, 4), [0, 1, 2])
        self.assertEqual(kept(13, 0.9, 4), [0])

    def test_schedule_of_a_prefill_press(self):
        # Every step reads the kept context, the question, then the answer
        # tokens before it, at the press's positions.
        schedule = pipeline_subject.schedule
        context, q = list(range(10, 20)), pipeline_subject.QUESTION
        steps = schedule("streaming", context, [40, 41, 42], 0.5, 2, 2, 8)
        self.assertEqual(steps[0], [(10, 0), (11, 1), (17, 7), (18, 8), (19, 9), (q[0], 10), (q[1], 11)])
        self.assertEqual(steps[2][-2:], [(40, 12), (41, 13)])
        rotated = schedule("rerotate", context, [40], 0.5, 2, 2, 8)
        self.assertEqual(rotated[0], [(10, 0), (11, 1), (17, 2), (18, 3), (19, 4), (q[0], 5), (q[1], 6)])
        whole = schedule("none", context, [40, 41], 0.5, 2, 2, 8)
        self.assertEqual([p for _, p in whole[1]], list(range(13)))

    def test_schedule_of_a_decoding_press(self):
        # DecodingPress(interval 2, target 5, 2 sinks): the question's
        # forward is step 1; after step 2 and step 4 the cache, the step's
        # own token included, keeps its first 2 entries and last 3.
        schedule = pipeline_subject.schedule
        context, (q0, q1) = [10, 11, 12, 13, 14], pipeline_subject.QUESTION
        steps = schedule("decoding", context, [40, 41, 42, 43, 44], 0.0, 2, 2, 5)
        self.assertEqual(steps[0], [(t, p) for p, t in enumerate(context)] + [(q0, 5), (q1, 6)])
        self.assertEqual(steps[1], steps[0] + [(40, 7)])
        self.assertEqual(steps[2], [(10, 0), (11, 1), (q0, 5), (q1, 6), (40, 7), (41, 8)])
        self.assertEqual(steps[3], steps[2] + [(42, 9)])
        self.assertEqual(steps[4], [(10, 0), (11, 1), (40, 7), (41, 8), (42, 9), (43, 10)])
        # A step of at least target tokens compresses at once: the question.
        steps = schedule("decoding", context, [40, 41], 0.0, 1, 9, 2)
        self.assertEqual(steps[1], [(10, 0), (q1, 6), (40, 7)])
        # PrefillDecodingPress: the prefill press first, then the same.
        steps = schedule("prefill-decoding", list(range(10, 20)), [40, 41, 42], 0.5, 2, 2, 6)
        self.assertEqual([p for _, p in steps[0]], [0, 1, 7, 8, 9, 10, 11])
        self.assertEqual([p for _, p in steps[2]], [0, 1, 9, 10, 11, 12, 13])
        # CompressionRatioDecodingPress: the target is a share of the
        # positions seen, max(1, int(seen * (1 - ratio))): 13 seen, 6 kept.
        steps = schedule("ratio-decoding", list(range(10, 20)), [40, 41, 42], 0.5, 2, 2, 0)
        self.assertEqual([p for _, p in steps[2]], [0, 1, 9, 10, 11, 12, 13])
        self.assertEqual(pipeline_subject.decoding_target("ratio-decoding", 99, 0.25, 13), 9)
        self.assertEqual(pipeline_subject.decoding_target("decoding", 99, 0.25, 13), 99)

    def test_context_tokens_are_words_and_the_question_is_apart(self):
        talk = pipeline_subject.WordConversation(pipeline_subject.CONTENT)
        for writer in range(1, 20):
            for position in range(100):
                t = talk.token(position, writer)
                self.assertTrue(pipeline_subject.FIRST_WORD <= t < pipeline_subject.QUESTION[0], t)
        self.assertEqual(pipeline_subject.words([4, 63]), "w4 w63")

    def test_command_line(self):
        s = pipeline_subject.KvpressPipeline.from_args(["--press", "rerotate", "--ratio", "0.25", "--sink", "2"])
        self.assertEqual((s.press_name, s.ratio, s.sink), ("rerotate", 0.25, 2))
        self.assertIn("--ratio 0.25 --sink 2", s.name)
        s = pipeline_subject.KvpressPipeline.from_args(["--press", "decoding", "--interval", "3", "--target", "9"])
        self.assertIn("--interval 3 --target 9", s.name)
        for wrong in (["--ratio", "1"], ["--ratio", "-0.1"], ["--layers", "0"], ["--press", "knorm"],
                      ["--press", "decoding", "--questions", "2"], ["--press", "decoding", "--interval", "0"],
                      ["--press", "decoding", "--target", "0"]):
            with self.assertRaises(SystemExit):
                pipeline_subject.KvpressPipeline.from_args(wrong)

    def test_declared_domain_and_configs(self):
        self.assertIsNone(kvcheck.subject.domain_problem(pipeline_subject.KvpressPipeline.domain))
        self.assertIn("domain", pipeline_subject.KvpressPipeline(press="none").capabilities())
        # StreamingLLMPress refuses a context no longer than its sinks.
        self.assertNotIn("domain", pipeline_subject.KvpressPipeline(press="streaming", sink=4).capabilities())
        # A decoding press first compresses the context and the question:
        # with fewer sinks than that, nothing is refused.
        self.assertIn("domain", pipeline_subject.KvpressPipeline(press="decoding", sink=2).capabilities())
        self.assertNotIn("domain", pipeline_subject.KvpressPipeline(press="decoding", sink=3).capabilities())
        self.assertNotIn("domain", pipeline_subject.KvpressPipeline(press="prefill-decoding", sink=1).capabilities())
        s = pipeline_subject.KvpressPipeline()
        for config in (dict(GROWTH, growth=False), dict(GROWTH, window=3)):
            with self.assertRaises(kvcheck.Outside):
                s.open(config)
        self.assertIsNone(s.pipe, "a refused config builds no model")


@unittest.skipUnless(HAVE_KVPRESS, SKIP)
class AgainstARecompute(unittest.TestCase):
    def conversation(self, subject):
        subject.open(GROWTH)
        seen = [write(subject, 0, 12), write(subject, 12, 5), write(subject, 17, 0)]
        subject.rewind(6)
        seen.append(write(subject, 6, 4))
        seen.append(write(subject, 2, 3))
        subject.reset()
        seen.append(write(subject, 0, 9))
        return seen

    def test_streaming_rerotated_and_uncompressed_agree(self):
        # The decoding presses up to their first compression's effect (two
        # answer tokens after it), which the order of the kept keys does
        # not reach.
        for args in (["--press", "none"], ["--press", "streaming"], ["--press", "rerotate"],
                     ["--press", "streaming", "--ratio", "0.25", "--sink", "2", "--max-tokens", "4"],
                     ["--press", "decoding", "--sink", "2", "--interval", "2", "--target", "6", "--max-tokens", "4"],
                     ["--press", "ratio-decoding", "--ratio", "0.25", "--sink", "2", "--interval", "2",
                      "--max-tokens", "4"],
                     ["--press", "prefill-decoding", "--ratio", "0.5", "--sink", "2", "--interval", "2",
                      "--target", "6", "--max-tokens", "2"]):
            s = pipeline_subject.KvpressPipeline.from_args(args)
            seen = self.conversation(s)
            self.assertEqual(seen[1], list(range(17)), args)

    def test_a_wrong_judge_is_caught(self):
        # The recompute told the press keeps one token more than it does:
        # the comparison must notice.
        s = pipeline_subject.KvpressPipeline()
        s.open(GROWTH)
        kept = pipeline_subject.kept_positions
        try:
            pipeline_subject.kept_positions = lambda length, ratio, sink: kept(length, ratio, sink) + [4]
            with self.assertRaises(pipeline_subject.RecomputeMismatch):
                write(s, 0, 12)
        finally:
            pipeline_subject.kept_positions = kept

    def test_a_deeper_layer_differs_by_design(self):
        # Layer 1's keys of a kept token were computed attending to the
        # pruned ones: no recompute of the kept tokens reproduces them.
        s = pipeline_subject.KvpressPipeline.from_args(["--layers", "2"])
        s.open(GROWTH)
        with self.assertRaises(pipeline_subject.RecomputeMismatch):
            write(s, 0, 12)


@unittest.skipUnless(HAVE_KVPRESS, SKIP)
class Findings(unittest.TestCase):
    """The minimized trace of docs/findings/kvpress-streaming-sinks-tie.md:
    it shows the finding on the release, or the test skips naming it (a
    patched library)."""

    def test_finding_streaming_sinks_tie(self):
        import json

        with open(os.path.join(HERE, "traces", "streaming-sinks-tie.kvtrace.json")) as f:
            trace = json.load(f)
        s = pipeline_subject.KvpressPipeline.from_args(["--press", "streaming", "--ratio", "0.9", "--sink", "4"])
        s.open(GROWTH)
        (op,) = trace["ops"]
        try:
            write(s, op["write"]["start"], op["write"]["len"])
        except pipeline_subject.RecomputeMismatch as caught:
            self.assertIn("a recompute of what the press keeps", str(caught))
        else:
            self.skipTest("this kvpress keeps the first sinks (docs/findings/kvpress-streaming-sinks-tie.md)")

    def test_finding_quantized_answers_stay(self):
        # One call, the same question twice, on QuantizedCache: the first
        # answer is still in the cache when the second question is asked.
        import json

        with open(os.path.join(HERE, "traces", "quantized-answers-stay.kvtrace.json")) as f:
            trace = json.load(f)
        s = pipeline_subject.KvpressPipeline.from_args(
            ["--press", "streaming", "--ratio", "0.25", "--sink", "2", "--cache", "quantized", "--tolerance", "0.05",
             "--questions", "2"])
        s.open(GROWTH)
        (op,) = trace["ops"]
        try:
            write(s, op["write"]["start"], op["write"]["len"])
        except pipeline_subject.RecomputeMismatch as caught:
            self.assertIn("the first one again", str(caught))
        else:
            self.skipTest("this kvpress takes each answer out of a quantized cache "
                          "(docs/findings/kvpress-quantized-answers-stay.md)")

    def replay(self, name, args):
        """Replays a one-call finding trace on the subject built from
        `args`: the RecomputeMismatch it raises, or None."""
        import json

        with open(os.path.join(HERE, "traces", name)) as f:
            trace = json.load(f)
        s = pipeline_subject.KvpressPipeline.from_args(args)
        s.open(GROWTH)
        (op,) = trace["ops"]
        try:
            write(s, op["write"]["start"], op["write"]["len"])
        except pipeline_subject.RecomputeMismatch as caught:
            return caught
        return None

    def test_finding_decoding_order_lost(self):
        # DecodingPress compressing at every step: from the second
        # compression on, StreamingLLMPress reads top-k's order as positions.
        caught = self.replay("decoding-order-lost.kvtrace.json",
                             ["--press", "decoding", "--sink", "2", "--interval", "1", "--target", "5",
                              "--max-tokens", "4"])
        if caught is None:
            self.skipTest("this kvpress keeps the cache in positional order "
                          "(docs/findings/kvpress-decoding-order-lost.md)")
        self.assertIn("answer token", str(caught))

    def test_finding_decoding_quantized_residual(self):
        # DecodingPress on a QuantizedCache compresses the quantized
        # context alone: the question and the answer so far are dropped.
        caught = self.replay("decoding-quantized-residual.kvtrace.json",
                             ["--press", "decoding", "--sink", "2", "--interval", "2", "--target", "8",
                              "--max-tokens", "5", "--cache", "quantized", "--tolerance", "0.02"])
        if caught is None:
            self.skipTest("this kvpress compresses a quantized layer's residual tokens too "
                          "(docs/findings/kvpress-decoding-quantized-residual.md)")
        self.assertIn("answer token", str(caught))


if __name__ == "__main__":
    unittest.main()
