"""The diffusers adapter against diffusers' real caches (opt-in: needs setup.sh).

Run with the venv's interpreter:

    adapters/diffusers/setup.sh
    adapters/diffusers/.venv/bin/python -m unittest discover -s adapters/diffusers/tests -v

Without the environment every test is skipped with that instruction. The
cases on a behaviour of a finding (docs/findings/diffusers-*.md) check the
finding on the release it names and skip, naming the finding, when the
installed library behaves otherwise (a patched or newer one).
"""

import os
import random
import sys
import tempfile
import unittest

from kvcheck.adapter import load_module, shared

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
clean_protocol = shared("clean_protocol")
kvtrace_replay = shared("kvtrace_replay")
loader = load_module(ADAPTER, "loader")

SKIP = (
    "diffusers environment absent: run adapters/diffusers/setup.sh, "
    "then this with adapters/diffusers/.venv/bin/python"
)

try:
    import torch  # noqa: F401
    import diffusers  # noqa: F401

    READY = loader.installed_version() is not None
except ImportError:
    READY = False

SUBJECT = "%s %s" % (sys.executable, os.path.join(ADAPTER, "subject.py"))
RELEASE = loader.DEFAULT_VERSION


def traces(cache, count, seed, **options):
    """`count` traces of pipeline_protocol.py, each with the contract's `expect`."""
    pipeline_protocol = load_module(ADAPTER, "pipeline_protocol")

    rng = random.Random(seed)
    for _ in range(count):
        if cache == "sana-wm-refiner":
            config, ops, _ = pipeline_protocol.refiner(rng, options.get("sink_min", 1))
        else:
            config, ops, _ = pipeline_protocol.anyflow(rng)
        config = kvtrace_replay.full_config(config)
        yield {"format": "kvtrace/1", "config": config, "ops": ops, "expect": clean_protocol.expect(config, ops)}


class Case(unittest.TestCase):
    cache = None

    @classmethod
    def setUpClass(cls):
        cls.subject = kvtrace_replay.Subject("%s --cache %s" % (SUBJECT, cls.cache))

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def open(self, **config):
        full = kvtrace_replay.full_config(dict({"variant": "dense", "capacity": 8}, **config))
        self.config = full
        self.payloads = kvtrace_replay.Payloads(full)
        response = self.subject.request({"open": {"config": full}})
        self.assertIn("ok", response)

    def write(self, index, start, length):
        import base64

        heads = range(self.config["heads"])
        data = {
            kv: base64.b64encode(self.payloads.tensor(i, index, start, length, heads)).decode()
            for i, kv in enumerate("kv")
        }
        return self.subject.request({"op": {"write": {"start": start, "len": length}}, "index": index, **data})


@unittest.skipUnless(READY, SKIP)
class SanaWMRefiner(Case):
    cache = "sana-wm-refiner"

    def test_hello_declares_what_the_refiner_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(sorted(caps["ops"]), ["evict", "reset", "write"])
        self.assertEqual(caps["variants"], ["dense"])
        self.assertEqual(caps["features"], [])
        self.assertTrue(caps["values"])
        self.assertIn("SanaWMRefinerKVCache", self.subject.hello["name"])

    def test_the_refiners_protocol_agrees_with_the_contract(self):
        # A slice of docs/diffusers.md's 300 traces (sink 1..3, kv_max_frames above the sink).
        problems = {}
        for i, trace in enumerate(traces(self.cache, 12, 7)):
            found = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
            if found:
                problems[i] = found[:3]
        self.assertEqual(problems, {})

    def test_the_sink_slides_to_sit_before_the_history(self):
        # In process: the frame positions the sink's RoPE is built for.
        subject = load_module(ADAPTER, "subject")

        cache = subject.SanaWMRefinerCache(layers=1)
        cache.open(kvtrace_replay.full_config({"variant": "dense", "capacity": 6, "sink": 1}))
        for start in (0, 3, 5, 7):
            n = 2 if start else 3
            rows = torch.arange(start + 1, start + 1 + n, dtype=torch.float32).reshape(1, n, 1, 1)
            cache.write(start, n, None, None, rows, -rows)
        # Blocks [1,3) [3,5) [5,7) [7,9) with C = 6: history 0, 2, 3, 3 frames.
        sinks = [positions for positions in cache.rope_calls if len(positions) == 1]
        self.assertEqual(sinks, [[0], [0], [0], [1], [3]])

    def test_writes_outside_the_pipeline_are_outside(self):
        self.open(sink=2, capacity=6)
        short = self.write(0, 0, 1)
        self.assertEqual(short["exception"]["type"], "Outside")
        self.assertIn("ok", self.write(1, 0, 3))
        self.assertIn("ok", self.write(2, 3, 2))
        older = self.write(3, 0, 3)  # captured history is not rewritten
        self.assertEqual(older["exception"]["type"], "Outside")
        self.assertEqual(self.write(4, 5, 0)["ok"]["visible"], [0, 1, 2, 3, 4])

    def test_finding_sink_size_zero(self):
        self.open(sink=0, capacity=4)
        response = self.write(0, 0, 2)
        if "ok" in response:
            self.skipTest("diffusers %s captures no zero-frame sink (docs/findings/diffusers-sana-wm-sink-size-zero.md)"
                          % loader.installed_version())
        self.assertEqual(response["exception"]["type"], "RuntimeError")
        self.assertIn("cannot reshape tensor of 0 elements", response["exception"]["message"])

    def test_finding_window_kept_at_sink_size(self):
        self.open(sink=1, capacity=4)
        self.assertIn("ok", self.write(0, 0, 2))
        visible = self.write(1, 2, 3)["ok"]["visible"]  # a 3-frame block: kv_max_frames = C - 3 = sink_size
        if visible == [0, 2, 3, 4]:
            self.skipTest("diffusers %s trims at kv_max_frames == sink_size "
                          "(docs/findings/diffusers-sana-wm-window-kept-at-sink-size.md)" % loader.installed_version())
        self.assertEqual(visible, [0, 1, 2, 3, 4])


@unittest.skipUnless(READY, SKIP)
class AnyFlowFAR(Case):
    cache = "anyflow-far"

    def test_hello_declares_what_anyflow_far_can_express(self):
        caps = self.subject.hello["capabilities"]
        self.assertEqual(sorted(caps["ops"]), ["reset", "write"])
        self.assertEqual(caps["features"], ["growth"])
        self.assertIn("AnyFlow-FAR", self.subject.hello["name"])

    def test_an_empty_cache_is_probed_without_a_forward(self):
        self.open(growth=True)
        self.assertEqual(self.write(0, 0, 0)["ok"]["visible"], [])

    def test_finding_attends_padding_or_the_protocol_agrees(self):
        self.open(growth=True, capacity=4)
        first = self.write(0, 0, 2)
        if "exception" in first:
            # docs/findings/diffusers-anyflow-far-attends-padding.md
            self.assertEqual(first["exception"]["type"], "UnknownRows")
            self.assertIn("126 keys matching no produced row", first["exception"]["message"])
            return
        self.assertEqual(first["ok"]["visible"], [0, 1])
        problems = {}
        for i, trace in enumerate(traces(self.cache, 4, 7)):
            found = kvtrace_replay.replay(self.subject, trace, exact_kinds=False)
            if found:
                problems[i] = found[:3]
        self.assertEqual(problems, {})


@unittest.skipUnless(READY, SKIP)
class Loader(unittest.TestCase):
    def test_every_program_is_found_in_the_installed_release(self):
        refiner = loader.load_refiner()
        self.assertEqual(sorted(refiner.programs), ["block", "commit", "denoise", "setup", "sink", "trim", "window"])
        anyflow = loader.load_anyflow()
        self.assertEqual(sorted(anyflow.programs), ["commit", "denoise", "setup"])
        self.assertEqual(sorted(anyflow.functions), ["encode_kv_cache"])

    def test_a_release_without_the_statement_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "pipelines", "sana_wm"))
            with open(os.path.join(root, loader.REFINER), "w") as f:
                f.write("class SanaWMLTX2Refiner:\n    def __call__(self):\n        pass\n")
            saved = loader.package_dir
            loader.package_dir = lambda: root
            try:
                with self.assertRaisesRegex(RuntimeError, "_capture_block_kv"):
                    loader.load_refiner()
            finally:
                loader.package_dir = saved


if __name__ == "__main__":
    unittest.main()
