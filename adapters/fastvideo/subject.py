#!/usr/bin/env python3
"""fastvideo's Self-Forcing-style KV caches as kvcheck-subject/1 processes.

    python adapters/fastvideo/subject.py --model causal-wan [--latent 2x2] [--layers 2]
    python adapters/fastvideo/subject.py --model lingbot-world2 [--layers 2]
    python adapters/fastvideo/subject.py --model dreamx-world [--layers 2]

The shape, and how kvtrace ops drive it, is kvcheck.pipeline.shape;
this file says where fastvideo (0.2.1 by default, adapters/fastvideo/setup.sh)
keeps it. Nothing of fastvideo is imported (the package pulls in a
distributed runtime and compiled kernels): the files are parsed and their
statements compiled, unmodified, out of the installed package.

**`causal-wan`**: `CausalWanSelfAttention.forward`
(`models/dits/causal_wanvideo.py`) with the cache sizes of the causal
denoising stages (`pipelines/stages/causal_denoising.py`,
`CausalDMDDenosingStage`, which `CausalDenoisingStage` extends):

- `_initialize_kv_cache` (compiled) allocates `local_attn_size *
  self.frame_seq_length` slots per block;
- `self.frame_seq_length` comes from the stage's own statements
  (`latent_seq_length = ...`, `patch_ratio = ...`,
  `self.frame_seq_length = latent_seq_length // patch_ratio`) on the
  latent of `--latent HxW` with Wan's patch `(1, 2, 2)`;
- every chunk's `current_start` is the stage's
  `(pos_start_base + start_index) * self.frame_seq_length`;
- the blocks' `frame_seqlen` is the model's
  `post_patch_height * post_patch_width` (`_forward_inference`'s
  statements), the tokens one latent frame writes.

`--latent` picks the latent's height and width (each 2 or 3, so that a frame
is one token after the `2x2` patch): `2x2` is a latent of even sides
(480x832 video gives 60x104), `3x3` one of odd sides (a height or width that
is a multiple of 8 but not of 16, e.g. 360 gives 45).

**`lingbot-world2`**: LingBot-World 2's `CausalWanSelfAttention.forward`
(`models/dits/lingbotworld2/causal_fast.py`) with the sizes of
`LingBotWorld2CausalFastGenerationStage.forward`
(`pipelines/basic/lingbotworld2/causal_fast_pipeline.py`): `frame_seqlen`,
`kv_size`, `_initialize_self_kv_cache` (compiled; called with the config's
batch, where the stage passes 1), `current_start = chunk_id * chunk_size *
frame_seqlen` (evaluated for the chunk's first frame, which is what it is
for the pipeline's equal chunks) and `max_attention_size = kv_size`.

**`dreamx-world`**: DreamX-World's `CausalWanSelfAttention.forward`
(`models/dits/dreamx_world_ar.py`), which computes each block's update on a
copy and returns it, `DreamXWorldARTransformer3DModel._apply_cache_updates`,
which applies them after the last block, the file's `attention`, and
`self.max_attention_size` from `__init__`; with the sizes of
`DreamXWorldARCausalDenoisingStage` (`pipelines/basic/dreamx_world/ar_denoising.py`):
its per-side `frame_seq_length`, `_initialize_kv_cache` and
`current_start=start * frame_seq_length`. The camera (PRoPE) cache is not
driven (the tiny model has no camera attention).
"""

import argparse
import os
import sys
import types

from kvcheck.pipeline import serving, shape, source
from kvcheck.pipeline.source import module_constant, starts

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_VERSION = "0.2.1"
WAN_PATCH = (1, 2, 2)  # WanVideoConfig's patch_size


def package_dir():
    """The installed `fastvideo` package directory, without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("fastvideo")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("fastvideo is not installed: run adapters/fastvideo/setup.sh")
    return list(spec.submodule_search_locations)[0]


def installed_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fastvideo")
    except PackageNotFoundError:
        return None


class CausalWan(shape.Flavour):
    """fastvideo's causal Wan (`CausalWanTransformer3DModel`) and its stages."""

    name = "causal-wan"

    def __init__(self, torch, latent=(2, 2)):
        super().__init__(torch)
        root = package_dir()
        self.where = "fastvideo %s" % installed_version()
        self.latent = latent
        model = os.path.join(root, "models", "dits", "causal_wanvideo.py")
        stage = os.path.join(root, "pipelines", "stages", "causal_denoising.py")
        relative = os.path.join(root, "models", "dits", "_relative_rope.py")
        import math

        _, tree = source.parse(model)
        _, rtree = source.parse(relative)
        offsets = source.compile_functions(relative, [source.find_function(rtree, "relativistic_window_offsets")], {})
        forward = source.find_method(tree, "CausalWanSelfAttention", "forward")
        if forward is None:
            raise RuntimeError("%s has no CausalWanSelfAttention.forward" % model)
        namespace = {
            "torch": torch,
            "math": math,
            "_apply_rotary_emb": self.identity_rope,
            "relativistic_window_offsets": offsets["relativistic_window_offsets"],
            "GLOBAL_ATTN_COMPAT_MAX_LATENT_FRAMES": module_constant(model, tree, "GLOBAL_ATTN_COMPAT_MAX_LATENT_FRAMES"),
        }
        self.attn_forward = source.compile_functions(model, [forward], namespace)["forward"]
        inference = source.find_method(tree, "CausalWanTransformer3DModel", "_forward_inference")
        self.model_sizes = source.compile_statements(model, source.statements(model, inference.body, [
            starts("batch_size, num_channels, num_frames, height, width = hidden_states.shape"),
            starts("p_t, p_h, p_w = self.patch_size"),
            starts("post_patch_height = "),
            starts("post_patch_width = "),
        ], "the model's frame size"))
        self.frame_seqlen_expr = source.expression(model, source.dict_value_in(inference, "frame_seqlen"))

        _, stree = source.parse(stage)
        stage_forward = source.find_method(stree, "CausalDMDDenosingStage", "forward")
        # `self.frame_seq_length = ...` and the statements before it that it reads
        # (the release computes it from `latent_seq_length` and `patch_ratio`).
        self.stage_sizes = source.compile_statements(stage, source.statements(stage, stage_forward.body, [
            starts("latent_seq_length = "),
            starts("patch_ratio = "),
            starts("self.frame_seq_length = "),
        ], "the stage's frame_seq_length", optional=2))
        self.start_expr = source.expression(stage, source.keyword_in(stage_forward, "current_start"))
        init = source.find_method(stree, "CausalDMDDenosingStage", "_initialize_kv_cache")
        self.initialize = source.compile_functions(stage, [init], {"torch": torch})["_initialize_kv_cache"]

    def sizes(self, config, layers):
        torch = self.torch
        h, w = self.latent
        latents = torch.zeros(config["batch"], 1, 1, h, w)
        patch = types.SimpleNamespace(arch_config=types.SimpleNamespace(patch_size=WAN_PATCH))
        self.stage = types.SimpleNamespace(
            transformer=types.SimpleNamespace(config=patch, num_attention_heads=config["heads"],
                                              attention_head_dim=config["head_dim"]),
            local_attn_size=config["capacity"],
            sliding_window_num_frames=21,  # WanVideoConfig's default; read only when local_attn_size is -1
            num_transformer_blocks=layers,
        )
        exec(self.stage_sizes, {"self": self.stage, "batch": types.SimpleNamespace(latents=latents)})
        model_ns = {"self": types.SimpleNamespace(patch_size=WAN_PATCH), "hidden_states": latents}
        exec(self.model_sizes, model_ns)
        self.frame_seqlen = eval(self.frame_seqlen_expr, model_ns)
        if self.frame_seqlen != 1:
            raise RuntimeError("--latent %dx%d makes %d tokens per frame; the adapter needs 1" % (h, w, self.frame_seqlen))
        self.caches = self.initialize(self.stage, batch_size=config["batch"], dtype=self.dtype, device="cpu")
        self.attn_self = types.SimpleNamespace(local_attn_size=config["capacity"], sink_size=config["sink"],
                                               rope_cache_policy="absolute", attn=self.attention)

    def forward(self, layer, cache, start_frame, k, v):
        current_start = eval(self.start_expr, {"pos_start_base": 0, "start_index": start_frame, "self": self.stage})
        self.attn_forward(self.attn_self, k, k, v, (None, None), None, cache, current_start, None,
                          frame_seqlen=self.frame_seqlen)


class LingBotWorld2(shape.Flavour):
    """LingBot-World 2 causal-fast (`LingBotWorld2CausalFastTransformer3DModel`)."""

    name = "lingbot-world2"

    def __init__(self, torch):
        super().__init__(torch)
        root = package_dir()
        self.where = "fastvideo %s" % installed_version()
        model = os.path.join(root, "models", "dits", "lingbotworld2", "causal_fast.py")
        stage = os.path.join(root, "pipelines", "basic", "lingbotworld2", "causal_fast_pipeline.py")
        import math

        _, tree = source.parse(model)
        forward = source.find_method(tree, "CausalWanSelfAttention", "forward")
        if forward is None:
            raise RuntimeError("%s has no CausalWanSelfAttention.forward" % model)
        namespace = {
            "torch": torch,
            "math": math,
            "causal_rope_apply": self.identity_rope,
            "get_sp_world_size": lambda: 1,
            "attention": self.attention,
        }
        self.attn_forward = source.compile_functions(model, [forward], namespace)["forward"]
        _, stree = source.parse(stage)
        cls = "LingBotWorld2CausalFastGenerationStage"
        stage_forward = source.find_method(stree, cls, "forward")
        self.stage_sizes = source.compile_statements(stage, source.statements(stage, stage_forward.body, [
            starts("frame_seqlen = "),
            starts("kv_size = "),
        ], "the stage's kv_size"))
        self.start_expr = source.expression(stage, source.dict_value_in(stage_forward, "current_start"))
        self.window_expr = source.expression(stage, source.dict_value_in(stage_forward, "max_attention_size"))
        init = source.find_method(stree, cls, "_initialize_self_kv_cache")
        self.initialize = source.compile_functions(stage, [init], {"torch": torch, "get_sp_world_size": lambda: 1})[
            "_initialize_self_kv_cache"]

    def sizes(self, config, layers):
        torch = self.torch
        # the stage rounds the latent's sides to the patch (2): a 2x2 latent is one token per frame
        noise = torch.zeros(16, 1, 2, 2)
        self.ns = {"noise": noise, "cfg": types.SimpleNamespace(local_attn_size=config["capacity"]), "lat_f": 1}
        exec(self.stage_sizes, self.ns)
        self.frame_seqlen = self.ns["frame_seqlen"]
        heads, head_dim = config["heads"], config["head_dim"]
        stage = types.SimpleNamespace(transformer=types.SimpleNamespace(dim=heads * head_dim, num_heads=heads,
                                                                        num_layers=layers))
        self.caches = self.initialize(stage, config["batch"], self.ns["kv_size"], self.dtype, "cpu")
        self.rows = None
        identity = lambda x: x  # noqa: E731
        self.attn_self = types.SimpleNamespace(
            num_heads=heads, head_dim=head_dim, local_attn_size=config["capacity"], sink_size=config["sink"],
            q=identity, k=identity, v=lambda _x: self.rows, o=identity, norm_q=identity, norm_k=identity,
        )

    def forward(self, layer, cache, start_frame, k, v):
        torch = self.torch
        b, n, h, d = k.shape
        self.rows = shape.flatten_heads(v)
        ns = dict(self.ns, chunk_id=start_frame, chunk_size=1)
        self.attn_forward(
            self.attn_self, shape.flatten_heads(k), torch.tensor([n]), torch.tensor([[n, 1, 1]]), None, cache,
            current_start=eval(self.start_expr, ns), max_attention_size=eval(self.window_expr, ns),
            frame_seqlen=self.frame_seqlen,
        )


class DreamXWorld(shape.Flavour):
    """DreamX-World's autoregressive model (`DreamXWorldARTransformer3DModel`):
    attention computes the update on a copy and the model applies every
    block's update after the last block (`_apply_cache_updates`)."""

    name = "dreamx-world"

    def __init__(self, torch):
        super().__init__(torch)
        root = package_dir()
        self.where = "fastvideo %s" % installed_version()
        model = os.path.join(root, "models", "dits", "dreamx_world_ar.py")
        stage = os.path.join(root, "pipelines", "basic", "dreamx_world", "ar_denoising.py")
        import math

        _, tree = source.parse(model)
        forward = source.find_method(tree, "CausalWanSelfAttention", "forward")
        init = source.find_method(tree, "CausalWanSelfAttention", "__init__")
        apply = source.find_method(tree, "DreamXWorldARTransformer3DModel", "_apply_cache_updates")
        attention = source.find_function(tree, "attention")
        if forward is None or init is None or apply is None or attention is None:
            raise RuntimeError("%s has no CausalWanSelfAttention.forward / __init__, "
                               "DreamXWorldARTransformer3DModel._apply_cache_updates or attention" % model)
        # The file's own attention (plain scaled_dot_product_attention, seen by the tap).
        namespace = {"torch": torch, "math": math, "F": torch.nn.functional,
                     "block_relativistic_rope": self.identity_rope}
        functions = source.compile_functions(model, [attention, forward, apply], namespace)
        self.attn_forward, self.apply = functions["forward"], functions["_apply_cache_updates"]
        self.window = source.compile_statements(model, source.statements(
            model, init.body, [starts("self.max_attention_size = ")], "max_attention_size"))

        _, stree = source.parse(stage)
        cls = "DreamXWorldARCausalDenoisingStage"
        stage_forward = source.find_method(stree, cls, "forward")
        self.stage_sizes = source.compile_statements(stage, source.statements(
            stage, stage_forward.body, [starts("frame_seq_length = ")], "the stage's frame_seq_length"))
        self.start_expr = source.expression(stage, source.keyword_in(stage_forward, "current_start"))
        init_cache = source.find_method(stree, cls, "_initialize_kv_cache")
        self.initialize = source.compile_functions(stage, [init_cache], {"torch": torch})["_initialize_kv_cache"]

    def sizes(self, config, layers):
        torch = self.torch
        heads, head_dim = config["heads"], config["head_dim"]
        # a 2x2 latent through the (1, 2, 2) patch: one token per frame
        transformer = types.SimpleNamespace(patch_size=WAN_PATCH, num_attention_heads=heads,
                                            attention_head_dim=head_dim, blocks=[])
        self.stage = types.SimpleNamespace(transformer=transformer, local_attn_size=config["capacity"],
                                           num_transformer_blocks=layers)
        ns = {"self": self.stage, "latents": torch.zeros(config["batch"], 1, 1, 2, 2)}
        exec(self.stage_sizes, ns)
        self.frame_seq_length = ns["frame_seq_length"]
        self.caches = self.initialize(self.stage, config["batch"], self.dtype, "cpu", self.frame_seq_length)
        self.rows = None
        self.updates = []
        identity = lambda x: x  # noqa: E731
        self.attn_self = types.SimpleNamespace(
            num_heads=heads, head_dim=head_dim, local_attn_size=config["capacity"], sink_size=config["sink"],
            q=lambda x: (x, None), k=lambda x: (x, None), v=lambda _x: (self.rows, None), o=lambda x: (x, None),
            norm_q=identity, norm_k=identity,
        )
        exec(self.window, {"self": self.attn_self, "local_attn_size": config["capacity"]})

    def forward(self, layer, cache, start_frame, k, v):
        torch = self.torch
        n = k.shape[1]
        self.rows = shape.flatten_heads(v)
        current_start = eval(self.start_expr, {"start": start_frame, "frame_seq_length": self.frame_seq_length})
        _, update = self.attn_forward(self.attn_self, shape.flatten_heads(k), torch.tensor([n]),
                                      torch.tensor([[n, 1, 1]]), None, cache, current_start)
        self.updates.append((layer, update))

    def after_forward(self):
        # the transformer's forward, after its last block (cache_update_policy "commit_detached")
        updates, self.updates = self.updates, []
        self.apply(None, self.caches, updates)


class FastvideoCache(shape.ShapeCache):
    """fastvideo's Self-Forcing-style `kv_cache` dicts (see the module docstring)."""

    def __init__(self, model="causal-wan", latent=(2, 2), layers=2):
        if model == "causal-wan":
            factory = lambda torch: CausalWan(torch, latent)  # noqa: E731
            label = "causal-wan (latent %dx%d)" % latent
        elif model == "dreamx-world":
            factory, label = DreamXWorld, "dreamx-world"
        else:
            factory, label = LingBotWorld2, "lingbot-world2"
        super().__init__(factory, layers)
        self.name = "fastvideo %s %s" % (installed_version() or "?", label)

    @classmethod
    def from_args(cls, argv):
        args = parse(argv)
        return cls(args.model, args.latent, args.layers)


def latent_size(text):
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("HxW, e.g. 2x2")
    if h not in (2, 3) or w not in (2, 3):
        raise argparse.ArgumentTypeError("each side 2 or 3 (one token per frame after the 2x2 patch)")
    return h, w


def parse(argv):
    parser = serving.parser(__doc__)
    parser.add_argument("--model", choices=("causal-wan", "lingbot-world2", "dreamx-world"), default="causal-wan")
    parser.add_argument("--latent", type=latent_size, default=(2, 2),
                        help="causal-wan: the latent's HxW, sides 2 or 3 (default 2x2)")
    serving.add_layers(parser, 2, "transformer blocks (default 2)")
    return serving.parse(parser, argv)


if __name__ == "__main__":
    sys.exit(serving.main(__file__, "FastvideoCache"))
