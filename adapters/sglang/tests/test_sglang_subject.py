"""The sglang adapter against sglang's real caches (opt-in: needs setup.sh).

Run with the venv's interpreter:

    adapters/sglang/setup.sh
    adapters/sglang/.venv/bin/python -m unittest discover -s adapters/sglang/tests -v

Without the environment every test is skipped with that instruction.
"""

import base64
import os
import struct
import sys
import unittest

from kvcheck.adapter import load_module, shared

SGLANG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
clean_protocol = shared("clean_protocol")
kvtrace_replay = shared("kvtrace_replay")
loader = load_module(SGLANG, "loader")

VERSION = os.environ.get("SGLANG_VERSION", loader.DEFAULT_VERSION)
SUBJECT = "%s %s --version %s" % (sys.executable, os.path.join(SGLANG, "subject.py"), VERSION)
SKIP = "sglang %s environment absent: run SGLANG_VERSION=%s adapters/sglang/setup.sh, then this with adapters/sglang/.venv/bin/python" % (
    VERSION,
    VERSION,
)

try:
    import torch  # noqa: F401

    READY = loader.is_ready(VERSION)
except ImportError:
    READY = False


@unittest.skipUnless(READY, SKIP)
class SglangSubject(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.subject = kvtrace_replay.Subject(SUBJECT)

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def open(self, **config):
        full = kvtrace_replay.full_config(dict({"variant": "dense", "capacity": 8}, **config))
        response = self.subject.request({"open": {"config": full}})
        self.assertIn("ok", response)

    def write(self, index, start, length, **extra):
        data = base64.b64encode(struct.pack("<%df" % length, *[float(start + i + 1) for i in range(length)]))
        body = dict({"start": start, "len": length}, **extra)
        return self.subject.request({"op": {"write": body}, "index": index, "k": data.decode(), "v": data.decode()})

    def test_hello_leaves_out_what_the_classes_cannot_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(sorted(caps["ops"]), ["pin", "reset", "write"])
        self.assertNotIn("quant", caps["features"])
        self.assertTrue(caps["values"])
        self.assertFalse(caps["view"])

    def test_clean_protocol_agrees(self):
        # A slice of the docs/contract.md §8 evidence, small enough for a unit test.
        problems = {}
        for i, trace in clean_protocol.generate(40, 7, 16):
            found = kvtrace_replay.replay(self.subject, trace, exact_kinds=True)
            if found:
                problems[i] = found
        self.assertEqual(problems, {})

    def test_positions_come_from_the_twin_and_values_from_the_cache(self):
        self.open(sink=1, capacity=4)
        self.write(0, 0, 2)
        ok = self.write(1, 2, 3)["ok"]  # rolls: sink 0, then 2..5
        self.assertEqual(ok["visible"], [0, 2, 3, 4])
        self.assertEqual(struct.unpack("<4f", base64.b64decode(ok["k"])), (1.0, 3.0, 4.0, 5.0))

    def test_gap_write_shows_never_written_rows_at_the_positions_sglang_gives_them(self):
        self.open(capacity=8)
        self.write(0, 0, 2)
        ok = self.write(1, 4, 2)["ok"]  # D2: accepted
        self.assertEqual(ok["global_end"], 6)
        self.assertEqual(ok["visible"], [0, 1, 2, 3, 4, 5])
        self.assertEqual(struct.unpack("<6f", base64.b64decode(ok["k"]))[2:4], (0.0, 0.0))

    def test_seed_messages(self):
        self.open(sink=2, capacity=4)
        self.write(0, 0, 4)
        self.write(1, 4, 2)
        # The roll put the buffer's start at global 2: a rewrite of the sink
        # 0..2 (resident, so the contract accepts it) maps before slot 0.
        refused = self.write(2, 0, 2)
        self.assertEqual(refused["exception"]["type"], "RuntimeError")
        self.assertIn("Invalid causal KV cache write range", refused["exception"]["message"])
        self.open(variant="packed", capacity=8, packed={"keep_recent_chunks": 1, "quant": "none", "pack_sink": False})
        self.write(0, 0, 2)
        raised = self.write(1, 2, 2, recent_window=-1)
        self.assertEqual(raised["exception"]["message"], "recent_window_tokens must be >= 0 or None")
        # D12/D5: the write landed before the raise.
        self.assertEqual(self.write(2, 4, 2)["ok"]["visible"], [0, 1, 2, 3, 4, 5])

    def test_requests_outside_the_classes_are_outside_not_crashes(self):
        self.open()
        response = self.subject.request({"op": {"write": {"start": 0, "len": -1}}, "index": 0, "k": "", "v": ""})
        self.assertEqual(response["exception"]["type"], "Outside")
        # A call the classes do not have is the adapter's failure, never a
        # refusal that could agree with the contract.
        response = self.subject.request({"op": {"rewind": {"to": 0}}, "index": 1})
        self.assertEqual(response["exception"]["type"], "AdapterError")
        self.assertTrue(response["exception"]["adapter"])
        self.assertIn("ok", self.write(2, 0, 1))

    def test_a_write_of_zero_heads_needs_no_payload(self):
        # D15 with one token: the payload of zero heads is empty, and
        # sglang accepts the write and returns zero heads.
        self.open(heads=2)
        body = {"start": 0, "len": 1, "heads": [0, 0]}
        response = self.subject.request({"op": {"write": body}, "index": 0})
        self.assertEqual(response["ok"]["global_end"], 1)
        self.assertEqual(response["ok"]["k"], "")

    def test_quantized_packed_configs_are_refused_at_open(self):
        full = kvtrace_replay.full_config({"variant": "packed", "capacity": 8})
        response = self.subject.request({"open": {"config": full}})
        self.assertEqual(response["err"]["kind"], "invalid_config")
        self.assertIn("PRQ", response["err"]["message"])


@unittest.skipUnless(READY, SKIP)
class Masks(unittest.TestCase):
    """The masks the findings searches use to look past known classes."""

    def masked(self, *masks):
        command = SUBJECT + "".join(" --mask " + m for m in masks)
        subject = kvtrace_replay.Subject(command)
        self.addCleanup(subject.close)
        return subject

    def test_no_reset_and_no_pin_leave_their_ops_out_of_hello(self):
        subject = self.masked("no-reset", "no-pin")
        self.assertEqual(subject.hello["capabilities"]["ops"], ["write"])
        self.assertIn("--mask no-reset", subject.hello["name"])

    def test_empty_heads_refuses_a_zero_head_range_with_the_contracts_kind(self):
        subject = self.masked("empty-heads")
        full = kvtrace_replay.full_config({"variant": "dense", "capacity": 4, "heads": 2})
        self.assertIn("ok", subject.request({"open": {"config": full}}))
        body = {"start": 0, "len": 0, "heads": [1, 0]}
        response = subject.request({"op": {"write": body}, "index": 0, "k": "", "v": ""})
        self.assertEqual(response["err"]["kind"], "head_range")
        # Plain sglang accepts it (the divergence the mask holds back).
        plain = self.masked()
        self.assertIn("ok", plain.request({"open": {"config": full}}))
        self.assertIn("ok", plain.request({"op": {"write": body}, "index": 0, "k": "", "v": ""}))


if __name__ == "__main__":
    unittest.main()
