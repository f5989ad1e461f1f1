#!/usr/bin/env python3
"""Self-Forcing's KV cache (a source checkout) as a kvcheck-subject/1 process.

    python adapters/self-forcing/subject.py [--src CHECKOUT] [--layers 2]

The checkout is `--src`, else `$SELF_FORCING_SRC`, else the one setup.sh
recorded (github guandeh17/Self-Forcing; an unpacked archive names its
commit in a `KVCHECK_COMMIT` file). The shape and the op
mapping are the kit's (kvcheck.pipeline.shape); from the checkout
this compiles, unmodified:

- `CausalWanSelfAttention.forward` (`wan/modules/causal_model.py`), with
  `self.max_attention_size` from the statement of its `__init__`
  (`local_attn_size * 1560`: the frame size of 480x832, the one resolution
  the pipeline supports);
- from `CausalInferencePipeline` (`pipeline/causal_inference.py`): the
  `kv_cache_size` statement of `_initialize_kv_cache` (the buffers are
  allocated with its keys and the config's heads and head_dim, where the
  file writes Wan-1.3B's 12 and 128), the `current_start=current_start_frame
  * self.frame_seq_length` of the denoising loop, and the reset of a second
  `inference` call (the `else:` of `if self.kv_cache1 is None:`: the end
  indices set back to 0, the buffers kept).

The tiny model writes one token per latent frame, so `frame_seq_length` is
1 where the pipeline hardcodes 1560 (480x832), and `frame_seqlen` is
`math.prod(grid_sizes[0][1:])` of the grid `[n, 1, 1]`.
"""

import ast
import os
import subprocess
import sys
import types

from kvcheck.pipeline import serving, shape
# (as `extract`: `source()` below is the checkout)
from kvcheck.pipeline import source as extract
from kvcheck.pipeline.source import starts
from kvcheck.adapter import Checkout

HERE = os.path.dirname(os.path.abspath(__file__))

MODEL = os.path.join("wan", "modules", "causal_model.py")
PIPELINE = os.path.join("pipeline", "causal_inference.py")


# The checkout setup.sh recorded, or $SELF_FORCING_SRC (kvcheck.adapter.Checkout).
CHECKOUT = Checkout(HERE, "KVCHECK_SELF_FORCING_READY", "SELF_FORCING_SRC", MODEL, "Self-Forcing")


def source(src=None):
    """The checkout, absolute: `src` (--src), else CHECKOUT's
    ($SELF_FORCING_SRC, else the one setup.sh recorded); RuntimeError
    when it holds no Self-Forcing model file."""
    if not src:
        return CHECKOUT.source_dir()
    if not os.path.isfile(os.path.join(src, MODEL)):
        raise RuntimeError("--src %s is no Self-Forcing checkout: it has no %s" % (src, MODEL))
    return os.path.abspath(src)


def commit(src):
    try:
        out = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        marker = os.path.join(src, "KVCHECK_COMMIT")
        return open(marker).read().strip() if os.path.isfile(marker) else "unversioned"


class SelfForcing(shape.Flavour):
    name = "self-forcing"

    def __init__(self, torch, src):
        super().__init__(torch)
        import math

        self.where = "Self-Forcing %s" % commit(src)[:12]
        model, pipeline = os.path.join(src, MODEL), os.path.join(src, PIPELINE)
        _, tree = extract.parse(model)
        forward = extract.find_method(tree, "CausalWanSelfAttention", "forward")
        init = extract.find_method(tree, "CausalWanSelfAttention", "__init__")
        if forward is None or init is None:
            raise RuntimeError("%s has no CausalWanSelfAttention.forward / __init__" % model)
        namespace = {"torch": torch, "math": math, "causal_rope_apply": self.identity_rope,
                     "attention": self.attention}
        self.attn_forward = extract.compile_functions(model, [forward], namespace)["forward"]
        self.window = extract.compile_statements(model, extract.statements(
            model, init.body, [starts("self.max_attention_size = ")], "max_attention_size"))

        _, ptree = extract.parse(pipeline)
        cls = "CausalInferencePipeline"
        allocate = extract.find_method(ptree, cls, "_initialize_kv_cache")
        inference = extract.find_method(ptree, cls, "inference")
        if allocate is None or inference is None:
            raise RuntimeError("%s has no %s._initialize_kv_cache / inference" % (pipeline, cls))
        self.cache_size = extract.compile_statements(pipeline, extract.statements(
            pipeline, allocate.body, [lambda s: s.startswith("if self.local_attn_size != -1:") and "kv_cache_size" in s],
            "kv_cache_size"))
        self.start_expr = extract.expression(pipeline, extract.keyword_in(inference, "current_start"))
        branch = [node for node in extract.walk_statements(inference.body)
                  if isinstance(node, ast.If) and ast.unparse(node.test) == "self.kv_cache1 is None"]
        if len(branch) != 1 or not branch[0].orelse:
            raise RuntimeError("%s: inference has no `if self.kv_cache1 is None: ... else: <reset>`" % pipeline)
        self.reset_code = extract.compile_statements(pipeline, branch[0].orelse)

    def sizes(self, config, layers):
        torch = self.torch
        heads, head_dim, batch = config["heads"], config["head_dim"], config["batch"]
        self.pipeline = types.SimpleNamespace(local_attn_size=config["capacity"], frame_seq_length=1,
                                              num_transformer_blocks=layers)
        ns = {"self": self.pipeline}
        exec(self.cache_size, ns)
        size = ns["kv_cache_size"]
        self.caches = [{
            "k": torch.zeros([batch, size, heads, head_dim], dtype=self.dtype),
            "v": torch.zeros([batch, size, heads, head_dim], dtype=self.dtype),
            "global_end_index": torch.tensor([0], dtype=torch.long),
            "local_end_index": torch.tensor([0], dtype=torch.long),
        } for _ in range(layers)]
        self.pipeline.kv_cache1 = self.caches
        self.pipeline.crossattn_cache = [{"is_init": True} for _ in range(layers)]
        self.rows = None
        identity = lambda x: x  # noqa: E731
        self.attn_self = types.SimpleNamespace(
            num_heads=heads, head_dim=head_dim, local_attn_size=config["capacity"], sink_size=config["sink"],
            q=identity, k=identity, v=lambda _x: self.rows, o=identity, norm_q=identity, norm_k=identity,
        )
        exec(self.window, {"self": self.attn_self, "local_attn_size": config["capacity"]})

    def forward(self, layer, cache, start_frame, k, v):
        torch = self.torch
        n = k.shape[1]
        self.rows = shape.flatten_heads(v)
        current_start = eval(self.start_expr, {"current_start_frame": start_frame, "self": self.pipeline})
        self.attn_forward(self.attn_self, shape.flatten_heads(k), torch.tensor([n]), torch.tensor([[n, 1, 1]]),
                          None, None, cache, current_start)

    def reset(self):
        """A second `inference` call: the pipeline's own reset of `kv_cache1`."""
        exec(self.reset_code, {"self": self.pipeline, "torch": self.torch,
                               "noise": self.torch.zeros(1)})
        self.caches = self.pipeline.kv_cache1


class SelfForcingCache(shape.ShapeCache):
    """Self-Forcing's `kv_cache1` (see the module docstring)."""

    def __init__(self, src=None, layers=2):
        src = source(src)
        super().__init__(lambda torch: SelfForcing(torch, src), layers)
        self.name = "Self-Forcing %s kv_cache1" % commit(src)[:12]

    @classmethod
    def from_args(cls, argv):
        args = parse(argv)
        return cls(args.src, args.layers)


def parse(argv):
    parser = serving.parser(__doc__)
    parser.add_argument("--src", help="the Self-Forcing checkout (default $SELF_FORCING_SRC)")
    serving.add_layers(parser, 2, "transformer blocks (default 2)")
    return serving.parse(parser, argv)


if __name__ == "__main__":
    sys.exit(serving.main(__file__, "SelfForcingCache"))
