"""What the library adapters declare as their domain, and that requests
outside it are answered with kvcheck.Outside (no adapter-own exception).

Each adapter is imported in a child process (several share module names
such as `loader`) without its library: its class is built and asked for
the capabilities it sends a revision-3 harness. No torch, no library.

Run: PYTHONPATH=python python3 -m unittest discover -s adapters/tests -v
"""

import json
import os
import re
import subprocess
import sys
import unittest

import kvcheck.pipeline
from kvcheck.adapter import ADAPTERS, CHECKOUT, script_env

LOOP = {"rewrites": "latest", "probes": "after_append", "gaps": False, "malformed": False}

# (adapter directory or None, module, class, from_args arguments) -> the
# domain it declares. An adapter's module is imported as its subject.py runs
# (its folder first on the path), the others from the kvcheck package.
DECLARED = [
    ((None, "kvcheck.pipeline.shape", "ShapeCache", None), LOOP),
    (("longlive", "subject", "LongLiveCache", []), dict(LOOP, evict="scene_cut", pin="scene_cut")),
    (("rollingforcing", "subject", "RollingForcingCache", []), None),
    (("rollingforcing", "subject", "RollingForcingCache", ["--block", "3"]), dict(LOOP, chunks={"lengths": [3]})),
    (("lightx2v", "subject", "LightX2VRollingCache", []), None),
    (("lightx2v", "subject", "LightX2VRollingCache", ["--chunk", "2"]), dict(LOOP, chunks={"lengths": [2]})),
]

PROBE = r"""
import importlib, json, sys
module, cls, argv = json.loads(sys.argv[1])
kind = getattr(importlib.import_module(module), cls)
subject = kind.__new__(kind) if argv is None else kind.from_args(argv)
subject.validate()
print(json.dumps([subject.capabilities(revision=3).get("domain"),
                  "domain" in subject.capabilities(revision=2)]))
"""


def declared(adapter, module, cls, argv):
    folders = [] if adapter is None else [os.path.join(ADAPTERS, adapter)]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([module, cls, argv])],
        env=script_env(*folders),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise AssertionError("%s/%s %s: %s" % (adapter, module, argv, done.stderr[-2000:]))
    return json.loads(done.stdout.splitlines()[-1])


class Domains(unittest.TestCase):
    def test_the_pipeline_adapters_declare_their_loop(self):
        for (adapter, module, cls, argv), want in DECLARED:
            with self.subTest(adapter=adapter, argv=argv):
                domain, older = declared(adapter, module, cls, argv)
                self.assertEqual(domain, want)
                self.assertFalse(older, "a revision-2 harness refuses the domain field")

    def test_no_adapter_keeps_its_own_inexpressible_exception(self):
        name = "Inexp" + "ressible"  # spelled apart, so that this file does not match
        own = []
        for top in (ADAPTERS, os.path.dirname(kvcheck.pipeline.__file__)):
            for folder, folders, files in os.walk(top):
                folders[:] = [f for f in folders if f != ".venv"]
                for file in files:
                    if not file.endswith(".py"):
                        continue
                    path = os.path.join(folder, file)
                    with open(path) as f:
                        text = f.read()
                    if re.search(r"^class %s\b" % name, text, re.M) or "raise %s(" % name in text:
                        own.append(os.path.relpath(path, CHECKOUT))
        self.assertEqual(own, [])


if __name__ == "__main__":
    unittest.main()
