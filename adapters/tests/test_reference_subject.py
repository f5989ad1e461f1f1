"""The stdlib reference subject, checked through kvcheck-subject/1.

Run: PYTHONPATH=python python3 -m unittest discover -s adapters/tests -v
"""

import base64
import glob
import json
import os
import struct
import subprocess
import sys
import unittest

from kvcheck.adapter import shared

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
ROOT = os.path.dirname(ADAPTERS)
reference_subject = shared("reference_subject")
kvtrace_replay = shared("kvtrace_replay")
FAULTS, f32, bf16_bits = reference_subject.FAULTS, reference_subject.f32, reference_subject.bf16_bits
encode_row, decode_row = reference_subject.encode_row, reference_subject.decode_row
quantize_row, cold_round_trip = reference_subject.quantize_row, reference_subject.cold_round_trip

SUBJECT = "%s %s" % (sys.executable, os.path.join(ADAPTERS, "reference_subject.py"))
VECTORS = sorted(glob.glob(os.path.join(ROOT, "tests", "vectors", "*.kvtrace.json")))
REGRESSIONS = sorted(glob.glob(os.path.join(ROOT, "tests", "regressions", "*.kvtrace.json")))
# Traces of this folder that pin what the vectors leave open (a probe after a refusal).
LOCAL = sorted(glob.glob(os.path.join(HERE, "traces", "*.kvtrace.json")))
# Traces of the other trim mode (docs/contract.md §3, trim modes: after_read).
TRIM_TRACES = sorted(glob.glob(os.path.join(ROOT, "tests", "trims", "*.kvtrace.json")))


def load(path):
    with open(path) as f:
        return json.load(f)


class ReplayTraces(unittest.TestCase):
    """Every vector and regression trace: same outcomes, kinds, positions and bytes."""

    @classmethod
    def setUpClass(cls):
        cls.subject = kvtrace_replay.Subject(SUBJECT)

    @classmethod
    def tearDownClass(cls):
        status = cls.subject.close()
        assert status == 0, "subject exited with %s" % status

    def test_traces_exist(self):
        self.assertGreaterEqual(len(VECTORS), 10)
        self.assertGreaterEqual(len(REGRESSIONS), 13)

    def test_every_trace_agrees_exactly(self):
        self.assertTrue(TRIM_TRACES)
        for path in VECTORS + REGRESSIONS + LOCAL + TRIM_TRACES:
            with self.subTest(trace=os.path.basename(path)):
                self.assertEqual(kvtrace_replay.replay(self.subject, load(path), exact_kinds=True), [])

    def test_hello_declares_every_capability(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(self.subject.hello["protocol"], "kvcheck-subject/1")
        self.assertEqual(sorted(caps["ops"]), ["evict", "pin", "reset", "rewind", "write"])
        self.assertEqual(len(caps["features"]), 6)
        self.assertTrue(caps["values"] and caps["view"])

    def test_hello_of_revision_4_declares_both_trim_modes(self):
        subject = kvtrace_replay.Subject(SUBJECT)
        try:
            hello = subject.request({"hello": {"protocol": "kvcheck-subject/1", "revision": 4}})["hello"]
            self.assertEqual(hello["capabilities"]["trims"], ["before_read", "after_read"])
            # An older harness refuses the field and sends before_read only.
            hello = subject.request({"hello": {"protocol": "kvcheck-subject/1", "revision": 3}})["hello"]
            self.assertNotIn("trims", hello["capabilities"])
        finally:
            self.assertEqual(subject.close(), 0)


class FaultsAreCaught(unittest.TestCase):
    """Each planted bug makes at least one trace disagree with its expect."""

    def test_each_fault_is_caught(self):
        traces = [(p, load(p)) for p in VECTORS + REGRESSIONS + LOCAL + TRIM_TRACES]
        for fault in sorted(FAULTS):
            with self.subTest(fault=fault):
                subject = kvtrace_replay.Subject(SUBJECT + " --fault " + fault)
                # Exceptions count as refusals, as kvcheck counts them by
                # default: a fault must show in positions, values or outcomes.
                caught = [
                    os.path.basename(p)
                    for p, trace in traces
                    if kvtrace_replay.replay(subject, trace, exact_kinds=False)
                ]
                subject.close()
                self.assertTrue(caught, "fault %s was not caught by any trace" % fault)

    def test_list_faults_names_every_fault(self):
        out = subprocess.run(
            SUBJECT.split() + ["--list-faults"], stdout=subprocess.PIPE, universal_newlines=True, check=True
        ).stdout
        self.assertEqual(sorted(line.split()[0] for line in out.splitlines()), sorted(FAULTS))


class Protocol(unittest.TestCase):
    """Requests the harness never sends still get an answer, never a crash."""

    def setUp(self):
        self.subject = kvtrace_replay.Subject(SUBJECT)

    def tearDown(self):
        self.assertEqual(self.subject.close(), 0)

    def open(self, **config):
        full = kvtrace_replay.full_config(dict({"variant": "dense", "capacity": 8}, **config))
        return self.subject.request({"open": {"config": full}})

    def write(self, index, start, length, payload=None, **extra):
        data = payload if payload is not None else struct.pack("<%df" % length, *([1.5] * length))
        body = dict({"start": start, "len": length}, **extra)
        return self.subject.request(
            {
                "op": {"write": body},
                "index": index,
                "k": base64.b64encode(data).decode(),
                "v": base64.b64encode(data).decode(),
            }
        )

    def test_invalid_config_names_the_field(self):
        response = self.open(sink=8)
        self.assertEqual(response["err"]["kind"], "invalid_config")
        self.assertIn("sink", response["err"]["message"])
        self.assertEqual(self.open(variant="packed", growth=True)["err"]["kind"], "invalid_config")
        self.assertEqual(self.open(window=0)["err"]["kind"], "invalid_config")
        # Trimming after the read: dense without growth only, named `trim`.
        for config in ({"variant": "packed"}, {"growth": True}, {}):
            response = self.open(trim="after_read" if config else "sideways", **config)
            self.assertEqual(response["err"]["kind"], "invalid_config", config)
            self.assertIn("trim", response["err"]["message"], config)
        self.assertIn("ok", self.open(trim="after_read"))

    def test_after_read_reads_the_old_view_and_the_chunk_then_trims(self):
        self.assertIn("ok", self.open(capacity=4, sink=1, trim="after_read"))
        self.assertEqual(self.write(0, 0, 4)["ok"]["visible"], [0, 1, 2, 3])
        ok = self.write(1, 4, 2, payload=struct.pack("<2f", 7.0, 8.0))["ok"]
        self.assertEqual(ok["visible"], [0, 1, 2, 3, 4, 5])
        # Rows 1 and 2 were read, then trimmed: they hold their bytes.
        self.assertEqual(base64.b64decode(ok["k"])[4:12], struct.pack("<2f", 1.5, 1.5))
        self.assertEqual(self.subject.request({"view": {}})["ok"]["visible"], [0, 3, 4, 5])
        self.assertEqual(self.write(2, 1, 1)["err"]["kind"], "evicted")
        # A chunk longer than the room keeps its last part, never refused.
        self.assertEqual(self.write(3, 6, 5, payload=bytes(20))["ok"]["visible"], list(range(0, 1)) + list(range(3, 11)))
        self.assertEqual(self.subject.request({"view": {}})["ok"]["visible"], [0, 8, 9, 10])

    def test_garbage_line_gets_an_exception_response(self):
        self.subject.process.stdin.write("not json\n")
        self.subject.process.stdin.flush()
        response = json.loads(self.subject.process.stdout.readline())
        self.assertEqual(response["exception"]["type"], "ProtocolError")

    def test_op_before_open_is_a_protocol_error(self):
        response = self.subject.request({"op": "reset", "index": 0})
        self.assertEqual(response["exception"]["type"], "ProtocolError")

    def test_wrong_payload_size_is_refused_after_contract_checks_and_changes_nothing(self):
        self.assertIn("ok", self.open(sink=2))
        self.assertIn("ok", self.write(0, 0, 4))
        before = self.subject.request({"view": {}})
        # A contract refusal wins over a bad payload (docs/contract.md §7).
        self.assertEqual(self.write(1, 9, 2, payload=b"xx")["err"]["kind"], "non_sequential")
        response = self.write(2, 4, 2, payload=b"xx")
        self.assertEqual(response["exception"]["type"], "PayloadError")
        self.assertEqual(self.subject.request({"view": {}}), before)

    def test_refusals_leave_the_cache_unchanged(self):
        self.assertIn("ok", self.open(sink=2, capacity=6))
        self.assertIn("ok", self.write(0, 0, 4))
        before = self.subject.request({"view": {}})
        for op in (
            {"write": {"start": 2, "len": 5}},
            {"write": {"start": 4, "len": 2, "recent_window": -1}},
            {"write": {"start": 4, "len": 2, "heads": [0, 2]}},
            {"rewind": {"to": 9}},
            {"evict": {"tokens": 3}},
            {"pin": {"tokens": 5}},
        ):
            body = op.get("write")
            n = body["len"] if body else 0
            data = base64.b64encode(struct.pack("<%df" % n, *([2.0] * n))).decode()
            response = self.subject.request({"op": op, "index": 1, "k": data, "v": data})
            self.assertIn("err", response, op)
            self.assertEqual(self.subject.request({"view": {}}), before, op)

    def test_view_returns_the_written_bytes(self):
        self.assertIn("ok", self.open(head_dim=2))
        data = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
        ok = self.write(0, 0, 2, payload=data)["ok"]
        self.assertEqual(ok["visible"], [0, 1])
        self.assertEqual(base64.b64decode(ok["k"]), data)
        self.assertEqual(self.subject.request({"view": {}})["ok"], ok)


class Quantizer(unittest.TestCase):
    """docs/contract.md §6 bit for bit: the hand-computed cases of crates/kvmodel/src/quant.rs."""

    def test_int8_hand_computed(self):
        values = [f32(2.54), f32(-1.27), 0.0, f32(0.01)]
        codes, scale = quantize_row(values, 127)
        self.assertEqual(scale, f32(f32(2.54) / 127))
        self.assertEqual(codes[0], 127)
        self.assertEqual(codes[2], 0)
        self.assertEqual(codes[1], -64)  # 63.5 rounds half away from zero

    def test_int4_halves_round_away_and_extremes_hit_q(self):
        codes, scale = quantize_row([7.0, -3.5, 2.5, -0.5, f32(0.49)], 7)
        self.assertEqual(scale, 1.0)
        self.assertEqual(codes, [7, -4, 3, -1, 0])

    def test_codes_are_clamped_and_zero_scale_gives_zero_codes(self):
        for q in (7, 127):
            for amax in (1.0, 3.0, f32(1e-30), f32(7.77e20)):
                codes, _ = quantize_row([amax, -amax, f32(amax / 3)], q)
                self.assertEqual((codes[0], codes[1]), (q, -q))
        tiny = struct.unpack("<f", struct.pack("<I", 1))[0]
        self.assertEqual(quantize_row([tiny, -tiny], 127), ([0, 0], 0.0))

    def test_dtype_conversion_rounds_to_nearest_even(self):
        self.assertEqual(decode_row(encode_row([1.0 + 2.0 ** -11], "f16"), "f16"), [1.0])
        self.assertEqual(decode_row(encode_row([1.0 + 3 * 2.0 ** -11], "f16"), "f16"), [1.0 + 2.0 ** -9])
        self.assertEqual(bf16_bits(1.0 + 2.0 ** -8), bf16_bits(1.0))
        self.assertEqual(decode_row(encode_row([1.0 + 3 * 2.0 ** -8], "bf16"), "bf16"), [1.0 + 2.0 ** -6])

    def test_round_trip_is_dequantized_in_the_dtype(self):
        raw = encode_row([1.0, -0.5, 0.25, 3.0], "bf16")
        codes, scale = quantize_row(decode_row(raw, "bf16"), 7)
        self.assertEqual(codes, [2, -1, 1, 7])  # 7/3, -7/6, 7/12 rounded
        want = encode_row([f32(c * scale) for c in codes], "bf16")
        self.assertEqual(cold_round_trip(raw, "int4", "bf16"), want)
        self.assertEqual(cold_round_trip(raw, "none", "bf16"), raw)


if __name__ == "__main__":
    unittest.main()
