"""The pytest plugin loads both ways: from the installed wheel (its
`pytest11` entry point) and from a checkout's python/ on PYTHONPATH (with
`-p kvcheck.pytest_plugin`), and once when both apply. The runs need pytest
in this interpreter and the kvcheck binary ($KVCHECK_BIN, else the debug
build); they skip with a message otherwise.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BINARY = os.environ.get("KVCHECK_BIN") or os.path.join(ROOT, "target", "debug", "kvcheck")

try:
    import pytest  # noqa: F401

    HAVE_PYTEST = True
except ImportError:
    HAVE_PYTEST = False

TEST_FILE = """
import kvcheck
import reference_subject


def test_reference():
    kvcheck.check(reference_subject.Reference, time=1, profile="tiny", seed=3, out=%r)
"""


def entry_point():
    """(name, module) of the pyproject's pytest11 entry point."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    section = text.split("[project.entry-points.pytest11]", 1)[1]
    match = re.search(r'^"?([\w.]+)"?\s*=\s*"([\w.]+)"', section, re.M)
    return match.group(1), match.group(2)


class EntryPoint(unittest.TestCase):
    def test_the_entry_point_is_named_after_its_module(self):
        # pytest registers `-p kvcheck.pytest_plugin` under the module's
        # name and the entry point under its own: with two names, a wheel
        # on the path and -p together fail with "Plugin already registered".
        name, module = entry_point()
        self.assertEqual(module, "kvcheck.pytest_plugin")
        self.assertEqual(name, module)


@unittest.skipUnless(HAVE_PYTEST, "pytest is not installed in this interpreter: pip install pytest to run the plugin's tests")
@unittest.skipUnless(os.path.isfile(BINARY), "no kvcheck binary at %s: run cargo build -p kvcheck" % BINARY)
class Summary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.tests = os.path.join(self.dir, "tests")
        os.mkdir(self.tests)
        with open(os.path.join(self.tests, "test_kv.py"), "w") as f:
            f.write(TEST_FILE % os.path.join(self.dir, "failures"))
        # What the wheel adds to site-packages for pytest: its metadata
        # with the entry point of pyproject.toml.
        self.wheel = os.path.join(self.dir, "site")
        info = os.path.join(self.wheel, "kvcheck-0.1.0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: kvcheck\nVersion: 0.1.0\n")
        name, module = entry_point()
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            f.write("[pytest11]\n%s = %s\n" % (name, module))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def pytest(self, wheel, *args):
        path = [os.path.join(ROOT, "python"), os.path.join(ROOT, "adapters")]
        if wheel:
            path.append(self.wheel)
        env = dict(os.environ, KVCHECK_BIN=BINARY, PYTHONPATH=os.pathsep.join(path))
        env.pop("PYTEST_PLUGINS", None)
        env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            cwd=self.tests, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        )
        self.assertEqual(done.returncode, 0, done.stdout)
        return done.stdout

    def assertSummary(self, output):
        self.assertEqual(len(re.findall(r"^-+ kvcheck -+$", output, re.M)), 1, output)
        self.assertRegex(output, r"(?m)^[\d,]+ ops checked in [\d.]+ s, no divergence \(Reference\)$")

    def test_from_the_wheel(self):
        self.assertSummary(self.pytest(True))

    def test_from_a_checkout_with_p(self):
        self.assertSummary(self.pytest(False, "-p", "kvcheck.pytest_plugin"))

    def test_both_at_once_register_it_once(self):
        self.assertSummary(self.pytest(True, "-p", "kvcheck.pytest_plugin"))

    def test_without_the_plugin_a_warning_says_how_to_load_it(self):
        output = self.pytest(False)
        self.assertNotRegex(output, r"(?m)^-+ kvcheck -+$")
        self.assertIn("-p kvcheck.pytest_plugin", output)


if __name__ == "__main__":
    unittest.main()
