"""What the library adapters declare as their domain, and that requests
outside it are answered with kvcheck.Outside (no adapter-own exception).

Each adapter is imported in a child process (several share module names
such as `loader`) without its library: its class is built and asked for
the capabilities it sends a revision-3 harness. No torch, no library.

Run: python3 -m unittest discover -s adapters/tests -v
"""

import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
ROOT = os.path.dirname(ADAPTERS)

LOOP = {"rewrites": "latest", "probes": "after_append", "gaps": False, "malformed": False}

# (adapter directory, module file, class, from_args arguments) -> the domain it declares
DECLARED = [
    (("pipeline_kit", "shape.py", "ShapeCache", None), LOOP),
    (("longlive", "subject.py", "LongLiveCache", []), dict(LOOP, evict="scene_cut", pin="scene_cut")),
    (("rollingforcing", "subject.py", "RollingForcingCache", []), None),
    (("rollingforcing", "subject.py", "RollingForcingCache", ["--block", "3"]), dict(LOOP, chunks={"lengths": [3]})),
    (("lightx2v", "subject.py", "LightX2VRollingCache", []), None),
    (("lightx2v", "subject.py", "LightX2VRollingCache", ["--chunk", "2"]), dict(LOOP, chunks={"lengths": [2]})),
]

PROBE = r"""
import json, os, sys
adapter, module, cls, argv = json.loads(sys.argv[1])
folder = os.path.join(%(adapters)r, adapter)
sys.path[:0] = [folder, %(adapters)r, %(python)r]
namespace = {"__name__": "adapter_under_test", "__file__": os.path.join(folder, module)}
with open(namespace["__file__"]) as f:
    exec(compile(f.read(), namespace["__file__"], "exec"), namespace)
kind = namespace[cls]
subject = kind.__new__(kind) if argv is None else kind.from_args(argv)
subject.validate()
print(json.dumps([subject.capabilities(revision=3).get("domain"),
                  "domain" in subject.capabilities(revision=2)]))
""" % {"adapters": ADAPTERS, "python": os.path.join(ROOT, "python")}


def declared(adapter, module, cls, argv):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([adapter, module, cls, argv])],
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
        for folder, _, files in os.walk(ADAPTERS):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    with open(path) as f:
                        text = f.read()
                    if re.search(r"^class %s\b" % name, text, re.M) or "raise %s(" % name in text:
                        own.append(os.path.relpath(path, ROOT))
        self.assertEqual(own, [])


if __name__ == "__main__":
    unittest.main()
