"""The kvcheck binary the tests that run it use: $KVCHECK_BIN, else the
debug build target/debug/kvcheck; they skip, saying how to build it, when
neither exists.

`WithBinary` sets $KVCHECK_BIN to it for each test (and puts it back), and
gives the folder failures are written to, `self.out`
(target/<OUT>, `OUT` a class attribute).
"""

import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBUG_BINARY = os.path.join(ROOT, "target", "debug", "kvcheck")
BINARY = os.environ.get("KVCHECK_BIN") or DEBUG_BINARY
needs_binary = unittest.skipUnless(
    os.path.isfile(BINARY), "no kvcheck binary at %s: run cargo build -p kvcheck" % BINARY
)


class WithBinary(unittest.TestCase):
    OUT = "python-check-failures"

    def setUp(self):
        self.saved = os.environ.get("KVCHECK_BIN")
        os.environ["KVCHECK_BIN"] = BINARY
        self.out = os.path.join(ROOT, "target", self.OUT)

    def tearDown(self):
        if self.saved is None:
            os.environ.pop("KVCHECK_BIN")
        else:
            os.environ["KVCHECK_BIN"] = self.saved
