"""Serve a `kvcheck.Subject` subclass over kvcheck-subject/1.

    python -m kvcheck.serve package.module:ClassName [ARGS]
    python -m kvcheck.serve path/to/file.py:ClassName [ARGS]

ARGS go to `ClassName.from_args`. Protocol lines go to the original standard
output; anything else written to stdout (Python `print` or C libraries) is
sent to standard error, which kvcheck shows when the subject misbehaves.
"""

import importlib
import importlib.util
import os
import sys

from .subject import Subject, serve

USAGE = "usage: python -m kvcheck.serve package.module:ClassName [ARGS]"


def load(target, base=Subject, base_name="kvcheck.Subject"):
    """The `base` subclass named by `module:Class` or `file.py:Class`
    (`base_name` names `base` in the error)."""
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
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError("%s in %s is not a %s subclass" % (class_name, module_name, base_name))
    return cls


def main(argv=None, base=Subject, serve_with=serve, program="kvcheck.serve", usage=USAGE,
         base_name="kvcheck.Subject"):
    """Loads the class named by `argv[0]` (a `base` subclass), builds it
    from the rest and serves it with `serve_with`; the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage + "\n\n" + __doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 0 if argv else 2
    try:
        subject = load(argv[0], base, base_name).from_args(argv[1:])
        subject.validate()
    except (ImportError, ValueError, AttributeError) as error:
        print("%s: %s" % (program, error), file=sys.stderr)
        return 2
    # The protocol owns the real stdout; print() and C libraries get stderr.
    protocol_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with protocol_out:  # closed at the end of the protocol, not left to the collector
        serve_with(subject, sys.stdin, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
