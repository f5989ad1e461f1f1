"""The llama.cpp adapter against llama.cpp's real KV cache (opt-in: needs setup.sh).

Run with the venv's interpreter:

    adapters/llama-cpp/setup.sh
    adapters/llama-cpp/.venv/bin/python -m unittest discover -s adapters/llama-cpp/tests -v

Without the environment every test is skipped with that instruction.
"""

import os
import shlex
import sys
import unittest

from kvcheck.adapter import CHECKOUT, load_module, shared

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
clean_protocol = shared("clean_protocol")
kvtrace_replay = shared("kvtrace_replay")


def load_subject():
    """subject.py, after tinymodel.py (numpy at import), which it imports by name."""
    load_module(ADAPTER, "tinymodel")
    return load_module(ADAPTER, "subject")

SKIP = (
    "llama.cpp environment absent: run adapters/llama-cpp/setup.sh, "
    "then this with adapters/llama-cpp/.venv/bin/python"
)

try:
    import gguf  # noqa: F401
    import llama_cpp  # noqa: F401
    import numpy as np

    READY = True
except ImportError:
    READY = False

SUBJECT = "%s %s" % (shlex.quote(sys.executable), shlex.quote(os.path.join(ADAPTER, "subject.py")))
FINDINGS = os.path.join(CHECKOUT, "docs", "findings")


def config(**fields):
    base = {"variant": "dense", "batch": 1, "heads": 2, "head_dim": 3, "dtype": "f32", "capacity": 6, "sink": 1}
    base.update(fields)
    return kvtrace_replay.full_config(base)


def payload(rng, cfg, length, dtype=None):
    shape = (cfg["batch"], length, cfg["heads"], cfg["head_dim"])
    values = rng.standard_normal(shape)
    if cfg["dtype"] == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype({"f32": np.float32, "f16": np.float16}[cfg["dtype"]])


@unittest.skipUnless(READY, SKIP)
class Direct(unittest.TestCase):
    """The subject class in process: what each llama.cpp call leaves in the cells."""

    def setUp(self):
        self.subject_module = load_subject()
        self.rng = np.random.default_rng(0)

    def make(self, **options):
        return self.subject_module.LlamaCpp(**options)

    def test_appends_are_recognised_row_for_row(self):
        for dtype in ("f32", "f16", "bf16"):
            s = self.make()
            cfg = config(dtype=dtype, batch=2)
            s.open(cfg)
            k1, v1 = payload(self.rng, cfg, 3), payload(self.rng, cfg, 3)
            visible, k, v = s.write(0, 3, None, None, k1, v1)
            self.assertEqual(visible, [0, 1, 2])
            self.assertEqual(k.tobytes(), k1.tobytes(), dtype)
            self.assertEqual(v.tobytes(), v1.tobytes(), dtype)

    def test_context_shift_keeps_the_sink_and_rerotates_the_rest(self):
        s = self.make()
        cfg = config(capacity=4, sink=1)
        s.open(cfg)
        rows = [payload(self.rng, cfg, 1) for _ in range(7)]
        for p, row in enumerate(rows):
            visible, k, _ = s.write(p, 1, None, None, row, row)
        # Positions 1..3 went by three context shifts of one token each; the
        # K rows of 4 and 5 were re-rotated (checked inside: no KRotation).
        self.assertEqual(visible, [0, 4, 5, 6])
        self.assertEqual(k[0, 0].tobytes(), rows[0].tobytes())
        self.assertEqual(k[0, 3].tobytes(), rows[6].tobytes())
        self.assertEqual(s.rt.ll.llama_memory_seq_pos_max(s.mem, 0), 3)

    def test_rewrite_of_an_older_chunk_redecodes_the_tokens_after_it(self):
        s = self.make()
        cfg = config(capacity=8, sink=0)
        s.open(cfg)
        first, second = payload(self.rng, cfg, 2), payload(self.rng, cfg, 2)
        s.write(0, 2, None, None, first, first)
        s.write(2, 2, None, None, second, second)
        again = payload(self.rng, cfg, 1)
        visible, k, _ = s.write(0, 1, None, None, again, again)
        self.assertEqual(visible, [0, 1, 2, 3])
        self.assertEqual(k[0, 0].tobytes(), again.tobytes())
        self.assertEqual(k[0, 1].tobytes(), first[0, 1].tobytes())
        self.assertEqual(k[0, 2:].tobytes(), second.tobytes())

    def test_rewind_evict_reset(self):
        # An evict that no decode follows leaves the K shift pending
        # (docs/findings/llama-cpp-state-saves-unshifted-keys.md): settle it.
        s = self.make(settle_shift=True)
        cfg = config(capacity=6, sink=2)
        s.open(cfg)
        s.write(0, 5, None, None, payload(self.rng, cfg, 5), payload(self.rng, cfg, 5))
        s.evict(2)
        self.assertEqual(s.view()[0], [0, 1, 4])
        s.rewind(4)
        self.assertEqual((s.global_end, s.view()[0]), (4, [0, 1]))
        visible, _, _ = s.write(4, 1, None, None, payload(self.rng, cfg, 1), payload(self.rng, cfg, 1))
        self.assertEqual(visible, [0, 1, 4])
        with self.assertRaises(self.subject_module.ContextFull):
            s.evict(2)
        s.reset()
        self.assertEqual((s.global_end, s.view()[0]), (0, []))

    def test_the_sliding_window_layer_shows_the_last_window(self):
        s = self.make(arch="gemma2")
        cfg = config(capacity=8, sink=0, window=3)
        s.open(cfg)
        visible, _, _ = s.write(0, 5, None, None, payload(self.rng, cfg, 5), payload(self.rng, cfg, 5))
        self.assertEqual(visible, [2, 3, 4])

    def test_rows_of_another_position_or_token_are_reported(self):
        s = self.make()
        cfg = config()
        s.open(cfg)
        row = payload(self.rng, cfg, 1)
        s.write(0, 1, None, None, row, row)
        token = s.tokens[0][0]
        tiny = s.tiny
        k_at_5 = tiny.rope(tiny.k0[token][None, :], [5])[0]
        with self.assertRaises(self.subject_module.KRotation) as caught:
            s.recognise(0, 0, k_at_5, tiny.v0[token])
        self.assertIn("rotated for position 5", str(caught.exception))
        with self.assertRaises(self.subject_module.UnknownRows):
            s.recognise(0, 0, tiny.k0[token + 1], tiny.v0[token + 1])


@unittest.skipUnless(READY, SKIP)
class Logits(unittest.TestCase):
    """--check-logits: the cache-free oracle (a fresh decode of the resident
    tokens at positions 0..n-1) against the context that shifted."""

    def setUp(self):
        self.subject_module = load_subject()
        self.rng = np.random.default_rng(1)

    def test_shifted_cache_gives_the_fresh_decode_logits(self):
        for dtype in ("f32", "f16"):
            s = self.subject_module.LlamaCpp(check_logits=True, settle_shift=True)
            cfg = config(dtype=dtype, batch=2, capacity=4, sink=1)
            s.open(cfg)
            for p in range(7):
                s.write(p, 1, None, None, payload(self.rng, cfg, 1), payload(self.rng, cfg, 1))
            s.evict(1)
            visible, _, _ = s.write(7, 2, None, None, payload(self.rng, cfg, 2), payload(self.rng, cfg, 2))
            self.assertEqual(visible, [0, 6, 7, 8], dtype)

    def test_a_cell_moved_behind_the_adapters_back_is_caught(self):
        s = self.subject_module.LlamaCpp(check_logits=True)
        cfg = config(capacity=8, sink=0)
        s.open(cfg)
        s.write(0, 3, None, None, payload(self.rng, cfg, 3), payload(self.rng, cfg, 3))
        s.rt.ll.llama_memory_seq_add(s.mem, 0, 0, 1, -5)  # position 0 now reads as -5
        with self.assertRaises(self.subject_module.LogitsMismatch):
            s.write(3, 1, None, None, payload(self.rng, cfg, 1), payload(self.rng, cfg, 1))


@unittest.skipUnless(READY, SKIP)
class Protocol(unittest.TestCase):
    """Random traces of docs/contract.md §8's clean protocol (appends, rewrites
    of the current chunk, resets; context shifts where the cache is full),
    replayed through the subject process against their `expect`."""

    def test_clean_protocol_agrees(self):
        # bf16 caches abort at the first context shift
        # (docs/findings/llama-cpp-kshift-bf16-aborts.md): f32 and f16 here.
        caps = {"variants": ["dense"], "features": []}
        subject = kvtrace_replay.Subject(SUBJECT + " --dtypes f32,f16")
        try:
            failures = []
            for i, trace in clean_protocol.generate(16, 5, 12, caps):
                if trace["config"]["dtype"] == "bf16":
                    continue
                for problem in kvtrace_replay.replay(subject, trace, exact_kinds=False):
                    failures.append("trace %d: %s" % (i, problem))
            self.assertEqual(failures, [])
        finally:
            subject.close()


def run_trace(name, extra=""):
    """The minimized trace `name` through the subject process: the last
    response, or None when the process died on it."""
    import json

    with open(os.path.join(HERE, "traces", name + ".kvtrace.json")) as f:
        trace = json.load(f)
    cfg = kvtrace_replay.full_config(trace["config"])
    subject = kvtrace_replay.Subject(SUBJECT + extra)
    payloads = kvtrace_replay.Payloads(cfg)
    response = subject.request({"open": {"config": cfg}})
    try:
        for index, op in enumerate(trace["ops"]):
            request = {"op": op, "index": index}
            if "write" in op:
                w = op["write"]
                heads = range(cfg["heads"])
                request["k"] = kvtrace_replay.base64.b64encode(payloads.tensor(0, index, w["start"], w["len"], heads)).decode()
                request["v"] = kvtrace_replay.base64.b64encode(payloads.tensor(1, index, w["start"], w["len"], heads)).decode()
            response = subject.request(request)
    except RuntimeError:
        # The process died (its stderr, llama.cpp's abort message, went to the test's).
        subject.process.stdin.close()
        subject.process.stdout.close()
        return None
    subject.close()
    return response


@unittest.skipUnless(READY, SKIP)
class Findings(unittest.TestCase):
    """The minimized traces of docs/findings/llama-cpp-*.md: each shows its
    finding on the release, or the test skips naming it (a patched build)."""

    def test_finding_kshift_bf16_aborts(self):
        response = run_trace("kshift-bf16-aborts")
        if response is not None and "ok" in response:
            self.skipTest("this llama.cpp shifts a bf16 K cache (docs/findings/llama-cpp-kshift-bf16-aborts.md)")
        self.assertIsNone(response, "the process should have died in the K shift")

    def test_finding_state_saves_unshifted_keys(self):
        response = run_trace("state-saves-unshifted-keys")
        if "ok" in response:
            self.skipTest("this llama.cpp saves re-rotated keys (docs/findings/llama-cpp-state-saves-unshifted-keys.md)")
        self.assertEqual(response["exception"]["type"], "KRotation")
        self.assertIn("rotated for position 1", response["exception"]["message"])

    def test_settling_the_shift_reads_rotated_keys(self):
        # The workaround: one throwaway decode applies the pending shift.
        response = run_trace("state-saves-unshifted-keys", " --settle-shift")
        self.assertEqual(response["ok"]["visible"], [1])


@unittest.skipUnless(READY, SKIP)
class SlidingWindowByDesign(unittest.TestCase):
    """The minimized traces of docs/llama-cpp.md's L5, L6 and L10 (gemma2,
    a sliding-window layer 0): llama.cpp's behaviour that the contract
    does not share."""

    GEMMA2 = " --arch gemma2 --dtypes f32,f16 --settle-shift"

    def test_a_chunk_longer_than_the_window_is_decoded(self):
        response = run_trace("swa-chunk-longer-than-window", self.GEMMA2)
        self.assertEqual(response["ok"]["visible"], [1])  # the contract: window_too_small

    def test_the_window_masks_the_sink(self):
        response = run_trace("swa-window-masks-sink", self.GEMMA2)
        self.assertEqual(response["ok"]["visible"], [1, 2, 3])

    def test_a_rewind_behind_the_window_empties_the_swa_cache(self):
        response = run_trace("swa-rewind-behind-window", self.GEMMA2)
        self.assertEqual(response["exception"]["type"], "PositionMismatch")
        self.assertIn("llama_memory_seq_pos_max is -1", response["exception"]["message"])


if __name__ == "__main__":
    unittest.main()
