"""Serve a `kvcheck.prefix.PrefixSubject` subclass over kvcheck-subject/1 (the prefix family).

    python -m kvcheck.serve_prefix package.module:ClassName [ARGS]
    python -m kvcheck.serve_prefix path/to/file.py:ClassName [ARGS]

ARGS go to `ClassName.from_args`. Protocol lines go to the original standard
output; anything else written to stdout (Python `print` or C libraries) is
sent to standard error, which kvcheck shows when the subject misbehaves.
"""

import importlib
import importlib.util
import os
import sys

from .prefix import PrefixSubject, serve_prefix

USAGE = "usage: python -m kvcheck.serve_prefix package.module:ClassName [ARGS]"


def load(target):
    """The PrefixSubject subclass named by `module:Class` or `file.py:Class`."""
    module_name, sep, class_name = target.rpartition(":")
    if not sep or not module_name or not class_name:
        raise ValueError("%r is not module:ClassName" % target)
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None:
            raise ValueError("cannot load %s" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, PrefixSubject)):
        raise ValueError("%s in %s is not a kvcheck.prefix.PrefixSubject subclass" % (class_name, module_name))
    return cls


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 0 if argv else 2
    try:
        subject = load(argv[0]).from_args(argv[1:])
        subject.validate()
    except (ImportError, ValueError, AttributeError) as error:
        print("kvcheck.serve_prefix: %s" % error, file=sys.stderr)
        return 2
    # The protocol owns the real stdout; print() and C libraries get stderr.
    protocol_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with protocol_out:
        serve_prefix(subject, sys.stdin, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
