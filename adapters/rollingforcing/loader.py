"""Takes Rolling Forcing's streaming KV-cache code out of a checkout.

Rolling Forcing (github.com/TencentARC/RollingForcing) keeps Self-Forcing's
per-block cache dict (`k`, `v`, `global_end_index`, `local_end_index`) and
spreads the bookkeeping over two files:

- `wan/modules/causal_model.py`: `CausalWanSelfAttention.forward` writes
  the first block of a forward (only when it is new, or in place when it is
  run again), rolls the cache behind the anchor (the video's first block),
  and builds what attention reads: the anchor, the working cache and the
  window's own keys for a denoising step; the last `max_attention_size`
  cached tokens for the clean re-run (`updating_cache=True`);
- `pipeline/rolling_forcing_inference.py`:
  `CausalInferencePipeline.inference_rolling_forcing` runs the windows and
  the clean re-runs, and resets the cache for a new video inline.

The model file is imported as it is (the `wan` package `__init__`, which
pulls the T5 encoder and the VAE, is skipped by registering the packages
without running them). The pipeline file imports the text encoder and the
VAE at module level, so this module does not import it: it parses it and
compiles, unmodified, the reset loop of `inference_rolling_forcing`, which
the adapter runs on a stand-in `self`. A checkout that lacks it is refused
with what it could not find.
"""

import ast
import importlib
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from subject_support import Checkout  # noqa: E402

PIPELINE = os.path.join("pipeline", "rolling_forcing_inference.py")
MODEL = os.path.join("wan", "modules", "causal_model.py")

# The checkout setup.sh prepared, or $ROLLINGFORCING_SRC (subject_support.Checkout).
CHECKOUT = Checkout(HERE, "KVCHECK_ROLLINGFORCING_READY", "ROLLINGFORCING_SRC", MODEL, "Rolling Forcing")
marker_path = CHECKOUT.marker_path
is_ready = CHECKOUT.is_ready
marker = CHECKOUT.marker
source_dir = CHECKOUT.source_dir


def _package(name, path):
    """Registers package `name` at `path` without running its __init__."""
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module


class Programs:
    """Rolling Forcing's cache code: the model module and the reset loop."""

    def __init__(self, src, model, reset):
        self.src = src
        self.model = model  # wan.modules.causal_model
        self.reset = reset  # the reset loop of `inference_rolling_forcing`, a code object


def _class(tree, name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls, name):
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return None


def _reset_loop(path, inference):
    """`for block_index in range(len(self.kv_cache_clean)):` in the `else:`
    of `if self.kv_cache_clean is None:` (a new video on an allocated cache)."""
    for node in inference.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "self.kv_cache_clean is None":
            for inner in node.orelse:
                if isinstance(inner, ast.For) and ast.unparse(inner.iter) == "range(len(self.kv_cache_clean))":
                    return inner
    raise RuntimeError("%s: inference_rolling_forcing() has no kv_cache_clean reset loop" % path)


def load(src=None):
    src = src or source_dir()
    if src not in sys.path:
        sys.path.insert(0, src)
    _package("wan", os.path.join(src, "wan"))
    _package("wan.modules", os.path.join(src, "wan", "modules"))
    model = importlib.import_module("wan.modules.causal_model")

    path = os.path.join(src, PIPELINE)
    if not os.path.isfile(path):
        raise RuntimeError("the Rolling Forcing checkout %s has no %s" % (src, PIPELINE))
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    pipeline = _class(tree, "CausalInferencePipeline")
    inference = _method(pipeline, "inference_rolling_forcing") if pipeline is not None else None
    if inference is None:
        raise RuntimeError("%s has no CausalInferencePipeline.inference_rolling_forcing" % path)
    reset = compile(ast.Module(body=[_reset_loop(path, inference)], type_ignores=[]), path, "exec")
    return Programs(src, model, reset)
