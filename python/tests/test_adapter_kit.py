"""kvcheck.adapter, the kit the library adapters share: the dtype map, the
position twin, the mask loop, the background load, checkouts, the front
door and the `__main__` of a subject file. Standard library only: stand-in
modules and caches take the places of torch and the libraries.

    PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
import unittest

import kvcheck
from kvcheck import adapter as kit


class Arange:
    """A stand-in array module: `arange(n, dtype)` gives a list-backed array
    that adds a number to every element, as torch's, mlx's and numpy's do."""

    float64 = "float64"

    class Array(list):
        def __add__(self, other):
            return Arange.Array(x + other for x in self)

    def arange(self, n, dtype=None):
        self.dtype = dtype
        return Arange.Array(float(i) for i in range(n))


class Standalone(unittest.TestCase):
    def test_the_kits_import_with_the_standard_library_alone(self):
        # A fresh interpreter in which torch and numpy cannot be imported:
        # the adapter kit, and the pipeline kit until a subject opens.
        code = textwrap.dedent("""
            import sys
            class Refuse:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in ("torch", "numpy", "mlx"):
                        raise ImportError("no " + name)
            sys.meta_path.insert(0, Refuse())
            import kvcheck.adapter
            import kvcheck.pipeline
            from kvcheck.pipeline import serving, shape, source, tapped, testing, traces
            print(sorted(m for m in ("torch", "numpy", "mlx") if m in sys.modules))
        """)
        done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                              env=kit.script_env(), timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "[]")


class Dtypes(unittest.TestCase):
    def test_every_protocol_dtype_has_a_name(self):
        self.assertEqual(set(kit.DTYPES), set(kvcheck.DTYPES))

    def test_dtype_reads_the_modules_attribute(self):
        module = types.SimpleNamespace(float32="F32", float16="F16", bfloat16="BF16")
        self.assertEqual([kit.dtype(module, n) for n in ("f32", "f16", "bf16")], ["F32", "F16", "BF16"])
        with self.assertRaises(KeyError):
            kit.dtype(module, "f64")

    def test_numpy_gets_bf16_as_its_bit_patterns(self):
        numpy = types.SimpleNamespace(float32="F32", float16="F16", uint16="U16")
        self.assertEqual([kit.numpy_dtype(numpy, n) for n in ("f32", "f16", "bf16")], ["F32", "F16", "U16"])


class Twin(unittest.TestCase):
    def test_tags_are_positions_plus_the_offset(self):
        xp = Arange()
        self.assertEqual(kit.tags(xp, 5, 3, xp.float64), [6.0, 7.0, 8.0])
        self.assertEqual(xp.dtype, "float64")
        self.assertEqual(kit.tags(xp, 0, 0, xp.float64), [])
        big = float(1 << 32)
        self.assertEqual(kit.tags(xp, 2, 2, xp.float64, big), [big + 2, big + 3])

    def test_position_undoes_the_tag_and_zero_is_unwritten(self):
        self.assertEqual([kit.position(t) for t in kit.tags(Arange(), 7, 3, None)], [7, 8, 9])
        self.assertIsNone(kit.position(0))
        self.assertIsNone(kit.position(0.0))
        big = float(1 << 32)
        self.assertEqual(kit.position(big + 41, big), 41)

    def test_both_calls_the_twin_first_and_returns_both_results(self):
        calls = []
        result = kit.both(lambda cache: calls.append(cache) or cache.upper(), "twin", "real")
        self.assertEqual(result, ("TWIN", "REAL"))
        self.assertEqual(calls, ["twin", "real"])

    def test_a_twin_that_raises_alone_is_the_adapters_failure(self):
        calls = []

        def call(cache):
            calls.append(cache)
            if cache == "twin":
                raise ValueError("twin only")
            return cache

        with self.assertRaises(kvcheck.AdapterError) as raised:
            kit.both(call, "twin", "real")
        self.assertIn("twin only", str(raised.exception))
        self.assertEqual(calls, ["twin", "real"], "the real cache is called all the same")

    def test_the_real_caches_exception_wins(self):
        def call(cache):
            raise (ValueError if cache == "twin" else KeyError)(cache)

        with self.assertRaises(KeyError):
            kit.both(call, "twin", "real")

    def test_without_a_twin_only_the_real_cache_is_called(self):
        calls = []
        self.assertEqual(kit.both(lambda c: calls.append(c) or 1, None, "real"), (None, 1))
        self.assertEqual(calls, ["real"])


def _gap(cache, name, body):
    if name == "write" and body["start"] > cache["end"]:
        return "write at %d past %d" % (body["start"], cache["end"])


def _negative(cache, name, body):
    if min(body.values()) < 0:
        return "negative"


MASKS = {
    "gap": ("writes past the global end", "non_sequential", _gap),
    "negative": ("negative numbers", lambda cache, name, body: "negative_window" if "recent_window" in body else "invalid_argument", _negative),
    "odd": ("odd lengths, answered outside", None, lambda cache, name, body: body.get("len", 0) % 2 and "odd length"),
    "at-open": ("checked at open", None, None),
}


class Masks(unittest.TestCase):
    def test_nothing_held_back_without_active_masks(self):
        self.assertIsNone(kit.held_back(MASKS, [], {"end": 0}, "write", {"start": 9, "len": 1}))
        self.assertIsNone(kit.hold_back(MASKS, [], {"end": 0}, "write", {"start": 9, "len": 1}))

    def test_the_first_active_mask_that_holds_back_wins(self):
        cache, body = {"end": 0}, {"start": 9, "len": -1}
        self.assertEqual(kit.held_back(MASKS, ["gap", "negative"], cache, "write", body),
                         ("gap", "non_sequential", "write at 9 past 0"))
        self.assertEqual(kit.held_back(MASKS, ["negative", "gap"], cache, "write", body)[0], "negative")

    def test_a_mask_without_a_test_is_passed_over(self):
        self.assertIsNone(kit.held_back(MASKS, ["at-open"], {"end": 0}, "write", {"start": 9, "len": 1}))

    def test_a_contract_kind_is_a_refusal_naming_the_mask(self):
        with self.assertRaises(kvcheck.Refused) as raised:
            kit.hold_back(MASKS, ["gap"], {"end": 2}, "write", {"start": 5, "len": 1})
        self.assertEqual(raised.exception.kind, "non_sequential")
        self.assertEqual(raised.exception.message, "--mask gap: write at 5 past 2")

    def test_a_callable_kind_gets_the_requests_arguments(self):
        with self.assertRaises(kvcheck.Refused) as raised:
            kit.hold_back(MASKS, ["negative"], {"end": 0}, "write", {"start": 0, "len": 1, "recent_window": -1})
        self.assertEqual(raised.exception.kind, "negative_window")
        with self.assertRaises(kvcheck.Refused) as raised:
            kit.hold_back(MASKS, ["negative"], {"end": 0}, "write", {"start": -1, "len": 1})
        self.assertEqual(raised.exception.kind, "invalid_argument")

    def test_no_kind_is_an_outside_answer(self):
        with self.assertRaises(kvcheck.Outside) as raised:
            kit.hold_back(MASKS, ["odd"], {"end": 0}, "write", {"start": 0, "len": 3})
        self.assertEqual(raised.exception.reason, "--mask odd: odd length")

    def test_the_refusal_class_is_the_callers(self):
        class Masked(kvcheck.Refused):
            pass

        with self.assertRaises(Masked):
            kit.hold_back(MASKS, ["gap"], {"end": 0}, "write", {"start": 1, "len": 1}, refusal=Masked)

    def test_the_option_lists_each_mask_and_repeats(self):
        parser = argparse.ArgumentParser()
        kit.add_mask_option(parser, MASKS, "a recorded difference")
        self.assertEqual(parser.parse_args([]).mask, [])
        self.assertEqual(parser.parse_args(["--mask", "gap", "--mask", "odd"]).mask, ["gap", "odd"])
        with self.assertRaises(SystemExit), open(os.devnull, "w") as quiet:
            stderr, sys.stderr = sys.stderr, quiet
            try:
                parser.parse_args(["--mask", "nonesuch"])
            finally:
                sys.stderr = stderr
        text = parser.format_help().replace("\n", " ")
        self.assertIn("a recorded difference", text)
        for name in MASKS:
            self.assertIn(name, text)


class Background(unittest.TestCase):
    def test_ready_waits_for_the_load_and_returns_its_result(self):
        go = threading.Event()
        background = kit.Background(lambda: go.wait(5) and "loaded")
        go.set()
        self.assertEqual(background.ready(), "loaded")
        self.assertEqual(background.ready(), "loaded")

    def test_ready_raises_what_the_load_raised_every_time(self):
        def load():
            raise ImportError("no library")

        background = kit.Background(load)
        for _ in range(2):
            with self.assertRaises(ImportError):
                background.ready()


class Checkout(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        root = self.tmp.name
        self.adapter = os.path.join(root, "probe")
        self.tree = os.path.join(root, "tree")
        os.makedirs(os.path.join(self.adapter, ".venv"))
        os.makedirs(self.tree)
        with open(os.path.join(self.tree, "model.py"), "w"):
            pass
        self.checkout = kit.Checkout(self.adapter, "KVCHECK_PROBE_READY", "KIT_PROBE_SRC", "model.py", "Probe")
        for name in ("VENV", "KIT_PROBE_SRC"):
            saved = os.environ.pop(name, None)
            if saved is not None:
                self.addCleanup(os.environ.__setitem__, name, saved)

    def test_without_a_marker_or_the_variable_it_names_the_setup_step(self):
        self.assertFalse(self.checkout.is_ready())
        with self.assertRaises(RuntimeError) as raised:
            self.checkout.source_dir()
        self.assertIn("adapters/probe/setup.sh with KIT_PROBE_SRC=checkout", str(raised.exception))

    def test_the_markers_src_and_fields(self):
        with open(self.checkout.marker_path(), "w") as f:
            f.write("source: checkout abc\nsrc: %s\ncommit: abc123\ntorch 2.1\n" % self.tree)
        self.assertTrue(self.checkout.is_ready())
        self.assertEqual(self.checkout.marker(), {"source": "checkout abc", "src": self.tree, "commit": "abc123"})
        self.assertEqual(self.checkout.source_dir(), self.tree)

    def test_the_variable_wins_and_must_hold_the_required_file(self):
        os.environ["KIT_PROBE_SRC"] = self.tree
        self.addCleanup(os.environ.pop, "KIT_PROBE_SRC", None)
        self.assertEqual(self.checkout.source_dir(), self.tree)
        os.environ["KIT_PROBE_SRC"] = self.adapter
        with self.assertRaises(RuntimeError):
            self.checkout.source_dir()


class FrontDoor(unittest.TestCase):
    def test_the_test_config_is_one_a_front_door_describes(self):
        kit.front_door_config(kit.FRONT_DOOR_CONFIG, "probe")
        for config in (dict(kit.FRONT_DOOR_CONFIG, growth=False), dict(kit.FRONT_DOOR_CONFIG, window=3)):
            with self.assertRaises(kvcheck.Outside):
                kit.front_door_config(config, "probe")
        self.assertIsNone(kvcheck.subject.domain_problem(kit.FRONT_DOOR_DOMAIN))

    def test_front_door_write_sends_every_head_no_window_no_payload(self):
        seen = []

        class Door:
            def write(self, *args):
                seen.append(args)
                return "view"

        self.assertEqual(kit.front_door_write(Door(), 3, 2), "view")
        self.assertEqual(seen, [(3, 2, None, None, None, None)])

    def test_a_conversation_follows_answers_and_refuses_what_no_client_sends(self):
        talk = kit.Conversation(50)
        first = talk.prompt(0, 3, None, None)
        self.assertEqual(len(first), 3)
        talk.answered(first, [41, 42])
        follow = talk.prompt(3, 2, None, None)
        self.assertEqual(follow[3:], [41, 42], "an append begins with the last answer")
        edited = talk.prompt(1, 1, None, None)
        self.assertNotEqual(edited[1], first[1], "an edit is another writer's token")
        for args in ((5, 1, None, None), (0, 1, (0, 1), None), (0, 1, None, 2), (-1, 1, None, None)):
            with self.assertRaises(kvcheck.Outside):
                talk.prompt(*args)
        talk.rewind(2)
        self.assertEqual(talk.tokens, first[:2])
        with self.assertRaises(kvcheck.Outside):
            talk.rewind(9)
        talk.reset()
        with self.assertRaises(kvcheck.Outside):
            talk.prompt(0, 0, None, None)


SUBJECT_FILE = '''
import sys
import kvcheck
from kvcheck import adapter as kit


class Probe(kvcheck.Subject):
    variants = ("dense",)
    arrays = "bytes"

    def __init__(self, tag="plain"):
        self.name = "probe " + tag
        self.global_end = 0

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__ or "Probe.")
        parser.add_argument("--tag", default="plain")
        return cls(parser.parse_args(argv).tag)

    def open(self, config):
        self.global_end = 0

    def write(self, start, length, heads, recent_window, k, v):
        print("library chatter")  # sent to stderr, never into the protocol
        self.global_end = max(self.global_end, start + length)
        return list(range(self.global_end)), None, None

    values = False


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "Probe"))
'''


class Main(unittest.TestCase):
    def run_subject(self, args, requests):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "probe_subject.py")
            with open(path, "w") as f:
                f.write(SUBJECT_FILE)
            env = kit.script_env()
            stdin = "".join(json.dumps(r) + "\n" for r in requests)
            return subprocess.run([sys.executable, "-W", "error", path] + args, input=stdin,
                                  capture_output=True, text=True, env=env, timeout=60)

    def test_main_serves_the_files_class_with_its_arguments(self):
        config = dict(kit.FRONT_DOOR_CONFIG)
        done = self.run_subject(["--tag", "x"], [
            {"hello": {"protocol": kvcheck.PROTOCOL, "revision": 4}},
            {"open": {"config": config}},
            {"op": {"write": {"start": 0, "len": 2}}},
            {"close": {}},
        ])
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual(lines[0]["hello"]["name"], "probe x")
        self.assertEqual(lines[2], {"ok": {"global_end": 2, "visible": [0, 1]}})
        self.assertIn("library chatter", done.stderr)

    def test_main_refuses_unknown_arguments(self):
        done = self.run_subject(["--nonesuch"], [])
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stdout, "")

    def test_load_file_registers_the_module_under_its_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "subject.py")
            with open(path, "w") as f:
                f.write("VALUE = 7\n")
            module = kit.load_file(path, "kit_test_loaded_subject")
            self.addCleanup(sys.modules.pop, "kit_test_loaded_subject", None)
            self.assertEqual(module.VALUE, 7)
            self.assertIs(sys.modules["kit_test_loaded_subject"], module)
            with open(path, "w") as f:
                f.write("raise RuntimeError('broken')\n")
            with self.assertRaises(RuntimeError):
                kit.load_file(path, "kit_test_broken_subject")
            self.assertNotIn("kit_test_broken_subject", sys.modules)

    def test_load_module_loads_a_file_once_under_its_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "kit_test_sibling.py"), "w") as f:
                f.write("VALUE = 7\n")
            with open(os.path.join(tmp, "kit_test_user.py"), "w") as f:
                f.write("import kit_test_sibling\nVALUE = kit_test_sibling.VALUE + 1\n")
            for name in ("kit_test_sibling", "kit_test_user"):
                self.addCleanup(sys.modules.pop, name, None)
            sibling = kit.load_module(tmp, "kit_test_sibling")
            self.assertEqual(kit.load_module(tmp, "kit_test_user").VALUE, 8)  # its import finds the sibling
            self.assertIs(kit.load_module(tmp, "kit_test_sibling"), sibling)
            self.assertNotIn(tmp, sys.path)
            other = os.path.join(tmp, "other")
            os.mkdir(other)
            with open(os.path.join(other, "kit_test_sibling.py"), "w") as f:
                f.write("VALUE = 9\n")
            with self.assertRaisesRegex(ImportError, "cannot load .*kit_test_sibling.py as 'kit_test_sibling'"):
                kit.load_module(other, "kit_test_sibling")

    def test_shared_loads_adapters_scripts_with_what_they_import(self):
        replay = kit.shared("kvtrace_replay")
        self.assertEqual(replay.__file__, os.path.join(kit.ADAPTERS, "kvtrace_replay.py"))
        self.assertIs(sys.modules["reference_subject"], kit.shared("reference_subject"))
        self.assertNotIn(kit.ADAPTERS, sys.path)
        with self.assertRaisesRegex(ValueError, "not one of adapters/'s shared scripts"):
            kit.shared("subject")

    def test_script_env_puts_the_folders_and_the_package_first(self):
        env = kit.script_env("/a", env={"PYTHONPATH": "/later", "OTHER": "1"})
        package = os.path.dirname(os.path.dirname(os.path.abspath(kit.__file__)))
        self.assertEqual(env["PYTHONPATH"].split(os.pathsep), ["/a", package, "/later"])
        self.assertEqual(env["OTHER"], "1")
        self.assertEqual(kit.script_env(env={})["PYTHONPATH"], package)

    def test_leave_ends_the_process_with_the_status(self):
        code = "from kvcheck import adapter; print('out'); adapter.leave(%s)"
        for status, want in (("3", 3), ("None", 0), ("'odd'", 1)):
            done = subprocess.run([sys.executable, "-c", code % status], capture_output=True, text=True,
                                  env=kit.script_env(), timeout=60)
            self.assertEqual((done.returncode, done.stdout), (want, "out\n"))


if __name__ == "__main__":
    unittest.main()
