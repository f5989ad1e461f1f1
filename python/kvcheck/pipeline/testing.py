"""What the pipeline adapters' opt-in tests share (stdlib only until a test runs).

- `environment(adapter, loader, project, env)`: `(READY, SKIP, SUBJECT)`:
  whether torch imports and the adapter's setup.sh marker is there
  (`loader.is_ready()`), the skip message naming the setup step, and the
  command line of the adapter's subject.py under this interpreter.
- `expect(config, ops)`, `with_expect(config, ops)`: the contract's outcome
  of every op (writes, resets, pins and evicts; adapters/reference_subject.py's
  model), and the kvtrace/1 dict that carries it, so that
  adapters/kvtrace_replay.py replays it without kvcheck.
- `finding(name)`: the minimized trace docs/findings/<name>.kvtrace.json.
- `altered_checkout(src, files, old, new)`: a temporary tree with copies
  of the checkout's `files`, `old` replaced by `new` in the first (a
  checkout that moved the code, which the loader must refuse by name).
- `SubjectTest`: a TestCase with one subject process for the class
  (`command`, started in setUpClass, closed cleanly in tearDownClass),
  `replay(trace)`, and `check_finding(...)` for a finding's minimized
  trace (it fails as recorded, or the case skips naming the finding).
"""

import contextlib
import json
import os
import sys
import tempfile
import unittest

from ..adapter import CHECKOUT, shared

FINDINGS = os.path.join(CHECKOUT, "docs", "findings")


def environment(adapter, loader, project, env):
    name = os.path.basename(adapter)
    skip = (
        "%s environment absent: run %s=checkout adapters/%s/setup.sh, "
        "then this with adapters/%s/.venv/bin/python" % (project, env, name, name)
    )
    try:
        import torch  # noqa: F401

        ready = loader.is_ready()
    except ImportError:
        ready = False
    return ready, skip, "%s %s" % (sys.executable, os.path.join(adapter, "subject.py"))


def expect(config, ops):
    """The contract's outcome of every op, pins and evicts included (the
    reference model of adapters/reference_subject.py; for traces the
    reference never refuses)."""
    reference = shared("reference_subject")
    cache = reference.Cache(reference.parse_config(config))
    out = []
    for index, op in enumerate(ops):
        if op == "reset":
            out.append({"ok": cache.reset()})
        elif "pin" in op:
            out.append({"ok": cache.pin_op(op["pin"]["tokens"])})
        elif "evict" in op:
            out.append({"ok": cache.evict(op["evict"]["tokens"])})
        else:
            size = config["batch"] * op["write"]["len"] * config["heads"] * cache.row_bytes
            visible, _, _ = cache.write(index, op["write"], bytes(size), bytes(size))
            writers = [[cache.resident[p][h] for p in visible] for h in range(config["heads"])]
            out.append({"ok": {"global_end": cache.global_end, "visible": visible, "writers": writers}})
    return out


def with_expect(config, ops):
    """A kvtrace/1 dict of `config` (its defaults filled in) and `ops`, with `expect`."""
    config = shared("kvtrace_replay").full_config(config)
    return {"format": "kvtrace/1", "config": config, "ops": ops, "expect": expect(config, ops)}


def finding(name):
    with open(os.path.join(FINDINGS, name + ".kvtrace.json")) as f:
        return json.load(f)


@contextlib.contextmanager
def altered_checkout(src, files, old, new):
    with tempfile.TemporaryDirectory() as tmp:
        for index, relative in enumerate(files):
            os.makedirs(os.path.dirname(os.path.join(tmp, relative)), exist_ok=True)
            with open(os.path.join(src, relative)) as f:
                text = f.read()
            if index == 0:
                text = text.replace(old, new)
            with open(os.path.join(tmp, relative), "w") as f:
                f.write(text)
        yield tmp


class SubjectTest(unittest.TestCase):
    """One subject process (`command`) for the test class."""

    command = None
    library = None  # what check_finding's skip names

    @classmethod
    def setUpClass(cls):
        cls.subject = shared("kvtrace_replay").Subject(cls.command)

    @classmethod
    def tearDownClass(cls):
        assert cls.subject.close() == 0

    def replay(self, trace):
        return shared("kvtrace_replay").replay(self.subject, trace, exact_kinds=False)

    def check_finding(self, name, op, fragment):
        """docs/findings/<name>.kvtrace.json diverges once, at op `op`, with
        `fragment` in the problem; a library that agrees skips the case."""
        problems = self.replay(finding(name))
        if not problems:
            self.skipTest("the loaded %s agrees on docs/findings/%s.kvtrace.json (docs/findings/%s.md)"
                          % (self.library, name, name))
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("op %d " % op), problems)
        self.assertIn(fragment, problems[0])
