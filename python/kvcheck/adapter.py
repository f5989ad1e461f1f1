"""`kvcheck.adapter`: what a library adapter is built from, beside `kvcheck.Subject`.

An adapter (adapters/<library>/subject.py) wraps one library's cache in a
`kvcheck.Subject`. Everything it shares with the other adapters is here, so
that its file holds only what is the library's own: which calls an op is,
and the masks of the differences already recorded for it.

    import kvcheck
    from kvcheck import adapter as kit

    class MyLibraryCache(kvcheck.Subject):
        arrays = "torch"

        def __init__(self, masks=()):
            self.masks = list(masks)
            self.runtime = kit.Background(load)       # torch + the library, from start-up

        @classmethod
        def from_args(cls, argv):
            parser = kit.parser(__doc__)
            kit.add_mask_option(parser, MASKS)
            return cls(parser.parse_args(argv).mask)

        def open(self, config):
            self.rt = self.runtime.ready()
            self.dtype = kit.dtype(self.rt.torch, config["dtype"])
            ...

        def write(self, start, length, heads, recent_window, k, v):
            kit.hold_back(MASKS, self.masks, self, "write", {"start": start, "len": length})
            twin_view, view = kit.both(lambda cache: ..., self.twin, self.real)
            ...

    if __name__ == "__main__":
        sys.exit(kit.main(__file__, "MyLibraryCache"))

The pieces:

- `main(path, cls)`: the `__main__` of a subject file: serves class `cls`
  of the file `path` as `python -m kvcheck.serve path:cls ARGS` does;
  `leave(status)` ends the process without the interpreter's teardown.
  `parser(doc)`: the command line's parser (`prog` subject.py, the
  docstring's first paragraph).
- `Background(load)`: runs `load()` (importing torch and a library takes
  seconds to a minute) in a thread from start-up, so `hello` is answered
  at once; `ready()` returns what `load` returned or raises what it raised.
- `DTYPES`, `dtype(module, name)`, `numpy_dtype(numpy, name)`: the config's
  dtype names as torch's, mlx's or numpy's dtypes.
- The position twin: `tags(xp, start, length, dtype)`, `position(tag)`,
  `both(call, twin, real)`. A library that returns K/V but no positions
  gets a second cache, the twin, that receives the same calls with row `p`
  tagged `p + offset`: the twin's view, row by row, is the positions the
  library put there.
- Masks (`--mask NAME`, a recorded difference held back so that a search
  looks past it): `add_mask_option(parser, masks)`, `held_back(...)`,
  `hold_back(...)`. `masks` maps a name to `(what it holds back, kind,
  test)`.
- `Checkout(...)`: where an adapter finds a library that is a source
  checkout, not a registry release (setup.sh's marker, or `$<NAME>_SRC`).
- The front door (a library's entry point: a server, `generate()`):
  `Conversation`, `FRONT_DOOR_DOMAIN`, `front_door_config`, and for tests
  `FRONT_DOOR_CONFIG` and `front_door_write`.
- Files by path, for tests and the kits (the adapters' folders are no
  packages, and a test puts none on sys.path): `load_file(path, name)`, a
  file as the module `name`; `load_module(folder, name)`, `folder/name.py`
  as `name`, once (load a file's siblings first, by the names it imports
  them by); `shared(name)`, one of adapters/'s own scripts (`SHARED`: the
  reference subject, kvtrace_replay, clean_protocol) with the ones it
  imports; `script_env(*folders)`, the environment of a process that
  imports from `folders` and this package by name.

It imports the standard library alone; torch, numpy and the libraries are
the arguments an adapter passes.
"""

import argparse
import ast
import importlib.util
import os
import sys
import threading

from .subject import AdapterError, Outside, Refused

# -- the command line and __main__ -------------------------------------------


def main(path, cls, argv=None):
    """Serves class `cls` of the subject file `path` on stdin/stdout, with
    `argv` (default the command line's) for `cls.from_args`, as
    `python -m kvcheck.serve path:cls ARGS` does; returns its exit status."""
    from .serve import main as serve_main

    argv = sys.argv[1:] if argv is None else list(argv)
    return serve_main([os.path.abspath(path) + ":" + cls] + argv)


def leave(status):
    """Flushes stdout and stderr and ends the process with `status` (an
    int; None is 0, anything else 1) at once, skipping the interpreter's
    teardown: for libraries whose teardown aborts after the protocol is
    over (mlx)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else (0 if status is None else 1))


def parser(doc, prog="subject.py"):
    """An argparse parser named `prog`, described by `doc`'s first paragraph."""
    return argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])


# -- loading the library in the background ---------------------------------------


class Background:
    """`load()` running in a daemon thread from construction; `ready()` waits for its result."""

    def __init__(self, load):
        self._load = load
        self._result = None
        self._error = None
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            self._result = self._load()
        except Exception as error:  # raised again by ready(), on the first open
            self._error = error
        finally:
            self._done.set()

    def ready(self):
        """What `load()` returned; raises what it raised (every call)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


# -- dtypes ----------------------------------------------------------------------

# The config's dtype names -> the attribute names torch, mlx.core and numpy use.
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def dtype(module, name):
    """The dtype of config dtype `name` in `module` (torch, mlx.core):
    `module.float32`, `module.float16` or `module.bfloat16`. KeyError for
    a name the protocol does not have."""
    return getattr(module, DTYPES[name])


def numpy_dtype(numpy, name):
    """The numpy dtype a payload of config dtype `name` arrives as: numpy
    has no bfloat16, so bf16 is `uint16` (the bit patterns)."""
    return numpy.uint16 if name == "bf16" else dtype(numpy, name)


# -- the position twin -----------------------------------------------------------

# Row p of a twin's write is tagged p + TAG; 0 is a row no write reached.
TAG = 1


def tags(xp, start, length, dtype, offset=TAG):
    """The tags of a write `start+length` as a 1-D array of `xp` (torch,
    mlx.core, numpy): `start + offset, ..., start + length - 1 + offset`,
    in `dtype` (one that holds them exactly: float64, or float32 below 2^24)."""
    return xp.arange(length, dtype=dtype) + (start + offset)


def position(tag, offset=TAG):
    """The position a twin row's `tag` stands for; None for 0 (never written)."""
    if tag == 0:
        return None
    return int(tag) - int(offset)


def both(call, twin, real):
    """`call(twin)`, then `call(real)`, so that a call that mutates and then
    raises leaves both caches alike; returns (twin result, real result).
    The real cache's exception wins; a twin that raises where the real cache
    does not is the adapter's failure (`kvcheck.AdapterError`), never an
    answer of the cache. With `twin` None only the real cache is called
    (twin result None)."""
    twin_result, twin_error = None, None
    if twin is not None:
        try:
            twin_result = call(twin)
        except Exception as error:
            twin_error = error
    result = call(real)
    if twin_error is not None:
        raise AdapterError("the position twin raised %r but the cache did not" % twin_error)
    return twin_result, result


# -- masks -----------------------------------------------------------------------


def add_mask_option(parser, masks, what="a known difference"):
    """Adds `--mask NAME` (repeatable, default none, choices `masks`, the
    help listing what each holds back; `what` is what a mask stands for)."""
    parser.add_argument(
        "--mask",
        action="append",
        default=[],
        choices=sorted(masks),
        help="hold back requests of %s (repeatable): %s"
        % (what, "; ".join("%s: %s" % (name, masks[name][0]) for name in sorted(masks))),
    )


def held_back(masks, active, *args):
    """The first of the `active` mask names whose test holds the request
    back, as `(name, kind, reason)`, or None. Each test is called with
    `args` and returns a reason (held back) or a false value; a mask whose
    test is None is applied elsewhere (at open, by declaring less) and is
    passed over."""
    for name in active:
        _, kind, test = masks[name]
        if test is None:
            continue
        reason = test(*args)
        if reason:
            return name, kind, reason
    return None


def hold_back(masks, active, *args, refusal=Refused):
    """Raises for the request (`args`, as `held_back` passes them) the first
    active mask holds back: `refusal(kind, "--mask NAME: reason")` (default
    `kvcheck.Refused`) when the mask names the contract's kind (a callable
    kind is called with `args` for it), `kvcheck.Outside("--mask NAME:
    reason")` when its kind is None. Returns None when no mask holds it."""
    found = held_back(masks, active, *args)
    if found is None:
        return
    name, kind, reason = found
    message = "--mask %s: %s" % (name, reason)
    if kind is None:
        raise Outside(message)
    raise refusal(kind(*args) if callable(kind) else kind, message)


# -- checkouts -------------------------------------------------------------------


class Checkout:
    """A library an adapter loads from a source checkout rather than a
    registry release. Its `setup.sh` writes the marker `$VENV/<marker>`
    (`key: value` lines: `src`, the tree to load; `commit`; a patch; the
    installed versions); `$<env>` names another tree instead. `adapter` is
    the adapter's folder, `required` a file every usable tree holds,
    `project` the library's name in messages."""

    def __init__(self, adapter, marker, env, required, project):
        self.adapter, self.marker_name, self.env = adapter, marker, env
        self.required, self.project = required, project

    def marker_path(self, venv=None):
        """The marker in `venv`, else `$VENV`, else the adapter's `.venv`."""
        venv = venv or os.environ.get("VENV") or os.path.join(self.adapter, ".venv")
        return os.path.join(venv, self.marker_name)

    def is_ready(self, venv=None):
        """Whether setup.sh has completed for the venv (its marker exists)."""
        return os.path.isfile(self.marker_path(venv))

    def marker(self, venv=None):
        """The marker's `key: value` lines as a dict (OSError without one)."""
        fields = {}
        with open(self.marker_path(venv)) as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition(": ")
                if value:
                    fields[key] = value
        return fields

    def source_dir(self):
        """The tree to load, absolute: `$<env>`, else the marker's `src`;
        RuntimeError naming the setup step when neither holds `required`."""
        src = os.environ.get(self.env)
        if not src and self.is_ready():
            src = self.marker().get("src")
        if not src or not os.path.isfile(os.path.join(src, self.required)):
            raise RuntimeError(
                "no %s checkout: run adapters/%s/setup.sh with %s=checkout"
                % (self.project, os.path.basename(self.adapter), self.env)
            )
        return os.path.abspath(src)


# -- the front door: a library's entry point -------------------------------------

# What a client of an entry point sends: follow-ups, edits of any earlier
# turn, regenerates and new conversations; never a gap, never an empty
# prompt (a probe of an empty conversation), never a cut past the
# conversation's end.
FRONT_DOOR_DOMAIN = {"gaps": False, "oversized": True, "malformed": False, "probes": "after_append", "rewinds": "held"}

# The smallest config an entry point describes (growth, no window): what a
# front-door adapter's tests open.
FRONT_DOOR_CONFIG = {
    "variant": "dense", "batch": 1, "heads": 1, "head_dim": 1, "dtype": "f32", "capacity": 4,
    "sink": 0, "window": None, "growth": True, "global_sink": 0, "packed": None, "seed": 0,
}


def front_door_config(config, what):
    """Raises `kvcheck.Outside` unless `config` keeps every position visible
    (growth, no window below the capacity): `what` attends every token of
    a prompt."""
    if not config.get("growth") or (config.get("window") or config["capacity"]) < config["capacity"]:
        raise Outside(
            "%s attends every token of a prompt: only configs with growth and no window below the "
            "capacity describe it (kvcheck run --profile growth)" % what
        )


def front_door_write(subject, start, length):
    """`subject.write(start, length)` as a front-door subject gets it: every
    head, no recent window, no payload (its tokens come from the conversation)."""
    return subject.write(start, length, None, None, None, None)


class Conversation:
    """The tokens of one conversation with an entry point, as kvcheck's ops
    edit it: a write is the next prompt (`prompt`), a rewind cuts it, a reset
    starts another. Tokens are 1 .. `content`, a function of position and
    writer, so an edited turn differs from the one it replaces."""

    def __init__(self, content):
        self.content = content
        self.tokens, self.writer, self.reply = [], 0, None

    def token(self, position, writer):
        return 1 + (position * 7 + writer * 13 + (position * writer) % 5) % self.content

    def prompt(self, start, length, heads, recent_window, follow=True):
        """The prompt of write `start+length`: the first `start` tokens,
        `length` new ones, then the rest as it was. An append begins with the
        entry point's last answer when `follow` (a client continuing the
        conversation sends it back). Raises `kvcheck.Outside` for what no
        client sends."""
        if heads is not None or recent_window is not None:
            raise Outside("a request carries every head and no per-request window")
        if start < 0 or length < 0:
            raise Outside("write %d+%d: no request has a negative start or length" % (start, length))
        if start > len(self.tokens):
            raise Outside("a gap: no request leaves positions %d..%d unwritten" % (len(self.tokens), start))
        self.writer += 1
        new = [self.token(p, self.writer) for p in range(start, start + length)]
        if follow and self.reply is not None and self.reply[0] == start == len(self.tokens):
            answer = self.reply[1][:length]
            new[: len(answer)] = answer
        tokens = self.tokens[:start] + new + self.tokens[start + length:]
        if not tokens:
            raise Outside("an empty prompt: no request carries one")
        return tokens

    def answered(self, tokens, generated):
        """`tokens` was sent and answered with `generated`."""
        self.tokens, self.reply = tokens, (len(tokens), generated)

    def rewind(self, to):
        """Cuts the conversation to its first `to` tokens (Outside past its end)."""
        if to < 0 or to > len(self.tokens):
            raise Outside("rewind to %d: a conversation of %d tokens has no such prefix" % (to, len(self.tokens)))
        self.tokens = self.tokens[:to]

    def reset(self):
        self.tokens, self.reply = [], None


# -- files by path: tests and the kits ----------------------------------------------

# The checkout this package is part of (python/kvcheck/ -> the checkout), and
# its adapters/ folder: the shared scripts below, every adapter's folder.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTERS = os.path.join(CHECKOUT, "adapters")

# adapters/'s own scripts, each importing the ones before it by name: the
# contract's reference subject, the Python replayer of kvtrace/1 files, the
# clean protocol's trace generator.
SHARED = ("reference_subject", "kvtrace_replay", "clean_protocol")


def load_file(path, name):
    """The module of the Python file `path`, executed and registered as
    `sys.modules[name]` (a subject file of an adapter folder, which is no
    package; `name` keeps two adapters' `subject.py` apart)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError("cannot load %s" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_module(folder, name):
    """`folder/<name>.py` as the module `name`, as a file of `folder` run as
    a script imports it (its folder first on sys.path), without putting
    `folder` there: loaded with `load_file` unless `sys.modules[name]` is
    that file already. A file that imports a sibling by name finds it when
    the sibling was loaded first (`loader` before a pipeline adapter's
    `subject`). ImportError when `sys.modules[name]` is another file."""
    path = os.path.join(os.path.abspath(folder), name + ".py")
    module = sys.modules.get(name)
    if module is None:
        return load_file(path, name)
    loaded = getattr(module, "__file__", None)
    if loaded is None or not os.path.exists(loaded) or not os.path.samefile(loaded, path):
        raise ImportError("cannot load %s as %r: that module is %s" % (path, name, loaded or module))
    return module


def shared(name):
    """adapters/<name>.py of this checkout, `name` one of `SHARED`, loaded
    with `load_module` after the shared scripts it imports: what a test or
    a kit takes from adapters/ (the reference model, the replayer) without
    adapters/ on sys.path. RuntimeError where this package is installed
    apart from a checkout."""
    if name not in SHARED:
        raise ValueError("%r is not one of adapters/'s shared scripts %s" % (name, ", ".join(SHARED)))
    if not os.path.isfile(os.path.join(ADAPTERS, name + ".py")):
        raise RuntimeError("no %s.py in %s: kvcheck.adapter.shared needs kvcheck from a checkout" % (name, ADAPTERS))
    for each in SHARED[: SHARED.index(name) + 1]:
        module = load_module(ADAPTERS, each)
    return module


def script_env(*folders, env=None):
    """A copy of `env` (default `os.environ`) whose PYTHONPATH begins with
    `folders` and this package's folder: the environment of a child
    process (`python -c`, pytest) that imports from `folders` by name."""
    env = dict(os.environ if env is None else env)
    path = [os.path.abspath(folder) for folder in folders] + [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def class_attribute(path, class_name, attribute):
    """The literal value of `class_name.attribute` in the Python file at
    `path`, read from its source without importing it (a test that runs
    without the library the file imports). AssertionError when there is
    none."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.Assign) and getattr(item.targets[0], "id", None) == attribute:
                    return ast.literal_eval(item.value)
    raise AssertionError("no %s in %s of %s" % (attribute, class_name, path))
