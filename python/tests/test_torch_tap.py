"""kvcheck.torch, the attention tap: the tap itself, the Self-Forcing-style
toy pipeline of examples/attention-tap read through it, and that pipeline
checked by the kvcheck binary ($KVCHECK_BIN, else target/debug/kvcheck).

Needs torch; without it every case but the import checks is skipped.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

from __future__ import annotations

import base64
import glob
import json
import os
import random
import re
import shlex
import struct
import subprocess
import sys
import unittest

import kvcheck
import kvcheck.torch as kvtorch
from kvcheck import runner
from kvcheck.adapter import CHECKOUT as ROOT
from kvcheck.adapter import load_module, script_env, shared
from kvcheck.subject import Session

EXAMPLE = os.path.join(ROOT, "examples", "attention-tap")
reference_subject = shared("reference_subject")

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

needs_torch = unittest.skipIf(
    torch is None, "torch is not installed: pip install torch to run the attention tap's tests"
)
from kvcheck_binary import BINARY, WithBinary, needs_binary  # noqa: E402


class Import(unittest.TestCase):
    def test_the_module_imports_without_torch_and_says_what_is_missing(self):
        saved = {name: module for name, module in sys.modules.items() if name == "torch" or name.startswith("torch.")}
        sys.modules["torch"] = None  # `import torch` now raises ImportError
        try:
            with self.assertRaises(ImportError) as caught:
                kvtorch.AttentionTap().__enter__()
            self.assertIn("kvcheck.torch needs PyTorch: pip install torch", str(caught.exception))
        finally:
            del sys.modules["torch"]
            sys.modules.update(saved)

    def test_the_package_does_not_import_torch(self):
        code = "import sys, kvcheck, kvcheck.torch; print('torch' in sys.modules)"
        done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, universal_newlines=True,
                              env=script_env())
        self.assertEqual(done.stdout.strip(), "False")


def rows(generator, n, batch=1, heads=2, dim=4, dtype=None):
    """Random K and V rows `[B, n, H, D]`: byte-distinct with certainty in practice."""
    k = torch.randn(batch, n, heads, dim, generator=generator, dtype=dtype or torch.float32)
    v = torch.randn(batch, n, heads, dim, generator=generator, dtype=dtype or torch.float32)
    return k, v


def attend(k, v, queries=1, **kwargs):
    """SDPA over cache-layout K/V `[B, S, H, D]` with `queries` random queries."""
    b, _, h, d = k.shape
    q = torch.randn(b, h, queries, d, dtype=k.dtype)
    return F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), **kwargs)


@needs_torch
class Tap(unittest.TestCase):
    def setUp(self):
        self.g = torch.Generator().manual_seed(1)
        self.tap = kvtorch.AttentionTap()
        self.k, self.v = rows(self.g, 6)
        self.tap.begin_step()
        self.tap.produced(10, self.k, self.v)  # positions 10..15

    def test_keys_are_identified_by_their_bytes_in_attention_order(self):
        order = [3, 0, 5, 1]
        with self.tap:
            attend(self.k[:, order], self.v[:, order])
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [13, 10, 15, 11])
        self.assertEqual((seen.unknown, seen.hidden, seen.stale, seen.ambiguous), ([], [], [], []))
        positions, k, v = seen.view()
        self.assertEqual(positions, [13, 10, 15, 11])
        self.assertTrue(torch.equal(k, self.k[:, order]) and torch.equal(v, self.v[:, order]))

    def test_a_row_matching_nothing_is_unknown(self):
        corrupted_k, corrupted_v = self.k[:, [2]].clone(), self.v[:, [2]].clone()
        corrupted_k[0, 0, 1, 3] += 1  # one element of one head
        keys = torch.cat([self.k[:, :2], torch.zeros_like(self.k[:, :1]), corrupted_k], 1)
        values = torch.cat([self.v[:, :2], torch.zeros_like(self.v[:, :1]), corrupted_v], 1)
        with self.tap:
            attend(keys, values)
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [10, 11])
        self.assertEqual([key.index for key in seen.unknown], [2, 3])
        error = kvtorch.UnknownRows(seen)
        self.assertIn("read 2 keys matching no produced row (key index 2, 3 of 4)", str(error))

    def test_k_and_v_must_both_match(self):
        with self.tap:
            attend(self.k[:, :2], self.v[:, [1, 0]])  # V rows swapped
        self.assertEqual(len(self.tap.observe().unknown), 2)

    def test_an_older_step_of_a_position_is_stale_and_still_identified(self):
        self.tap.begin_step()
        new_k, new_v = rows(self.g, 1)
        self.tap.produced(12, new_k, new_v)  # position 12 rewritten
        with self.tap:
            attend(self.k[:, 1:4], self.v[:, 1:4])  # still the old row of 12
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [11, 12, 13])
        self.assertEqual([(key.position, key.step) for key in seen.stale], [(12, 1)])

    def test_rows_of_two_positions_with_the_same_bytes_are_ambiguous(self):
        self.tap.produced(20, self.k[:, :1], self.v[:, :1])  # position 20 holds position 10's bytes
        with self.tap:
            attend(self.k[:, :2], self.v[:, :2])
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [11])
        self.assertEqual([sorted({p for p, _ in key.candidates}) for key in seen.ambiguous], [[10, 20]])

    def test_a_forgotten_video_reads_as_unknown(self):
        self.tap.forget()
        with self.tap:
            attend(self.k, self.v)
        self.assertEqual(len(self.tap.observe().unknown), 6)

    def test_a_boolean_mask_hides_keys_from_the_last_query(self):
        # Three queries; only the last one's row counts.
        mask = torch.tensor([[True, True, True, True, True, True],
                             [True, False, True, True, True, True],
                             [True, True, False, True, False, True]])
        with self.tap:
            attend(self.k, self.v, queries=3, attn_mask=mask)
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [10, 11, 13, 15])
        self.assertEqual([key.index for key in seen.hidden], [2, 4])

    def test_a_mask_row_shared_by_every_query_and_a_padded_buffer(self):
        buffer_k = torch.cat([self.k, torch.zeros_like(self.k[:, :2])], 1)
        buffer_v = torch.cat([self.v, torch.zeros_like(self.v[:, :2])], 1)
        mask = (torch.arange(8) < 6).view(1, 1, 1, 8)
        with self.tap:
            attend(buffer_k, buffer_v, queries=2, attn_mask=mask)
        seen = self.tap.observe()
        self.assertEqual(seen.visible, [10, 11, 12, 13, 14, 15])
        self.assertEqual(seen.unknown, [])  # the zero slots are masked, so not read
        self.assertEqual([key.index for key in seen.hidden], [6, 7])
        self.assertTrue(all(key.unknown for key in seen.hidden))

    def test_a_float_mask_hides_minus_infinity_and_the_lowest_value_per_batch_row(self):
        k, v = rows(self.g, 4, batch=2)
        self.tap.produced(0, k, v)
        mask = torch.zeros(2, 1, 1, 4)
        mask[0, 0, 0, 1] = float("-inf")
        mask[1, 0, 0, 2] = torch.finfo(torch.float32).min
        mask[1, 0, 0, 3] = -30.0  # a bias, not a mask
        with self.tap:
            attend(k, v, attn_mask=mask)
        self.assertEqual(self.tap.observe().visible, [0, 3])

    def test_is_causal_is_applied_as_torch_applies_it(self):
        with self.tap:
            attend(self.k, self.v, queries=4, is_causal=True)
        self.assertEqual(self.tap.observe().visible, [10, 11, 12, 13])  # top-left: query 3 reads keys 0..3

    def test_every_call_is_recorded_however_sdpa_was_imported(self):
        from torch.nn.functional import scaled_dot_product_attention as bound_early

        q = torch.randn(1, 2, 1, 4)
        with self.tap:
            attend(self.k[:, :1], self.v[:, :1])
            bound_early(q, self.k[:, 1:3].transpose(1, 2), self.v[:, 1:3].transpose(1, 2))
        self.assertEqual([self.tap.observe(i).visible for i in range(2)], [[10], [11, 12]])
        self.assertEqual(self.tap.observe().visible, [11, 12])
        with torch.no_grad():
            attend(self.k, self.v)  # outside the tap: not recorded
        self.assertEqual(len(self.tap.calls), 2)

    def test_half_precision_rows_are_compared_as_bit_patterns(self):
        for dtype in (torch.float16, torch.bfloat16):
            tap = kvtorch.AttentionTap()
            k, v = rows(self.g, 3, dtype=dtype)
            tap.produced(0, k, v)
            with tap:
                attend(k, v)
            self.assertEqual(tap.observe().visible, [0, 1, 2], dtype)
            with tap:
                attend(k.float(), v.float())  # the same values in another dtype are other bytes
            self.assertEqual(len(tap.observe().unknown), 3, dtype)

    def test_watch_registers_what_a_projection_module_returns(self):
        class Projection(torch.nn.Module):
            def forward(self, x):
                return x * 2, x * 3

        tap = kvtorch.AttentionTap()
        projection = Projection()
        handle = tap.watch(projection, lambda: 7)
        x = torch.randn(1, 2, 2, 4, generator=self.g)
        k, v = projection(x)
        handle.remove()
        with tap:
            attend(k, v)
        self.assertEqual(tap.observe().visible, [7, 8])

    @unittest.skipIf(torch is not None and kvtorch.flex_module() is None, "this torch has no flex_attention")
    def test_agreed_view_checks_that_every_block_read_the_same_rows(self):
        k, v = rows(self.g, 3)
        self.tap.produced(0, k, v)
        with self.tap:
            attend(k, v)
            attend(k, v)
            attend(k[:, :2], v[:, :2])  # a block that lost position 2
        positions, k_view, v_view = self.tap.agreed_view([0, 1])
        self.assertEqual(positions, [0, 1, 2])
        self.assertTrue(k_view.equal(k) and v_view.equal(v))
        with self.assertRaisesRegex(kvtorch.LayerMismatch, r"block 0 read \[0, 1, 2\], block 1 read \[0, 1\]"):
            self.tap.agreed_view([0, 2])
        with self.assertRaises(kvcheck.AdapterError):
            self.tap.agreed_view([])
        with self.tap:
            attend(k + 1, v)  # rows no write produced
        with self.assertRaises(kvtorch.UnknownRows):
            self.tap.agreed_view([0, 3])

    def test_flex_attention_calls_and_their_block_mask(self):
        import warnings

        from torch.nn.attention import flex_attention as flex

        q = torch.randn(1, 2, 2, 4)
        block_mask = flex.create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx != 4, 1, 2, 2, 6, device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex_attention without torch.compile warns
            with self.tap:
                flex.flex_attention(q, self.k.transpose(1, 2), self.v.transpose(1, 2), block_mask=block_mask)
        seen = self.tap.observe()
        self.assertEqual(seen.record.kind, "flex")
        self.assertEqual(seen.visible, [10, 11, 12, 13, 15])
        self.assertFalse(hasattr(flex.flex_attention, "__wrapped__"))  # restored on exit


@needs_torch
class ToyPipeline(unittest.TestCase):
    """The toy pipeline of examples/attention-tap driven like a video
    generator: AR chunks of 2 positions, 2 denoising steps each."""

    def run_video(self, bug=None, masked=False, chunks=6):
        import toy_pipeline

        g = torch.Generator().manual_seed(5)
        pipeline = toy_pipeline.ToyPipeline(1, 2, 4, capacity=6, sink=2, bug=bug, masked=masked)
        tap = kvtorch.AttentionTap()
        start = 0
        for block in pipeline.model.blocks:
            tap.watch(block.kv, lambda: start)
        seen = []
        for chunk in range(chunks):
            start = 2 * chunk
            for _ in range(2):  # denoising steps: the same chunk rewritten
                tap.begin_step()
                tap.clear_calls()
                k, v = rows(g, 2, heads=2, dim=4)
                with tap:
                    pipeline.generate_chunk(start, k, v)
                observation = tap.observe()
                self.assertEqual(len(tap.calls), 2)  # one call per block
                seen.append(observation)
        return seen

    def test_attention_reads_the_sink_and_the_latest_positions(self):
        for masked in (False, True):
            seen = self.run_video(masked=masked)
            self.assertEqual([o.visible for o in seen[-4::2]], [[0, 1, 6, 7, 8, 9], [0, 1, 8, 9, 10, 11]])
            self.assertTrue(all(not o.unknown and not o.stale for o in seen))
            if masked:
                self.assertEqual(seen[0].visible, [0, 1])
                self.assertEqual(len(seen[0].hidden), 4)

    def test_the_planted_bugs_show_in_what_attention_reads(self):
        self.assertEqual(self.run_video("sink-rolled-out")[-1].visible, [6, 7, 8, 9, 10, 11])
        self.assertEqual(self.run_video("evict-one-more")[-1].visible, [0, 1, 9, 10, 11])
        first = self.run_video("reads-one-past-end", chunks=1)[0]
        self.assertEqual(first.visible, [0, 1])
        self.assertEqual([key.index for key in first.unknown], [2])  # the zero slot past the end


def toy_config(capacity, sink, dtype="f32"):
    return dict(batch=1, heads=2, head_dim=4, capacity=capacity, sink=sink, window=None, growth=False,
                global_sink=False, dtype=dtype, seed=1)


def random_stream(subject, seed, ops=40, dtype="f32"):
    """Random writes (AR chunks and rewrites), rewinds and resets on
    `subject` (opened on a random toy config); the exceptions the toy
    raises to refuse are passed over."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    capacity = rng.randint(2, 8)
    subject.open(toy_config(capacity, rng.randint(0, capacity - 1), dtype))
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    for _ in range(ops):
        roll, end = rng.random(), subject.global_end
        try:
            if roll < 0.6:
                n = rng.randint(1, 3)
                start = end if rng.random() < 0.6 else max(0, end - n)
                k, v = rows(g, n, dtype=torch.float32)
                subject.write(start, n, None, None, k.to(torch_dtype), v.to(torch_dtype))
            elif roll < 0.8:
                subject.rewind(rng.randint(0, end))
            else:
                subject.reset()
        except (kvcheck.Refused, ValueError):
            pass


@needs_torch
class Recompute(unittest.TestCase):
    """The toy's cache-free path (tapped_toy.RecomputedToy) against its
    cached path, in one process (tapped_toy.RecomparedToy)."""

    def test_the_cached_toy_agrees_with_its_recompute_on_random_streams(self):
        tapped_toy = toy_module()

        for seed in range(12):
            for masked, dtype in ((False, "f32"), (True, "f32"), (False, "f16"), (True, "bf16")):
                random_stream(tapped_toy.RecomparedToy(masked=masked), seed, dtype=dtype)

    def test_each_planted_bug_disagrees_with_the_recompute(self):
        tapped_toy = toy_module()

        expected = {
            "sink-rolled-out": (kvtorch.RecomputeMismatch, "the cached path reads positions"),
            "evict-one-more": (kvtorch.RecomputeMismatch, "the cached path reads positions"),
            "query-position-local": (kvtorch.RecomputeMismatch, "the outputs differ from the recompute's"),
            "reads-one-past-end": (kvtorch.UnknownRows, "matching no produced row"),
        }
        self.assertEqual(sorted(expected), sorted(tapped_toy.BUGS))
        for bug, (error, text) in expected.items():
            with self.assertRaisesRegex(error, text, msg=bug):
                for seed in range(12):
                    random_stream(tapped_toy.RecomparedToy(bug), seed)

    def test_the_recompute_forgets_what_the_window_dropped(self):
        tapped_toy = toy_module()

        recompute = tapped_toy.RecomputedToy()
        recompute.open(toy_config(capacity=3, sink=1))
        g = torch.Generator().manual_seed(3)
        for start in range(4):
            positions, _, _ = recompute.write(start, 1, None, None, *rows(g, 1))
        self.assertEqual(positions, [0, 2, 3])  # position 1 left the two-slot window
        self.assertEqual(sorted(recompute.history), [0, 2, 3])
        recompute.rewind(2)
        self.assertEqual((recompute.global_end, sorted(recompute.history)), (2, [0]))
        with self.assertRaises(kvcheck.Refused) as refused:
            recompute.write(1, 1, None, None, *rows(g, 1))  # a rewind does not bring it back
        self.assertEqual(refused.exception.kind, "evicted")
        with self.assertRaises(kvcheck.Refused) as refused:
            recompute.write(3, 1, None, None, *rows(g, 1))
        self.assertEqual(refused.exception.kind, "non_sequential")
        self.assertEqual((recompute.global_end, sorted(recompute.history)), (2, [0]))

    def test_positions_and_rows_are_compared_as_multisets_and_within_tolerance(self):
        tapped_toy = toy_module()

        pair = tapped_toy.RecomparedToy()
        pair.open(toy_config(capacity=4, sink=1))
        k = torch.arange(8, dtype=torch.float32).view(1, 2, 1, 4)
        v = k + 100
        pair.compare_views("op", ([1, 0], k.flip(1), v.flip(1)), ([0, 1], k, v))  # another order: agrees
        with self.assertRaisesRegex(kvtorch.RecomputeMismatch, "reads positions 0..1 0..1, the recompute 0..2"):
            pair.compare_views("op", ([0, 0], k, v), ([0, 1], k, v))
        with self.assertRaisesRegex(kvtorch.RecomputeMismatch, "other V rows"):
            pair.compare_views("op", ([0, 1], k, v + 1.0), ([0, 1], k, v))
        pair.compare_outputs("op", k + 1e-6, k)
        with self.assertRaisesRegex(kvtorch.RecomputeMismatch, "differ from the recompute's by up to 0.01"):
            pair.compare_outputs("op", k + 1e-2, k)


def payload(rng, dtype, count):
    """`count` random finite values in `dtype`, as protocol bytes."""
    values = [rng.uniform(-4, 4) for _ in range(count)]
    if dtype == "f32":
        return struct.pack("<%df" % count, *values)
    if dtype == "f16":
        return struct.pack("<%de" % count, *values)
    return b"".join(struct.pack("<f", x)[2:] for x in values)  # bf16: the high half


@needs_torch
class AgainstTheReference(unittest.TestCase):
    """The tapped toy and adapters/reference_subject.py (the contract in
    stdlib Python) answer the same random requests alike, through the
    helper's sessions: no binary needed."""

    def run_case(self, rng, subject, ops=40):
        config = {
            "variant": "dense", "batch": rng.randint(1, 2), "heads": rng.randint(1, 2),
            "head_dim": rng.randint(1, 3), "dtype": rng.choice(["f32", "f16", "bf16"]),
            "capacity": rng.randint(1, 6), "window": None, "growth": False, "global_sink": 0,
            "packed": None, "seed": 0,
        }
        config["sink"] = rng.randint(0, min(3, config["capacity"] - 1))
        ref, toy = Session(reference_subject.Reference()), Session(subject)
        for session in (ref, toy):
            session.handle({"hello": {"protocol": kvcheck.PROTOCOL, "revision": 2}})
            self.assertEqual(session.handle({"open": {"config": config}}), ref.handle({"open": {"config": config}}))
        end, log = 0, [config]
        for index in range(ops):
            roll = rng.random()
            if roll < 0.05:
                request = {"op": "reset", "index": index}
            elif roll < 0.12:
                request = {"op": {"rewind": {"to": rng.randint(-1, end + 1)}}, "index": index}
            elif roll < 0.2:
                request = {"op": {"evict": {"tokens": rng.randint(-1, 3)}}, "index": index}
            else:
                start = rng.choice([end, end, end, max(0, end - rng.randint(1, 3)), end + 1, -1])
                length = rng.choice([1, 2, 3, 0, config["capacity"], -1])
                size = config["batch"] * max(length, 0) * config["heads"] * config["head_dim"]
                body = {"start": start, "len": length}
                request = {"op": {"write": body}, "index": index}
                for name in ("k", "v"):
                    request[name] = base64.b64encode(payload(rng, config["dtype"], size)).decode()
            log.append(request["op"])
            want, got = ref.handle(request), toy.handle(request)
            if "ok" in want:
                self.assertEqual(got, want, log)
                end = want["ok"]["global_end"]
            else:
                self.assertNotIn("ok", got, log)
        return log

    def test_random_streams_agree(self):
        tapped_toy = toy_module()

        rng = random.Random(3)
        for case in range(60):
            self.run_case(rng, tapped_toy.TappedToy(masked=case % 2 == 1))

    def test_a_planted_bug_disagrees(self):
        tapped_toy = toy_module()

        rng = random.Random(3)
        with self.assertRaises(AssertionError):
            for _ in range(60):
                self.run_case(rng, tapped_toy.TappedToy(bug="sink-rolled-out"))


def replay_command(args=()):
    served = " ".join(shlex.quote(part) for part in runner.serve_command(TappedToyClass(), args))
    return "exec:" + served


def TappedToyClass():
    tapped_toy = toy_module()

    return tapped_toy.TappedToy


# Two torch processes start per case; on a loaded machine the first answer
# of each can take longer than kvcheck's default 10 s.
SLOW_START = ["--subject-timeout", "60"]


def toy_module():
    """examples/attention-tap/tapped_toy.py (torch at import), after
    toy_pipeline.py, which it imports by name."""
    load_module(EXAMPLE, "toy_pipeline")
    return load_module(EXAMPLE, "tapped_toy")


def toy_class(name):
    tapped_toy = toy_module()

    return getattr(tapped_toy, name)


class BinaryCase(WithBinary):
    """A case that runs the kvcheck binary, failures under target/."""

    OUT = "python-tap-failures"


@needs_torch
@needs_binary
class Checked(BinaryCase):
    """The tapped toy against the kvcheck binary."""

    def env(self):
        return script_env()

    def test_the_correct_pipeline_passes(self):
        # Starting torch in every subject process takes seconds of the 5:
        # the op count depends on the machine's load.
        for args in ([], ["--masked"]):
            result = kvcheck.check(TappedToyClass(), time=5, seed=11, args=args, out=self.out)
            self.assertGreater(result.ops, 0, args)
            self.assertIn("no divergence", result.output)

    def test_the_contract_vectors_it_can_express_replay_clean(self):
        vectors = sorted(glob.glob(os.path.join(ROOT, "tests", "vectors", "*.kvtrace.json")))
        done = subprocess.run(
            [BINARY, "replay"] + vectors + ["--subject", replay_command()],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            universal_newlines=True,
            env=self.env(),
        )
        self.assertEqual(done.returncode, 0, done.stdout)
        passed = re.search(r"(\d+) passed, (\d+) failed", done.stdout)
        self.assertIsNotNone(passed, done.stdout)
        self.assertGreaterEqual(int(passed.group(1)), 7, done.stdout)  # dense, no window, growth, head range or pin
        self.assertEqual(passed.group(2), "0", done.stdout)

    def assert_found_and_minimized(self, bug, most_ops, text):
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(TappedToyClass(), time=20, seed=7, args=["--bug", bug], out=self.out)
        divergence = caught.exception
        self.assertIn("trace:    %s" % divergence.trace, str(divergence))
        self.assertTrue(os.path.isfile(divergence.trace), divergence.trace)
        with open(divergence.trace) as f:
            ops = json.load(f)["ops"]
        self.assertLessEqual(len(ops), most_ops, str(divergence))
        self.assertIn(text, divergence.report)
        self.assertIn("--bug %s" % bug, divergence.replay)
        return divergence

    def test_a_sink_that_rolls_out_is_found_and_minimized(self):
        self.assert_found_and_minimized("sink-rolled-out", 3, "visible divergence")

    def test_evicting_one_more_is_found_and_minimized(self):
        self.assert_found_and_minimized("evict-one-more", 3, "divergence")

    def test_reading_past_the_end_is_an_unknown_row(self):
        self.assert_found_and_minimized("reads-one-past-end", 2, "UnknownRows")

    def recompute_oracle(self):
        served = runner.serve_command(toy_class("RecomputedToy"))
        return "exec:" + " ".join(shlex.quote(part) for part in served)

    def test_the_recompute_alone_judges_the_cached_toy(self):
        # No model: the cache-free path is the differential oracle.
        oracle = self.recompute_oracle()
        result = kvcheck.check(TappedToyClass(), time=5, seed=11, oracle=oracle, out=self.out, extra=SLOW_START)
        self.assertGreater(result.ops, 0)
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(TappedToyClass(), time=20, seed=7, oracle=oracle, args=["--bug", "sink-rolled-out"],
                          out=self.out, extra=SLOW_START)
        self.assertIn("differential divergence", caught.exception.report)
        with open(caught.exception.trace) as f:
            self.assertLessEqual(len(json.load(f)["ops"]), 3, str(caught.exception))

    def test_rows_alone_miss_a_query_side_bug_that_the_outputs_find(self):
        # The rows attention reads are right, so no oracle of rows can see it.
        result = kvcheck.check(TappedToyClass(), time=5, seed=7, args=["--bug", "query-position-local"],
                               out=self.out, extra=SLOW_START)
        self.assertIn("no divergence", result.output)
        with self.assertRaises(kvcheck.Divergence) as caught:
            kvcheck.check(toy_class("RecomparedToy"), time=20, seed=7, args=["--bug", "query-position-local"],
                          out=self.out, extra=SLOW_START)
        self.assertIn("RecomputeMismatch", caught.exception.report)
        self.assertIn("the outputs differ from the recompute's", caught.exception.report)
        with open(caught.exception.trace) as f:
            self.assertLessEqual(len(json.load(f)["ops"]), 4, str(caught.exception))


@needs_torch
@needs_binary
class LoopChecked(BinaryCase):
    """The toy as its own loop asks it (`LoopToy`: every other request is
    answered `kvcheck.Outside`), declaring nothing and declaring its loop
    (`DeclaredLoopToy`)."""

    def test_the_undeclared_loop_passes_with_its_cases_cut(self):
        # Most of its draws are cut (about 80 %): allowed here, since the
        # point is that the cut cases pass; by default that fails the check.
        result = kvcheck.check(toy_class("LoopToy"), time=10, seed=11, max_outside=1.0, out=self.out,
                               extra=SLOW_START)
        self.assertIn("no divergence", result.output)
        self.assertGreater(result.ops, 0)
        self.assertGreater(result.outside_share, 0.0, result.output)

    def test_the_declared_loop_draws_inside_its_domain(self):
        result = kvcheck.check(toy_class("DeclaredLoopToy"), time=10, seed=11, profile="pipeline",
                               out=self.out, extra=SLOW_START)
        self.assertIn("no divergence", result.output)
        self.assertLess(result.outside_share, 0.05, result.output)

    def test_a_planted_bug_is_reported_as_itself_not_as_an_outside_answer(self):
        for name in ("LoopToy", "DeclaredLoopToy"):
            with self.assertRaises(kvcheck.Divergence) as caught:
                kvcheck.check(toy_class(name), time=30, seed=7, args=["--bug", "sink-rolled-out"],
                              out=self.out, extra=SLOW_START)
            report = caught.exception.report
            self.assertNotIn("outside its domain", report, name)
            self.assertNotIn("domain_violation", report, name)
            with open(caught.exception.trace) as f:
                self.assertLessEqual(len(json.load(f)["ops"]), 5, report)


if __name__ == "__main__":
    unittest.main()
