"""Serve a `kvcheck.prefix.PrefixSubject` subclass over kvcheck-subject/1 (the prefix family).

    python -m kvcheck.serve_prefix package.module:ClassName [ARGS]
    python -m kvcheck.serve_prefix path/to/file.py:ClassName [ARGS]

ARGS go to `ClassName.from_args`. Protocol lines go to the original standard
output; anything else written to stdout (Python `print` or C libraries) is
sent to standard error, which kvcheck shows when the subject misbehaves.
"""

import sys

from .prefix import PrefixSubject, serve_prefix
from .serve import load as _load
from .serve import main as _main

BASE_NAME = "kvcheck.prefix.PrefixSubject"
USAGE = "usage: python -m kvcheck.serve_prefix package.module:ClassName [ARGS]"


def load(target):
    """The PrefixSubject subclass named by `module:Class` or `file.py:Class`."""
    return _load(target, PrefixSubject, BASE_NAME)


def main(argv=None):
    return _main(argv, PrefixSubject, serve_prefix, "kvcheck.serve_prefix", USAGE, BASE_NAME)


if __name__ == "__main__":
    sys.exit(main())
