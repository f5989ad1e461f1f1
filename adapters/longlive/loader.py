"""Takes LongLive's streaming KV-cache code out of a LongLive checkout.

LongLive 2.0 (github.com/NVlabs/LongLive, `main`) keeps its self-attention
KV cache as a list of per-block dicts (`k`, `v`, `global_end_index`,
`local_end_index`, `pinned_start`, `pinned_len`) and spreads the
bookkeeping over three files:

- `wan_5b/modules/causal_model.py`: `CausalWanSelfAttention.forward`
  computes the roll (sink, floating or merged pin, evicted and rolled
  tokens), builds the window attention reads, and returns a
  `cache_update_info` that `CausalWanModel._apply_cache_updates` applies
  after every block has run (and shifts a floating pin);
- `utils/wan_5b_wrapper.py`: `WanDiffusionWrapper._call_model` publishes
  the cache scalars (`global_end_index`, `local_end_index`, `pinned_start`,
  `pinned_len`) into `_CURRENT_GRID_META` before each forward;
- `pipeline/causal_diffusion_inference.py`:
  `CausalDiffusionInferencePipeline` allocates the cache
  (`_initialize_kv_cache`), sets the window and sinks on every module
  (`_set_all_modules_*`), resets it for a new video (inline in
  `inference`), pins the first chunk of a shot (`_pin_current_chunk`) and
  clears everything but the global sink for a clean re-cache on a scene cut
  (`_zero_kv_data`).

The model file is imported as it is (its package `__init__` files, which
pull the T5 tokenizer and the VAEs, are skipped by registering the packages
without running them). The pipeline and wrapper files import the text
encoder, the VAE and the schedulers at module level, so this module does not
import them: it parses them and compiles, unmodified (kvcheck.pipeline.
source), the methods above and the reset loop of `inference`, which the
adapter runs on a stand-in `self`. A checkout that lacks one is refused with
what it could not find.
"""

import importlib
import os
import sys
import types

from kvcheck.pipeline import source
from kvcheck.adapter import Checkout

HERE = os.path.dirname(os.path.abspath(__file__))

PIPELINE = os.path.join("pipeline", "causal_diffusion_inference.py")
WRAPPER = os.path.join("utils", "wan_5b_wrapper.py")
MODEL = os.path.join("wan_5b", "modules", "causal_model.py")
PACKAGES = ("wan_5b", "wan_5b.modules", "utils")

PIPELINE_METHODS = (
    "_initialize_kv_cache",
    "_set_all_modules_max_attention_size",
    "_set_all_modules_sink_size",
    "_set_all_modules_global_sink_size",
    "_pin_current_chunk",
    "_zero_kv_data",
)

# The checkout setup.sh prepared, or $LONGLIVE_SRC (kvcheck.adapter.Checkout).
CHECKOUT = Checkout(HERE, "KVCHECK_LONGLIVE_READY", "LONGLIVE_SRC", MODEL, "LongLive")
marker_path, is_ready, marker, source_dir = CHECKOUT.marker_path, CHECKOUT.is_ready, CHECKOUT.marker, CHECKOUT.source_dir


def _unused_import():
    """causal_model.py imports `x_clip_loss` from transformers and never uses
    it; transformers 5 no longer has it (LongLive pins `transformers<5`). A
    stand-in keeps the import working without installing transformers."""
    name = "transformers.models.x_clip.modeling_x_clip"
    try:
        module = importlib.import_module(name)
        if hasattr(module, "x_clip_loss"):
            return
    except ImportError:
        module = types.ModuleType(name)
        sys.modules[name] = module

    def x_clip_loss(*_args, **_kwargs):
        raise NotImplementedError("stand-in: LongLive's causal model never calls x_clip_loss")

    module.x_clip_loss = x_clip_loss


class Programs:
    """LongLive's cache code: the model module, and the pipeline's functions."""

    def __init__(self, src, model, functions, reset, pipeline_globals):
        self.src = src
        self.pipeline_globals = pipeline_globals  # the pipeline file's globals (wan_default_config goes here)
        self.model = model  # wan_5b.modules.causal_model
        self.functions = functions  # name -> function compiled from the pipeline / wrapper
        self.reset = reset  # the reset loop of `inference`, a code object

    def bind(self, obj):
        """`obj` with every compiled function bound as a method."""
        return source.bind(obj, self.functions)


def load(src=None):
    src = src or source_dir()
    source.register_packages(src, PACKAGES)
    _unused_import()
    model = importlib.import_module("wan_5b.modules.causal_model")

    path, tree = source.read(src, PIPELINE, "LongLive")
    cls = "CausalDiffusionInferencePipeline"
    *nodes, inference = source.require_methods(path, tree, cls, PIPELINE_METHODS + ("inference",))
    # `for block_index in range(len(self.kv_cache_pos)):` in the `else:` of
    # `if self.kv_cache_pos is None:` (a new video on an allocated cache).
    loop = source.else_loop(path, inference, "self.kv_cache_pos is None", "range(len(self.kv_cache_pos))",
                            "inference() has no kv_cache_pos reset loop")
    reset = source.compile_statements(path, [loop])

    wpath, wtree = source.read(src, WRAPPER, "LongLive")
    call_model = source.require_method(wpath, wtree, "WanDiffusionWrapper", "_call_model")

    import torch

    functions, namespaces = {}, []
    for file, methods in ((path, nodes), (wpath, [call_model])):
        namespace = {"torch": torch, "os": os}
        functions.update(source.compile_functions(file, methods, namespace))
        namespaces.append(namespace)
    return Programs(src, model, functions, reset, namespaces[0])
