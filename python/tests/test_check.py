"""kvcheck.check against the kvcheck binary: $KVCHECK_BIN, else the debug
build target/debug/kvcheck (what `cargo test --workspace` builds). Skips with
a message when neither exists.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import kvcheck
from kvcheck import runner
from kvcheck.adapter import ADAPTERS, shared

import declared_subjects
import echo_subjects
from kvcheck_binary import WithBinary, needs_binary

reference_subject = shared("reference_subject")


@needs_binary
class Check(WithBinary):
    def test_the_reference_passes_and_the_op_count_comes_back(self):
        result = kvcheck.check(reference_subject.Reference, time=2, profile=["tiny", "packed"], seed=3, out=self.out)
        self.assertGreater(result.ops, 100)
        self.assertIn("no divergence", result.summary())
        # The judged ops by kind come back from the report, and add up.
        self.assertGreater(result.op_counts["appends"], 0)
        kinds = ("appends", "rewrites", "probes", "gaps", "rewinds", "evicts", "pins", "resets")
        self.assertEqual(sum(result.op_counts[k] for k in kinds), result.ops)
        self.assertIn("ops judged: ", result.summary())

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
        # Run in a checkout, the binary spells the replay with cargo; the
        # path is absolute either way.
        self.assertTrue(os.path.isabs(divergence.trace))
        self.assertIn("replay %s --subject" % divergence.trace, divergence.replay)
        self.assertIn("--fault roll-ignores-sink", divergence.replay)
        self.assertIn("reproduce: %s" % divergence.replay, str(divergence))


    def test_a_subject_outside_everywhere_cannot_pass(self):
        # With every default, a subject that answers outside to every write
        # fails: its refusals, reads and resets are judged, but it serves
        # no write with state.
        with self.assertRaises(AssertionError) as caught:
            kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", out=self.out)
        self.assertIsInstance(caught.exception, (kvcheck.TooFewJudged, kvcheck.MostlyOutside))
        # The floor counts only the writes served with state: none here,
        # however many refusals and reads were judged.
        with self.assertRaises(kvcheck.TooFewJudged) as caught:
            kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", max_outside=1.0, out=self.out)
        self.assertEqual(caught.exception.served, 0)
        self.assertGreater(caught.exception.judged, 0)
        self.assertIn("--min-judged", str(caught.exception))
        self.assertGreater(caught.exception.outside_share, 0.9)
        # With the floor off, the share outside still fails it.
        with self.assertRaises(kvcheck.MostlyOutside) as caught:
            kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", min_judged=0, out=self.out)
        self.assertGreater(caught.exception.outside_share, 0.9)
        self.assertEqual(caught.exception.max_outside, 0.5)
        self.assertTrue(any("outside" in warning for warning in caught.exception.warnings), str(caught.exception))
        # Only with both guards off does it pass, every drawn op outside.
        result = kvcheck.check(echo_subjects.Nowhere, time=1, seed=3, profile="tiny", min_judged=0,
                               max_outside=1.0, out=self.out)
        self.assertGreater(result.outside_share, 0.9)

    def test_the_warning_suggests_what_the_subject_refused_and_following_it_never_violates(self):
        # A cache that refuses every rewrite, the latest chunk's included,
        # is told "rewrites": "none": "latest" would admit the latest
        # chunk's rewrite, which it refuses.
        result = kvcheck.check(declared_subjects.RefusesRewrites, time=2, seed=3, profile=["tiny", "sinks"],
                               max_outside=1.0, out=self.out)
        warning = " ".join(result.warnings)
        self.assertIn('"rewrites": "none"', warning)
        self.assertNotIn('"rewrites": "latest"', warning)
        suggested = json.loads("{%s}" % ", ".join(re.findall(r'"[a-z_]+": (?:"[a-z_]+"|true|false)', warning)))
        self.assertEqual(suggested["rewrites"], "none")
        # Declared literally, every request drawn is one it serves: no
        # domain violation, nothing outside.
        os.environ["ECHO_DOMAIN"] = json.dumps(suggested)
        try:
            declared = kvcheck.check(declared_subjects.RefusesRewrites, time=2, seed=3, profile=["tiny", "sinks"],
                                     out=self.out)
        finally:
            os.environ.pop("ECHO_DOMAIN")
        self.assertEqual(declared.outside_share, 0.0, declared.output)
        self.assertGreater(declared.ops, 100)

    def declared(self, domain, **kwargs):
        os.environ["ECHO_DOMAIN"] = json.dumps(domain)
        try:
            return kvcheck.check(declared_subjects.Declared, time=1, seed=3, out=self.out, **kwargs)
        finally:
            os.environ.pop("ECHO_DOMAIN")

    def test_a_profile_no_declared_chunk_fits_is_skipped_naming_why(self):
        # A fixed chunk of 3 under the pipeline profile, whose smallest
        # caches have room for 2: those are never drawn, nothing aborts.
        fixed = {"chunks": {"lengths": [3]}, "oversized": False}
        result = self.declared(fixed, profile="pipeline")
        self.assertGreater(result.ops, 100)
        self.assertEqual(result.outside_share, 0.0, result.output)
        # A chunk of 12 fits no tiny cache (capacity 6 at most): the
        # profile is skipped with the reason, the pipeline one runs.
        result = self.declared(dict(fixed, chunks={"lengths": [12]}), profile=["tiny", "pipeline"])
        self.assertIn("skipped: unsupported by the subject: profile tiny", result.output)
        self.assertIn("holds no declared chunk", result.output)
        self.assertRegex(result.output, r"\npipeline +dense")
        self.assertNotIn("rejects", result.output)

    def test_held_requests_and_config_limits_keep_the_draws_inside(self):
        domain = {"rewinds": "held", "evict": "held", "pin": "held",
                  "configs": {"min_room": 2, "min_window": 2, "heads": [1], "batch": [1]}}
        result = self.declared(domain, profile=["tiny", "pins", "multi-head", "batch2"])
        self.assertEqual(result.outside_share, 0.0, result.output)
        self.assertIn('profile multi-head (2-4 heads with head-range writes): config outside the declared domain: '
                      'heads', result.output)
        self.assertIn('profile batch2 (batch of two): config outside the declared domain: batch 2', result.output)

    def test_a_subject_serving_its_writes_passes_the_floor(self):
        # The reference serves hundreds of writes a second: over the floor.
        result = kvcheck.check(reference_subject.Reference, time=1, seed=3, profile="tiny", min_judged=100,
                               out=self.out)
        self.assertEqual(result.outside_share, 0.0)


class InMain(kvcheck.Subject):
    pass


class Command(unittest.TestCase):
    def test_a_class_is_served_by_module_or_by_file(self):
        command = runner.serve_command(echo_subjects.Echo, ["--fault", "x"])
        self.assertEqual(command[1:], ["-m", "kvcheck.serve", "echo_subjects:Echo", "--fault", "x"])
        # A module loaded by path (kvcheck.adapter.load_file), which sys.path
        # does not import, is served from its file.
        command = runner.serve_command(reference_subject.Reference, ["--fault", "x"])
        self.assertEqual(command[3:], [os.path.join(ADAPTERS, "reference_subject.py") + ":Reference", "--fault", "x"])
        # A class of a script run as __main__ is served from its file.
        InMain.__module__ = "__main__"
        self.assertRegex(runner.serve_command(InMain)[3], r"^/.+\.py:InMain$")

    def test_the_replay_of_a_trace_asks_the_subject_as_the_run_did(self):
        command = ["kvcheck", "run", "--subject", "exec:x", "--time", "5", "--strict-domain",
                   "--subject-timeout", "60", "--min-judged", "3", "--exact-kinds"]
        self.assertEqual(runner.replay_options(command),
                         ["--strict-domain", "--subject-timeout", "60", "--exact-kinds"])
        self.assertEqual(runner.replay_options(["kvcheck", "run", "--subject-timeout=7"]), ["--subject-timeout=7"])
        self.assertEqual(runner.replay_options(["kvcheck", "run", "--time", "5"]), [])

    def test_the_totals_come_from_the_json_report(self):
        report = {"kind": "run", "elapsed_s": 2.5, "profiles": [
            {"ops": 100, "domain": {"drawn": 150, "outside": 40, "cuts": 3}},
            {"ops": 23, "domain": {"drawn": 50, "outside": 10, "cuts": 1}},
            {"ops": 0},
        ]}
        self.assertEqual(runner.totals(report), (123, 2.5, 0.25))
        self.assertEqual(runner.totals({"kind": "run", "profiles": [{"ops": 7}]}), (7, 0.0, 0.0))
        result = kvcheck.Result(400, 1.0, "X", outside_share=0.038, warnings=["w"])
        self.assertIn("3.8% of the drawn ops outside", result.summary())
        self.assertEqual(runner.json_option(["--keep-going", "--json", "r.json"]), "r.json")
        self.assertEqual(runner.json_option(["--json=r.json"]), "r.json")
        self.assertIsNone(runner.json_option(["--time", "3"]))


# A stand-in for the kvcheck binary: it writes the JSON report that
# $FAKE_REPORT holds (with {out} replaced by --out) to the --json path,
# prints text no parser could read, and exits with $FAKE_EXIT.
FAKE_BINARY = """#!%s
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
report = os.environ.get("FAKE_REPORT")
if report and "--json" in args:
    with open(args[args.index("--json") + 1], "w") as f:
        f.write(report.replace("{out}", out))
print("%%%% reworded output: nothing here says how many ops %%%%")
sys.exit(int(os.environ["FAKE_EXIT"]))
"""


class ReadsTheReport(unittest.TestCase):
    """kvcheck.check reads the run's JSON report, not its printed text:
    against a binary whose output says nothing readable, every outcome
    still comes back."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.binary = os.path.join(self.dir, "kvcheck")
        with open(self.binary, "w") as f:
            f.write(FAKE_BINARY % sys.executable)
        os.chmod(self.binary, 0o755)
        self.saved = {k: os.environ.get(k) for k in ("KVCHECK_BIN", "FAKE_REPORT", "FAKE_EXIT")}
        os.environ["KVCHECK_BIN"] = self.binary

    def tearDown(self):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(self.dir)

    def check(self, exit, report, **kwargs):
        os.environ["FAKE_EXIT"] = str(exit)
        if report is None:
            os.environ.pop("FAKE_REPORT", None)
        else:
            os.environ["FAKE_REPORT"] = json.dumps(report)
        return kvcheck.check(reference_subject.Reference, time=1, out=os.path.join(self.dir, "f"), **kwargs)

    def run_report(self, **fields):
        report = {"kind": "run", "format": "kvcheck-report/1", "elapsed_s": 1.5, "min_judged": 100,
                  "profiles": [{"ops": 300, "domain": {"drawn": 400, "outside": 100, "cuts": 9}}]}
        report.update(fields)
        return report

    def test_a_pass(self):
        result = self.check(0, self.run_report(warnings=["more than 20% outside"]))
        self.assertEqual((result.ops, result.seconds, result.outside_share), (300, 1.5, 0.25))
        self.assertEqual(result.warnings, ["more than 20% outside"])
        self.assertIn("reworded output", result.output)

    def test_a_divergence(self):
        found = {"report": "the framed report\ntrace:    {out}/t.kvtrace.json\nreproduce: kvcheck replay {out}/t.kvtrace.json",
                 "trace": "{out}/t.kvtrace.json", "reproduce": "kvcheck replay {out}/t.kvtrace.json",
                 "summary": "s", "kind": "visible", "first": "profile tiny case 0", "ops": 9, "minimized_ops": 2}
        with self.assertRaises(kvcheck.Divergence) as caught:
            self.check(1, self.run_report(divergence=found), extra=["--subject-timeout", "60"])
        divergence = caught.exception
        out = os.path.join(self.dir, "f")
        self.assertEqual(divergence.trace, out + "/t.kvtrace.json")
        self.assertEqual(divergence.replay, "kvcheck replay %s/t.kvtrace.json --subject-timeout 60" % out)
        self.assertTrue(str(divergence).startswith("the framed report"), str(divergence))

    def test_findings_of_a_triage_run(self):
        findings = [{"summary": "visible divergence", "count": 4, "minimized_trace": "{out}/a.kvtrace.json"},
                    {"summary": "values divergence", "count": 1, "minimized_trace": "{out}/b.kvtrace.json"}]
        with self.assertRaises(kvcheck.Divergence) as caught:
            self.check(1, self.run_report(findings=findings), extra=["--keep-going"])
        self.assertTrue(caught.exception.trace.endswith("/a.kvtrace.json"))
        self.assertIn("values divergence (1 times", str(caught.exception))

    def test_too_few_judged(self):
        report = self.run_report(min_judged=250)
        report["profiles"][0]["domain"]["served"] = 200
        with self.assertRaises(kvcheck.TooFewJudged) as caught:
            self.check(1, report)
        self.assertEqual((caught.exception.judged, caught.exception.min_judged), (300, 250))
        self.assertEqual(caught.exception.served, 200)
        self.assertEqual(caught.exception.outside_share, 0.25)
        self.assertIn("--min-judged", str(caught.exception))

    def test_mostly_outside_fails_a_passing_run(self):
        report = self.run_report(warnings=['declaring in its domain "rewrites": "none" (9)'])
        report["profiles"][0]["domain"].update(drawn=400, outside=240)
        with self.assertRaises(kvcheck.MostlyOutside) as caught:
            self.check(0, report)
        self.assertEqual(caught.exception.outside_share, 0.6)
        self.assertIn('"rewrites": "none"', str(caught.exception))
        self.assertEqual(self.check(0, report, max_outside=0.7).outside_share, 0.6)

    def test_no_report_is_an_error_with_the_output(self):
        with self.assertRaises(RuntimeError) as caught:
            self.check(2, None)
        self.assertIn("reworded output", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
