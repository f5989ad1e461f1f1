"""The pure parts of the pipeline kit (kvcheck.pipeline): finding and
compiling a library's inline statements, the command line and domain of a
subject, the trace generators' plumbing, and what each pipeline adapter's
generator draws. No torch, no library.

Run: PYTHONPATH=python python3 -m unittest discover -s adapters/tests -v
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from kvcheck.adapter import ADAPTERS, Checkout, load_file, shared
from kvcheck.pipeline import serving, source, testing, traces

clean_protocol = shared("clean_protocol")

LIBRARY = textwrap.dedent('''
    import not_installed_anywhere

    WINDOW = 21


    class Pipeline:
        def __init__(self, local_attn_size):
            self.local_attn_size = local_attn_size
            self.max_attention_size = local_attn_size * 1560

        def inference(self, noise):
            if self.kv_cache is None:
                self._initialize_kv_cache()
            else:
                for block_index in range(len(self.kv_cache)):
                    self.kv_cache[block_index]["end"] = 0
            for step in range(3):
                self.model(noise, current_start=step * self.frame_seq_length, extra={"window": WINDOW})

        def allocate(self, size: BlockMask) -> NotImportedEither:
            return [0] * size
''')


def generator(name):
    """adapters/<name>/pipeline_protocol.py, imported under its own name."""
    path = os.path.join(ADAPTERS, name, "pipeline_protocol.py")
    return load_file(path, "pipeline_protocol_" + name.replace("-", "_"))


class Source(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = self.tmp.name
        os.makedirs(os.path.join(self.src, "lib"))
        self.path = os.path.join(self.src, "lib", "pipeline.py")
        with open(self.path, "w") as f:
            f.write(LIBRARY)
        self.file, self.tree = source.read(self.src, os.path.join("lib", "pipeline.py"), "Lib")

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_missing_file_is_refused_by_name(self):
        with self.assertRaisesRegex(RuntimeError, "the Lib checkout .* has no lib/absent.py"):
            source.read(self.src, os.path.join("lib", "absent.py"), "Lib")

    def test_methods_are_found_or_refused_by_name(self):
        init, inference = source.require_methods(self.file, self.tree, "Pipeline", ["__init__", "inference"])
        self.assertEqual((init.name, inference.name), ("__init__", "inference"))
        with self.assertRaisesRegex(RuntimeError, "Pipeline has no _zero_kv_data"):
            source.require_methods(self.file, self.tree, "Pipeline", ["inference", "_zero_kv_data"])
        with self.assertRaisesRegex(RuntimeError, "has no Wrapper$"):
            source.require_methods(self.file, self.tree, "Wrapper", ["inference"])
        self.assertIsNone(source.find_method(self.tree, "Pipeline", "absent"))

    def test_one_statement_is_compiled_and_runs_on_a_stand_in(self):
        init = source.find_method(self.tree, "Pipeline", "__init__")
        nodes = source.statements(self.file, init.body, [source.starts("self.max_attention_size = ")], "the window")
        code = source.compile_statements(self.file, nodes)
        self.assertEqual(code.co_filename, self.file)
        stand_in = type("StandIn", (), {})()
        exec(code, {"self": stand_in, "local_attn_size": 3})
        self.assertEqual(stand_in.max_attention_size, 3 * 1560)

    def test_a_statement_found_twice_or_never_is_refused(self):
        inference = source.find_method(self.tree, "Pipeline", "inference")
        with self.assertRaisesRegex(RuntimeError, "expected one statement for the reset, found 0"):
            source.statements(self.file, inference.body, [source.starts("self.reset(")], "the reset")
        # an optional test may find nothing (a patched file)
        found = source.statements(self.file, inference.body, [source.starts("self.reset("),
                                                              source.starts("self._initialize_kv_cache(")],
                                  "the allocation", optional=1)
        self.assertEqual(len(found), 1)

    def test_the_reset_loop_of_an_else_branch(self):
        inference = source.find_method(self.tree, "Pipeline", "inference")
        loop = source.else_loop(self.file, inference, "self.kv_cache is None", "range(len(self.kv_cache))", "no reset")
        stand_in = type("StandIn", (), {})()
        stand_in.kv_cache = [{"end": 5}, {"end": 7}]
        exec(source.compile_statements(self.file, [loop]), {"self": stand_in})
        self.assertEqual(stand_in.kv_cache, [{"end": 0}, {"end": 0}])
        with self.assertRaisesRegex(RuntimeError, "pipeline.py: no reset"):
            source.else_loop(self.file, inference, "self.cache is None", "range(len(self.kv_cache))", "no reset")

    def test_functions_keep_the_library_types_unevaluated(self):
        allocate = source.find_method(self.tree, "Pipeline", "allocate")
        functions = source.compile_functions(self.file, [allocate], {})
        bound = source.bind(type("StandIn", (), {})(), functions)
        self.assertEqual(bound.allocate(2), [0, 0])

    def test_expressions_keywords_dicts_and_constants(self):
        inference = source.find_method(self.tree, "Pipeline", "inference")
        text = source.keyword_in(inference, "current_start")
        self.assertEqual(text, "step * self.frame_seq_length")
        stand_in = type("StandIn", (), {"frame_seq_length": 4})()
        self.assertEqual(eval(source.expression(self.file, text), {"step": 2, "self": stand_in}), 8)
        self.assertEqual(source.dict_value_in(inference, "window"), "WINDOW")
        self.assertIsNone(source.keyword_in(inference, "absent"))
        self.assertEqual(source.module_constant(self.file, self.tree, "WINDOW"), 21)
        with self.assertRaisesRegex(RuntimeError, "no module constant ABSENT"):
            source.module_constant(self.file, self.tree, "ABSENT")

    def test_a_package_is_registered_without_running_its_init(self):
        package = os.path.join(self.src, "heavy_kit_probe")
        os.makedirs(package)
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write("raise ImportError('the whole library')\n")
        with open(os.path.join(package, "cache.py"), "w") as f:
            f.write("SIZE = 3\n")
        code = ("from kvcheck.pipeline import source; "
                "source.register_packages(%r, ['heavy_kit_probe']); import heavy_kit_probe.cache as c; print(c.SIZE)"
                % self.src)
        done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        self.assertEqual((done.returncode, done.stdout.strip()), (0, "3"), done.stderr)


class Serving(unittest.TestCase):
    def test_the_loop_domain(self):
        self.assertEqual(serving.loop_domain(), serving.LOOP)
        self.assertEqual(serving.loop_domain(chunk=3), dict(serving.LOOP, chunks={"lengths": [3]}))
        self.assertEqual(serving.loop_domain(pin="scene_cut")["pin"], "scene_cut")
        self.assertNotIn("chunks", serving.LOOP)  # declarations never change the shared one

    def test_the_command_line(self):
        parser = serving.parser("The first paragraph.\n\nThe rest.")
        serving.add_layers(parser, 2, "blocks")
        parser.add_argument("--chunk", type=int)
        self.assertEqual(parser.description, "The first paragraph.")
        self.assertEqual(parser.prog, "subject.py")
        args = serving.parse(parser, ["--chunk", "4"], positive=("layers", "chunk"))
        self.assertEqual((args.layers, args.chunk), (2, 4))
        for argv, message in ((["--layers", "0"], "--layers must be at least 1"),
                              (["--chunk", "0"], "--chunk must be at least 1")):
            with self.assertRaises(SystemExit) as raised:
                serving.parse(parser, argv, positive=("layers", "chunk"))
            self.assertEqual(str(raised.exception), message)

    def test_the_commit_comes_from_the_marker_else_the_environment(self):
        with tempfile.TemporaryDirectory() as venv:
            checkout = Checkout(venv, "KVCHECK_KIT_PROBE_READY", "KIT_PROBE_SRC", "model.py", "Probe")
            saved = dict(os.environ)
            try:
                os.environ["VENV"] = venv
                os.environ.pop("KIT_PROBE_COMMIT", None)
                self.assertEqual(serving.commit(checkout), "?")
                os.environ["KIT_PROBE_COMMIT"] = "0123456789abcdef"
                self.assertEqual(serving.commit(checkout), "0123456789ab")
                with open(os.path.join(venv, "KVCHECK_KIT_PROBE_READY"), "w") as f:
                    f.write("commit: fedcba9876543210\nsrc: /nowhere\n")
                self.assertEqual(serving.commit(checkout), "fedcba987654")
            finally:
                os.environ.clear()
                os.environ.update(saved)


def check_loop(test, config, ops, lengths=None):
    """Every write of `ops` is what a chunk loop asks: an append at the global
    end, a rewrite of the latest chunk, a probe after an append; no gap."""
    g, latest = 0, None
    for op in ops:
        if op == "reset":
            g, latest = 0, None
            continue
        if "write" not in op:
            continue
        w = op["write"]
        if w["len"] == 0:
            test.assertIsNotNone(latest, "a probe before any append")
            test.assertLessEqual(w["start"], g)
        elif w["start"] == g:
            if lengths is not None:
                test.assertIn(w["len"], lengths)
            latest = (w["start"], w["len"])
            g += w["len"]
        else:
            test.assertEqual((w["start"], w["len"]), latest, "a rewrite of other than the latest chunk")


class Traces(unittest.TestCase):
    LIBRARIES = {"self-forcing": {}, "longlive": {"aligned": False, "recache": True}, "rollingforcing": {},
                 "lightx2v": {}}

    def test_each_generator_is_deterministic_and_keeps_to_the_loop(self):
        for name, options in self.LIBRARIES.items():
            module = generator(name)
            with self.subTest(library=name):
                first = list(traces.generate(module.trace, 30, 7, **options))
                self.assertEqual(first, list(traces.generate(module.trace, 30, 7, **options)))
                self.assertNotEqual(first, list(traces.generate(module.trace, 30, 8, **options)))
                for body in first:
                    lengths = {body["config"]["sink"]} if name == "rollingforcing" else None
                    check_loop(self, body["config"], body["ops"], lengths)

    def test_longlive_options_reach_its_trace(self):
        module = generator("longlive")
        ops = [op for body in traces.generate(module.trace, 40, 1, aligned=True, recache=True) for op in body["ops"]]
        self.assertTrue(any("evict" in op for op in ops if op != "reset"))
        ops = [op for body in traces.generate(module.trace, 40, 1, aligned=True, recache=False) for op in body["ops"]]
        self.assertFalse(any("evict" in op for op in ops if op != "reset"))

    def test_notes_name_the_seed_and_index(self):
        body = list(traces.generate(generator("lightx2v").trace, 3, 5))[2]
        self.assertEqual(list(body), ["format", "note", "config", "ops"])
        self.assertTrue(body["note"].endswith("(pipeline_protocol.py --seed 5, trace 2)"), body["note"])
        self.assertNotIn("note", next(traces.generate(generator("self-forcing").trace, 1, 5)))

    def test_expect_is_the_contracts_outcome(self):
        for body in traces.generate(generator("self-forcing").trace, 10, 3, expect=True):
            self.assertEqual(body["expect"], clean_protocol.expect(body["config"], body["ops"]))
            self.assertEqual(body["expect"], testing.expect(body["config"], body["ops"]))
            self.assertIn("packed", body["config"])  # the defaults are filled in

    def test_main_writes_what_generate_draws(self):
        module = generator("rollingforcing")
        with tempfile.TemporaryDirectory() as out:
            with open(os.devnull, "w") as quiet:
                saved, sys.stdout = sys.stdout, quiet
                try:
                    self.assertEqual(module.main(["--count", "4", "--seed", "2", "--out", out]), 0)
                finally:
                    sys.stdout = saved
            self.assertEqual(sorted(os.listdir(out)), ["rollingforcing-%04d.kvtrace.json" % i for i in range(4)])
            with open(os.path.join(out, "rollingforcing-0003.kvtrace.json")) as f:
                self.assertEqual(json.load(f), list(traces.generate(module.trace, 4, 2))[3])


class Testing(unittest.TestCase):
    def test_pins_and_evicts_have_the_contracts_outcome(self):
        config = {"variant": "dense", "capacity": 6, "sink": 1, "global_sink": 1}
        ops = [{"write": {"start": 0, "len": 2}}, {"write": {"start": 2, "len": 2}}, {"evict": {"tokens": 1}},
               {"pin": {"tokens": 2}}, {"write": {"start": 4, "len": 2}}, "reset"]
        trace = testing.with_expect(config, ops)
        self.assertEqual(len(trace["expect"]), len(ops))
        self.assertTrue(all("ok" in outcome for outcome in trace["expect"]), trace["expect"])
        self.assertEqual(trace["expect"][4]["ok"]["global_end"], 6)

    def test_the_skip_names_the_setup_step(self):
        class Absent:
            @staticmethod
            def is_ready():
                return False

        ready, skip, subject = testing.environment(os.path.join(ADAPTERS, "longlive"), Absent, "LongLive", "LONGLIVE_SRC")
        self.assertFalse(ready)
        self.assertIn("LONGLIVE_SRC=checkout adapters/longlive/setup.sh", skip)
        self.assertTrue(subject.endswith(os.path.join("longlive", "subject.py")))


if __name__ == "__main__":
    unittest.main()
