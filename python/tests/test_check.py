"""kvcheck.check against the kvcheck binary: $KVCHECK_BIN, else the debug
build target/debug/kvcheck (what `cargo test --workspace` builds). Skips with
a message when neither exists.

Run: python3 -m unittest discover -s python/tests -v
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "adapters"))

import kvcheck  # noqa: E402
from kvcheck import runner  # noqa: E402

import reference_subject  # noqa: E402

sys.path.insert(0, HERE)
import echo_subjects  # noqa: E402

DEBUG_BINARY = os.path.join(ROOT, "target", "debug", "kvcheck")
BINARY = os.environ.get("KVCHECK_BIN") or DEBUG_BINARY


@unittest.skipUnless(os.path.isfile(BINARY), "no kvcheck binary at %s: run cargo build -p kvcheck" % BINARY)
class Check(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.get("KVCHECK_BIN")
        os.environ["KVCHECK_BIN"] = BINARY
        self.out = os.path.join(ROOT, "target", "python-check-failures")

    def tearDown(self):
        if self.saved is None:
            os.environ.pop("KVCHECK_BIN")
        else:
            os.environ["KVCHECK_BIN"] = self.saved

    def test_the_reference_passes_and_the_op_count_comes_back(self):
        result = kvcheck.check(reference_subject.Reference, time=2, profile=["tiny", "packed"], seed=3, out=self.out)
        self.assertGreater(result.ops, 100)
        self.assertIn("no divergence", result.summary())

    def test_a_fault_fails_with_the_minimized_trace_and_its_replay(self):
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(
                reference_subject.Reference, time=20, seed=7, args=["--fault", "roll-ignores-sink"], out=self.out
            )
        divergence = caught.exception
        self.assertIn("divergence at step", divergence.report)
        self.assertTrue(os.path.isfile(divergence.trace), divergence.trace)
        with open(divergence.trace) as f:
            ops = json.load(f)["ops"]
        self.assertLessEqual(len(ops), 5, str(divergence))
        self.assertIn("kvcheck replay %s --subject" % divergence.trace, divergence.replay)
        self.assertIn("--fault roll-ignores-sink", divergence.replay)
        self.assertIn("replay it:", str(divergence))


    def test_a_subject_outside_everywhere_cannot_pass(self):
        # (its cases still judge their resets and reads before a write)
        with self.assertRaises(kvcheck.TooFewJudged) as caught:
            kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", min_judged=5000, out=self.out)
        self.assertIn("--min-judged", str(caught.exception))
        self.assertGreater(caught.exception.outside_share, 0.9)
        # With the floor off it passes, every drawn op outside, with a warning.
        result = kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", min_judged=0, out=self.out)
        self.assertLess(result.ops, 5000)
        self.assertGreater(result.outside_share, 0.9)
        self.assertTrue(any("outside" in warning for warning in result.warnings), result.output)


class InMain(kvcheck.Subject):
    pass


class Command(unittest.TestCase):
    def test_a_class_is_served_by_module_or_by_file(self):
        command = runner.serve_command(reference_subject.Reference, ["--fault", "x"])
        self.assertEqual(command[1:], ["-m", "kvcheck.serve", "reference_subject:Reference", "--fault", "x"])
        # A class of a script run as __main__ is served from its file.
        InMain.__module__ = "__main__"
        self.assertRegex(runner.serve_command(InMain)[3], r"^/.+\.py:InMain$")

    def test_the_run_summary_is_parsed(self):
        self.assertEqual(runner.checked("x\n142,169 ops checked in 20.0 s\nno divergences\n"), (142169, 20.0))
        output = "1 divergences; traces:\n  a/min.kvtrace.json\n  a/first.kvtrace.json\n"
        self.assertEqual(runner.first_trace(output), "a/min.kvtrace.json")
        report = "FAIL x\n      ──── kvcheck: outcome divergence ────\n      config:   dense\n      trace:    elsewhere\n"
        self.assertEqual(runner.report(report), "──── kvcheck: outcome divergence ────\nconfig:   dense")

    def test_the_replay_of_a_trace_asks_the_subject_as_the_run_did(self):
        command = ["kvcheck", "run", "--subject", "exec:x", "--time", "5", "--strict-domain",
                   "--subject-timeout", "60", "--min-judged", "3", "--exact-kinds"]
        self.assertEqual(runner.replay_options(command),
                         ["--strict-domain", "--subject-timeout", "60", "--exact-kinds"])
        self.assertEqual(runner.replay_options(["kvcheck", "run", "--subject-timeout=7"]), ["--subject-timeout=7"])
        self.assertEqual(runner.replay_options(["kvcheck", "run", "--time", "5"]), [])

    def test_the_outside_share_and_warnings_are_parsed(self):
        output = (
            "400 ops checked in 1.0 s\n"
            "outside the subject's domain: 150 of 4000 drawn ops (3.8%), 31 cases cut there\n"
            "warning: more than 20% of the drawn ops were outside; declare \"gaps\": false\n"
            "no divergences\n"
        )
        self.assertAlmostEqual(runner.outside_share(output), 0.038)
        self.assertEqual(runner.warnings(output), ['more than 20% of the drawn ops were outside; declare "gaps": false'])
        self.assertIsNone(runner.outside_share("400 ops checked in 1.0 s\nno divergences\n"))
        result = kvcheck.Result(400, 1.0, "X", output)
        self.assertIn("3.8% of the drawn ops outside", result.summary())


if __name__ == "__main__":
    unittest.main()
