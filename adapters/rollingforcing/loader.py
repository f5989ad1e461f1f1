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
compiles, unmodified (kvcheck.pipeline.source), the reset loop of `inference_rolling_forcing`, which
the adapter runs on a stand-in `self`. A checkout that lacks it is refused
with what it could not find.
"""

import importlib
import os

from kvcheck.pipeline import source
from kvcheck.adapter import Checkout

HERE = os.path.dirname(os.path.abspath(__file__))

PIPELINE = os.path.join("pipeline", "rolling_forcing_inference.py")
MODEL = os.path.join("wan", "modules", "causal_model.py")
PACKAGES = ("wan", "wan.modules")

# The checkout setup.sh prepared, or $ROLLINGFORCING_SRC (kvcheck.adapter.Checkout).
CHECKOUT = Checkout(HERE, "KVCHECK_ROLLINGFORCING_READY", "ROLLINGFORCING_SRC", MODEL, "Rolling Forcing")
marker_path, is_ready, marker, source_dir = CHECKOUT.marker_path, CHECKOUT.is_ready, CHECKOUT.marker, CHECKOUT.source_dir


class Programs:
    """Rolling Forcing's cache code: the model module and the reset loop."""

    def __init__(self, src, model, reset):
        self.src = src
        self.model = model  # wan.modules.causal_model
        self.reset = reset  # the reset loop of `inference_rolling_forcing`, a code object


def load(src=None):
    src = src or source_dir()
    source.register_packages(src, PACKAGES)
    model = importlib.import_module("wan.modules.causal_model")

    path, tree = source.read(src, PIPELINE, "Rolling Forcing")
    inference = source.require_method(path, tree, "CausalInferencePipeline", "inference_rolling_forcing")
    # `for block_index in range(len(self.kv_cache_clean)):` in the `else:`
    # of `if self.kv_cache_clean is None:` (a new video on an allocated cache).
    loop = source.else_loop(path, inference, "self.kv_cache_clean is None", "range(len(self.kv_cache_clean))",
                            "inference_rolling_forcing() has no kv_cache_clean reset loop")
    return Programs(src, model, source.compile_statements(path, [loop]))
