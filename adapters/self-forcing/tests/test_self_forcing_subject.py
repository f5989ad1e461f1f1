"""The Self-Forcing adapter against a Self-Forcing checkout (opt-in).

Self-Forcing is not on a package registry: setup.sh takes a checkout.

    SELF_FORCING_SRC=/path/to/Self-Forcing adapters/self-forcing/setup.sh
    adapters/self-forcing/.venv/bin/python -m unittest discover -s adapters/self-forcing/tests -v

Without a checkout (SELF_FORCING_SRC, or the one setup.sh recorded) or
without torch every test is skipped with that instruction.
"""

import os
import sys
import unittest

from kvcheck.adapter import CHECKOUT, load_module, shared

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kvtrace_replay = shared("kvtrace_replay")

SKIP = (
    "Self-Forcing environment absent: run SELF_FORCING_SRC=CHECKOUT adapters/self-forcing/setup.sh, "
    "then this with adapters/self-forcing/.venv/bin/python"
)


def recorded_source():
    """$SELF_FORCING_SRC, else the checkout setup.sh recorded in its marker
    (the subject's own lookup), or None."""
    subject = load_module(ADAPTER, "subject")

    try:
        return subject.source()
    except RuntimeError:
        return None


SRC = recorded_source()
try:
    import torch  # noqa: F401

    READY = bool(SRC)
except ImportError:
    READY = False


@unittest.skipUnless(READY, SKIP)
class SelfForcing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        command = "%s %s --src %s" % (sys.executable, os.path.join(ADAPTER, "subject.py"), SRC)
        cls.subject = kvtrace_replay.Subject(command)

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def open(self, **config):
        full = kvtrace_replay.full_config(dict({"variant": "dense"}, **config))
        self.payloads = kvtrace_replay.Payloads(full)
        self.config = full
        self.assertIn("ok", self.subject.request({"open": {"config": full}}))

    def write(self, index, start, length):
        import base64

        heads = range(self.config["heads"])
        data = {kv: base64.b64encode(self.payloads.tensor(i, index, start, length, heads)).decode()
                for i, kv in enumerate("kv")}
        return self.subject.request({"op": {"write": {"start": start, "len": length}}, "index": index, **data})

    def test_hello_names_the_checkout(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(sorted(caps["ops"]), ["reset", "write"])
        self.assertIn("Self-Forcing", self.subject.hello["name"])

    def test_the_chunk_loop_agrees_with_the_contract(self):
        pipeline_protocol = load_module(ADAPTER, "pipeline_protocol")

        problems = {}
        for i, trace in enumerate(pipeline_protocol.generate(12, 9, expect=True)):
            found = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
            if found:
                problems[i] = found[:3]
        self.assertEqual(problems, {})

    def test_the_reset_keeps_buffers_but_reads_only_the_new_video(self):
        # inference()'s reset sets the end indices to 0 and keeps the old rows:
        # the next video must read none of them.
        self.open(capacity=4, sink=1)
        for index, start in enumerate((0, 2, 4)):
            self.assertIn("ok", self.write(index, start, 2))
        self.assertIn("ok", self.subject.request({"op": "reset", "index": 3}))
        self.assertEqual(self.write(4, 0, 1)["ok"]["visible"], [0])

    def test_a_chunk_past_the_sink_overwrites_it(self):
        # docs/findings/fastvideo-chunk-overwrites-sink.md, whose minimized trace is the
        # same on this checkout: a chunk longer than local_attn_size - sink_size lands
        # on the sink slot (C = 3, S = 1: the chunk 3+3 reads 3..5, frame 0 is gone).
        import json

        path = os.path.join(CHECKOUT, "docs", "findings", "fastvideo-chunk-overwrites-sink.kvtrace.json")
        with open(path) as f:
            trace = json.load(f)
        problems = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
        if not problems:
            self.skipTest("this checkout refuses a chunk that does not fit beside the sink "
                          "(docs/findings/self-forcing-chunk-overwrites-sink.diff)")
        self.assertEqual(problems, ['op 2 {"write": {"start": 3, "len": 3}}: expected chunk_too_large, got ok [3, 4, 5]'])


if __name__ == "__main__":
    unittest.main()
