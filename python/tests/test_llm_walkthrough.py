"""The LLM walk-through of docs/python.md: examples/llm-sink-cache/sink_cache.py
(a sink cache of the Hugging Face kind, trimming after the read) and its
pytest test are shown verbatim; kvcheck passes the cache declared, drawing
inside its domain, and reports its planted bug (the sink trimmed with the
window) as itself.

The checks through the binary use $KVCHECK_BIN, else the debug build
target/debug/kvcheck, and skip when neither exists.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import os
import re
import unittest

import kvcheck
from kvcheck import runner
from kvcheck.adapter import CHECKOUT as ROOT
from kvcheck.adapter import load_module
from kvcheck.subject import Session

from kvcheck_binary import WithBinary, needs_binary

EXAMPLE = os.path.join(ROOT, "examples", "llm-sink-cache")
sink_cache = load_module(EXAMPLE, "sink_cache")
test_sink_cache = load_module(EXAMPLE, "test_sink_cache")  # its pytest test, which imports sink_cache


def config(capacity, sink, heads=1, head_dim=1):
    return {"variant": "dense", "batch": 1, "heads": heads, "head_dim": head_dim, "dtype": "f32",
            "capacity": capacity, "sink": sink, "window": None, "growth": False, "global_sink": 0,
            "packed": None, "seed": 0, "trim": "after_read"}


class Text(unittest.TestCase):
    def test_the_doc_shows_both_files_verbatim(self):
        with open(os.path.join(ROOT, "docs", "python.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        for name, most in (("sink_cache.py", 60), ("test_sink_cache.py", 6)):
            with open(os.path.join(EXAMPLE, name)) as f:
                code = f.read()
            self.assertIn(code, blocks, "docs/python.md must show examples/llm-sink-cache/%s verbatim" % name)
            self.assertLessEqual(len(code.splitlines()), most, name)


class Cache(unittest.TestCase):
    """The cache through the protocol, without the binary."""

    def session(self, subject, capacity=4, sink=1, heads=1, head_dim=1):
        session = Session(subject)
        hello = session.handle({"hello": {"protocol": kvcheck.PROTOCOL, "revision": 4}})
        self.assertEqual(hello["hello"]["capabilities"]["trims"], ["after_read"])
        self.assertIn("ok", session.handle({"open": {"config": config(capacity, sink, heads, head_dim)}}))
        return session

    def write(self, session, start, length, row=b""):
        text = __import__("base64").b64encode(row * length).decode("ascii")
        return session.handle({"op": {"write": {"start": start, "len": length}}, "index": 0, "k": text, "v": text})

    def test_attention_reads_the_whole_chunk_then_the_window_is_trimmed(self):
        session = self.session(sink_cache.SinkCache())
        self.assertEqual(self.write(session, 0, 4, b"\0" * 4)["ok"]["visible"], [0, 1, 2, 3])
        # The chunk is read beside everything held, then 1 and 2 go.
        self.assertEqual(self.write(session, 4, 2, b"\1" * 4)["ok"]["visible"], [0, 1, 2, 3, 4, 5])
        self.assertEqual(self.write(session, 6, 0)["ok"]["visible"], [0, 3, 4, 5])

    def test_rows_come_back_as_written(self):
        session = self.session(sink_cache.SinkCache(), capacity=2, sink=1, heads=2, head_dim=1)
        ok = self.write(session, 0, 3, b"ABCDEFGH")["ok"]
        self.assertEqual(ok["visible"], [0, 1, 2])
        self.assertEqual(__import__("base64").b64decode(ok["k"]), b"ABCDEFGH" * 3)
        self.assertEqual(self.write(session, 3, 0)["ok"]["visible"], [0, 2])

    def test_the_planted_bug_trims_the_sink(self):
        session = self.session(sink_cache.SinkCache(bug=True))
        self.write(session, 0, 4, b"\0" * 4)
        self.write(session, 4, 2, b"\1" * 4)
        self.assertEqual(self.write(session, 6, 0)["ok"]["visible"], [2, 3, 4, 5])

    def test_a_rewind_crops_to_the_rows_held(self):
        session = self.session(sink_cache.SinkCache())
        self.write(session, 0, 3, b"\0" * 4)
        self.assertEqual(session.handle({"op": {"rewind": {"to": 1}}, "index": 1})["ok"]["global_end"], 1)
        self.assertEqual(self.write(session, 1, 0)["ok"]["visible"], [0])


@needs_binary
class Checked(WithBinary):
    def tearDown(self):
        super().tearDown()
        runner.TIME_OVERRIDE = None

    def test_the_pytest_test_passes(self):
        # The example's own test, as pytest would run it, shortened.
        runner.TIME_OVERRIDE = 3
        test_sink_cache.test_sink_cache_keeps_the_contract()

    def test_the_declared_cache_draws_inside_its_domain_on_the_default_profiles(self):
        result = kvcheck.check(sink_cache.SinkCache, time=4, seed=7, out=self.out)
        self.assertGreater(result.ops, 1000)
        self.assertLess(result.outside_share, 0.05, result.output)
        # Every dense profile but those it cannot open runs; batch2 is
        # skipped naming the declared limit.
        self.assertIn('skipped: unsupported by the subject: profile batch2 (batch of two): config outside the '
                      'declared domain: batch 2, not in "configs": {"batch": [1]}', result.output)
        for profile in ("tiny", "sinks", "pins", "multi-head", "half", "pipeline"):
            self.assertRegex(result.output, r"\n%s +dense" % profile)

    def test_the_planted_bug_is_reported_as_itself(self):
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(sink_cache.SinkCache, time=10, seed=7, args=["--bug"], out=self.out)
        report = caught.exception.report
        # The sink position 0 is missing from what attention reads.
        self.assertRegex(report, r"visible divergence at step \d+")
        expected = re.search(r"expected: ok G=\d+ visible (.*)", report).group(1)
        actual = re.search(r"actual: +ok G=\d+ visible (.*)", report).group(1)
        self.assertTrue(expected.startswith("0"), report)
        self.assertFalse(actual.startswith("0"), report)
        self.assertNotIn("outside", report.lower())
        self.assertNotIn("domain", report.lower())
        self.assertTrue(os.path.isfile(caught.exception.trace))


if __name__ == "__main__":
    unittest.main()
