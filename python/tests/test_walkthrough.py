"""The walk-through of docs/python.md: its code is examples/pipeline-walkthrough/toy_loop.py,
verbatim, and kvcheck finds its planted bug and passes it without.

The checks through the binary use $KVCHECK_BIN, else the debug build
target/debug/kvcheck, and skip when neither exists.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import os
import re
import unittest

import kvcheck
from kvcheck.adapter import CHECKOUT as ROOT
from kvcheck.adapter import load_module
from kvcheck.subject import Session

from kvcheck_binary import WithBinary, needs_binary

EXAMPLE = os.path.join(ROOT, "examples", "pipeline-walkthrough")
toy_loop = load_module(EXAMPLE, "toy_loop")


class Undeclared(toy_loop.ToyLoop):
    """The same loop, answering Outside where it does, but declaring no
    domain: kvcheck draws from the whole contract and cuts the cases."""

    domain = None


def config(capacity, sink):
    return {"variant": "dense", "batch": 1, "heads": 1, "head_dim": 1, "dtype": "f32", "capacity": capacity,
            "sink": sink, "window": None, "growth": False, "global_sink": 0, "packed": None, "seed": 0}


class Text(unittest.TestCase):
    def test_the_doc_shows_the_file_verbatim(self):
        with open(os.path.join(ROOT, "docs", "python.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        with open(os.path.join(EXAMPLE, "toy_loop.py")) as f:
            code = f.read()
        self.assertIn(code, blocks, "docs/python.md must show examples/pipeline-walkthrough/toy_loop.py verbatim")
        self.assertLessEqual(len(code.splitlines()), 60)


class Loop(unittest.TestCase):
    """The toy through the protocol, without the binary."""

    def session(self, subject, capacity=4, sink=1):
        session = Session(subject)
        session.handle({"hello": {"protocol": kvcheck.PROTOCOL, "revision": 3}})
        self.assertIn("ok", session.handle({"open": {"config": config(capacity, sink)}}))
        return session

    def write(self, session, start, length):
        return session.handle({"op": {"write": {"start": start, "len": length}}, "index": 0, "k": "", "v": ""})

    def test_the_sink_stays_and_the_rest_rolls(self):
        session = self.session(toy_loop.ToyLoop())
        for start in (0, 2, 4):
            ok = self.write(session, start, 2)["ok"]
        self.assertEqual(ok, {"global_end": 6, "visible": [0, 3, 4, 5]})
        self.assertEqual(self.write(session, 4, 2)["ok"]["visible"], [0, 3, 4, 5])
        self.assertEqual(self.write(session, 6, 0)["ok"]["visible"], [0, 3, 4, 5])

    def test_the_planted_bug_rolls_the_sink_out(self):
        session = self.session(toy_loop.ToyLoop(bug=True))
        for start in (0, 2, 4):
            ok = self.write(session, start, 2)["ok"]
        self.assertEqual(ok["visible"], [2, 3, 4, 5])

    def test_requests_the_loop_never_gets_are_outside(self):
        session = self.session(toy_loop.ToyLoop())
        self.assertIn("outside", self.write(session, 0, 0))  # a read before any chunk
        self.assertIn("outside", self.write(session, 0, 4))  # wider than C - S
        self.write(session, 0, 2)
        self.write(session, 2, 1)
        for start, length in ((0, 2), (5, 1), (-1, 1), (1, 0)):
            self.assertIn("outside", self.write(session, start, length), (start, length))
        self.assertEqual(session.subject.global_end, 3)
        caps = session.subject.capabilities(revision=3)
        self.assertEqual(caps["domain"]["rewrites"], "latest")
        self.assertNotIn("domain", Undeclared().capabilities(revision=3))


@needs_binary
class Checked(WithBinary):
    def assert_found(self, subject):
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(subject, time=3, seed=7, args=["--bug"], out=self.out)
        report = caught.exception.report
        self.assertRegex(report, r"(visible|outcome) divergence at step")
        self.assertNotIn("outside", report.lower())
        self.assertNotIn("domain", report.lower())

    def test_the_declared_loop_passes_drawing_inside_its_domain(self):
        result = kvcheck.check(toy_loop.ToyLoop, time=3, seed=7, out=self.out)
        self.assertGreater(result.ops, 100)
        self.assertLess(result.outside_share, 0.05, result.output)
        result = kvcheck.check(toy_loop.ToyLoop, time=2, seed=7, profile="pipeline", out=self.out)
        self.assertLess(result.outside_share, 0.05, result.output)

    def test_the_declared_loop_with_the_bug_fails(self):
        self.assert_found(toy_loop.ToyLoop)

    def test_the_undeclared_loop_fails_mostly_outside_naming_its_declaration(self):
        # Most of what kvcheck draws from the whole contract is cut: the
        # check fails, and its warning names the loop's own declaration.
        with self.assertRaises(kvcheck.MostlyOutside) as caught:
            kvcheck.check(Undeclared, time=3, seed=7, out=self.out)
        warning = " ".join(caught.exception.warnings)
        suggested = json.loads("{%s}" % ", ".join(re.findall(r'"[a-z_]+": (?:"[a-z_]+"|true|false)', warning)))
        self.assertEqual(suggested, toy_loop.ToyLoop.domain)
        # Allowed to, it passes with its cases cut.
        result = kvcheck.check(Undeclared, time=3, seed=7, max_outside=1.0, out=self.out)
        self.assertGreater(result.ops, 100)
        self.assertGreater(result.outside_share, 0.5, result.output)

    def test_the_undeclared_loop_with_the_bug_fails(self):
        self.assert_found(Undeclared)

    def test_outside_everywhere_is_a_divergence_under_strict_domain(self):
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(Undeclared, time=3, seed=7, strict_domain=True, out=self.out)
        self.assertIn("outside", caught.exception.report.lower())


if __name__ == "__main__":
    unittest.main()
