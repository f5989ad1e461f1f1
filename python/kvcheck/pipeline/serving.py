"""Serving a pipeline library's cache as a kvcheck-subject/1 process: what
every pipeline adapter's subject.py shares around its own class.

- `runtime(loader, tap=True)`: a `kvcheck.adapter.Background` that imports
  torch (one thread), the attention tap (`kvcheck.torch.AttentionTap`)
  and runs `loader.load()`; its `ready()` is a namespace `torch`,
  `programs` (what the loader compiled) and `AttentionTap`.
- `commit(checkout)`: the checkout's commit for the subject's name (the
  marker's, else `$<NAME>_COMMIT`, else `?`), 12 characters.
- `loop_domain(chunk=None, **more)`: the `domain` a chunk loop declares:
  appends at the global end, rewrites of the latest chunk, probes after an
  append, no gaps, nothing malformed; `chunk` fixes the chunk length.
- `parser(doc)`, `add_layers(...)`, `parse(...)`: the command line
  (`prog` subject.py, the docstring's first paragraph, `--layers`, and
  the positive-integer checks).
- `main(path, cls)`: serves `cls` of the file `path` (`kvcheck.adapter.main`).
- `ChunkLoop`: which of the loop's requests a write is (`request`), and
  the outside answers to the rest; the view before any chunk (`empty_view`).
"""

import argparse
import os
import types

import kvcheck
from kvcheck.adapter import Background

# The requests of a chunk loop (Self-Forcing's and the pipelines built on
# it): a chunk appended at the global end, denoising rewrites and the clean
# re-run of exactly that chunk, the next step's read once a chunk is there.
LOOP = {"rewrites": "latest", "probes": "after_append", "gaps": False, "malformed": False}

def loop_domain(chunk=None, **more):
    """`LOOP`, with `chunks` of the one length `chunk` when given, and `more`."""
    domain = dict(LOOP)
    if chunk is not None:
        domain["chunks"] = {"lengths": [chunk]}
    domain.update(more)
    return domain


def runtime(loader, tap=True):
    """torch, the tap and `loader.load()`, loading in the background from now."""

    def load():
        import torch

        torch.set_num_threads(1)
        found = {"torch": torch}
        if tap:
            from kvcheck.torch import AttentionTap

            found["AttentionTap"] = AttentionTap
        found["programs"] = loader.load()
        return types.SimpleNamespace(**found)

    return Background(load)


def commit(checkout):
    """The commit setup.sh recorded for `checkout` (a kvcheck.adapter.Checkout),
    else `$<NAME>_COMMIT` beside its `$<NAME>_SRC`, else `?`: 12 characters."""
    try:
        return checkout.marker().get("commit", "?")[:12]
    except OSError:
        env = checkout.env[:-len("_SRC")] if checkout.env.endswith("_SRC") else checkout.env
        return os.environ.get(env + "_COMMIT", "?")[:12]


def parser(doc):
    """The subject's parser: `prog` subject.py, described by `doc`'s first paragraph."""
    return argparse.ArgumentParser(prog="subject.py", description=doc.split("\n\n")[0])


def add_layers(parser, default, help):
    parser.add_argument("--layers", type=int, default=default, help=help)


def parse(parser, argv, positive=("layers",)):
    """`parser`'s arguments; SystemExit when one of `positive` (dests) is set and below 1."""
    args = parser.parse_args(argv)
    for name in positive:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit("--%s must be at least 1" % name.replace("_", "-"))
    return args


def main(path, cls):
    """Serves class `cls` of the subject file `path` on stdin/stdout (`kvcheck.adapter.main`)."""
    from kvcheck.adapter import main as serve_file

    return serve_file(path, cls)


class ChunkLoop:
    """A subject mixin: the writes of a chunk loop. It keeps `global_end`
    and `current` (the latest chunk: `start`, `len`, and what the subject
    keeps of it); `request` names what a write is, or raises kvcheck.Outside
    for one the loop never makes: a negative number, a probe past the
    global end, a gap, an append `appends` refuses, a rewrite of anything
    but the current chunk (`refusal` says so)."""

    unit = "frame"  # what one position is, in the answers

    def request(self, start, length, k):
        """`probe` (`s+0`), `append` (at the global end) or `rewrite` (of the current chunk)."""
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no %s has a negative index or count" % (start, length, self.unit))
        g, chunk = self.global_end, self.current
        if length == 0:
            if start > g:
                raise kvcheck.Outside("zero-length write at %d past the global end %d" % (start, g))
            return "probe"
        if start == g and self.appends(length):
            return "append"
        if chunk is not None and start == chunk["start"] and length == chunk["len"]:
            return "rewrite"
        if start > g:
            raise kvcheck.Outside("write %d+%d leaves a gap after the global end %d" % (start, length, g))
        raise kvcheck.Outside(self.refusal(start, length))

    def appends(self, length):
        """Whether a chunk of `length` at the global end is one the loop
        appends (or kvcheck.Outside saying why not)."""
        return True

    def refusal(self, start, length):
        """The outside answer's text for a write the loop never makes."""
        chunk = self.current
        return "write %d+%d: only the chunk being generated (%s) is run again" % (
            start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))

    def empty_view(self):
        """What a probe reads before any chunk: no position."""
        c = self.config
        none = self.rt.torch.zeros((c["batch"], 0, c["heads"], c["head_dim"]), dtype=self.dtype)
        return [], none, none
