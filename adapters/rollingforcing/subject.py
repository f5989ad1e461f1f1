#!/usr/bin/env python3
"""Rolling Forcing's streaming KV cache as a kvcheck-subject/1 process.

    python adapters/rollingforcing/subject.py [--layers 2] [--block N]

The cache of a Rolling Forcing checkout (adapters/rollingforcing/setup.sh,
ROLLINGFORCING_SRC), driven through its own `CausalWanModel` (randomly
initialised, tiny: two blocks, no weights, CPU) and the reset loop of
`CausalInferencePipeline.inference_rolling_forcing`, which loader.py
compiles unmodified out of `pipeline/rolling_forcing_inference.py`:

| kvtrace op | Rolling Forcing calls |
|---|---|
| open | the tiny model; on every self-attention module `frame_length = 1`, `block_length = S`, `max_attention_size = C`; the cache dicts of `_initialize_kv_cache` at `C + S` frames |
| append `G+S` | the denoising forward of a one-block window whose block starts at `G`: `_forward_inference(..., kv_cache, current_start=G)` |
| rewrite of the current block (same start, `S` frames) | the clean re-run: the same call with `updating_cache=True` |
| write `s+0` (the probe) | the clean re-run of the current block with the rows it holds; before any block, an empty view |
| reset | the reset loop of `inference_rolling_forcing` (a new video on the allocated cache) |

One position is one latent frame (`1 x 2 x 2` latents, patch `(1, 2, 2)`:
one token per frame). The release hard-codes `frame_length = 1560`
tokens, `block_length = 3` frames and `max_attention_size = 21` frames on
each module, and `_initialize_kv_cache` allocates 24 frames (of the 1.3B
model's 12 x 128 heads): the anchor is the first block, the contract's
sink `S = block_length`; the window read is `max_attention_size`, the
contract's capacity `C`; the allocation keeps the release's margin of one
block, `C + S` frames. A window of one block (`num_denoising_steps = 1`)
makes a denoising read a function of the cache alone: the anchor, the
`C - 2S` frames before the block, and the block.

**Visible means what attention reads.** The attention tap
(`kvcheck.torch`) records each block's self-attention call and identifies
every key by the bytes of its K and V rows among the rows the writes
produced. A forward hook on each block's `self_attn.norm_k` returns the
write's K rows and one on `self_attn.v` its V rows; RoPE is the identity
rotation (`model.freqs` all `1 + 0j`; `causal_rope_apply`, which
re-rotates the anchor on a grid of 3 frames, the identity function), so the
rows reach attention unchanged. Each head carries
`2 * head_dim` channels (the model needs an even head width), the write's
first and zeros after, which the view leaves out. Two pieces that do not
touch the self-attention cache are replaced: the cross-attention (which
calls flash-attention, CUDA only) returns zeros, and `attention` (the SDPA
fallback, which casts to bf16 by default) keeps the rows' dtype. Every
block must read the keys the last block read (`kvcheck.torch.LayerMismatch`);
a key whose rows no write produced raises `kvcheck.torch.UnknownRows`.

Requests the pipeline cannot make are answered as outside its domain
(`kvcheck.Outside`): a sink of 0 (the anchor is a block), an
append that is not one block of `S` frames at the global end, a rewrite of
anything but the current block, a gap, negative numbers. Left out of
`hello`: `evict`, `pin`, `rewind`, head ranges, windows, growth and the
packed variant. Since the block length is the config's sink, no one
declaration holds for every config; `--block N` fixes it (a config with
another sink is outside at open) and declares the loop's domain: appends
of `N` frames, `rewrites` of the latest block, `probes` after an append,
no gaps, nothing malformed. Without it no domain is declared and each
outside answer cuts its case.
"""

import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import kvcheck  # noqa: E402
import kvcheck.serve  # noqa: E402
import loader  # noqa: E402
from subject_support import Background  # noqa: E402

LATENT_CHANNELS = 2
TEXT_DIM = 4
TEXT_TOKENS = 2



def _load():
    import torch

    torch.set_num_threads(1)
    from kvcheck.torch import AttentionTap

    programs = loader.load()
    return types.SimpleNamespace(torch=torch, programs=programs, AttentionTap=AttentionTap)


def _commit():
    try:
        return loader.marker().get("commit", "?")[:12]
    except OSError:
        return os.environ.get("ROLLINGFORCING_COMMIT", "?")[:12]


class RollingForcingCache(kvcheck.Subject):
    """Rolling Forcing's per-block KV cache dicts (anchor block, working cache)."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    features = ()
    ops = ("reset",)

    def __init__(self, layers=2, block=None):
        self.layers = layers
        self.block = block
        self.name = "Rolling Forcing %s CausalWanModel kv_cache" % _commit()
        if block is not None:
            # One block length for every video: the loop's domain is then
            # declared, so kvcheck draws only inside it.
            self.name += " (blocks of %d frames)" % block
            self.domain = {"rewrites": "latest", "chunks": {"lengths": [block]}, "probes": "after_append",
                           "gaps": False, "malformed": False}
        self.runtime = Background(_load)
        self.models = {}
        self.tap = None

    # -- the tiny model ------------------------------------------------------

    def model(self, heads, width, capacity, sink):
        key = (heads, width, capacity, sink)
        if key in self.models:
            return self.models[key]
        rt = self.rt
        torch, cm = rt.torch, rt.programs.model
        torch.manual_seed(0)
        model = cm.CausalWanModel(
            model_type="t2v", patch_size=(1, 2, 2), text_len=TEXT_TOKENS, in_dim=LATENT_CHANNELS,
            dim=heads * width, ffn_dim=8, freq_dim=8, text_dim=TEXT_DIM, out_dim=LATENT_CHANNELS,
            num_heads=heads, num_layers=self.layers,
        )
        model.eval()
        # RoPE as the identity rotation: the rows reach attention as written.
        model.freqs = torch.ones_like(model.freqs)
        for block in model.blocks:
            attn = block.self_attn
            # The module's hard-coded sizes, in frames of one token.
            attn.frame_length, attn.block_length, attn.max_attention_size = 1, sink, capacity
            attn.norm_k.register_forward_hook(lambda _m, _i, _o: self.rows[0])
            attn.v.register_forward_hook(lambda _m, _i, _o: self.rows[1])
            attn.register_forward_pre_hook(lambda _m, *_a: self.calls.append(len(self.tap.calls)))
            # flash-attention only (CUDA); the self-attention cache never sees it.
            block.cross_attn.forward = lambda x, *_a, **_k: torch.zeros_like(x)
        model.register_forward_pre_hook(lambda _m, *_a: self.calls.clear())
        self.models[key] = model
        return model

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch, cm = rt.torch, rt.programs.model
        heads, d = config["heads"], config["head_dim"]
        capacity, sink = config["capacity"], config["sink"]
        if sink < 1:
            raise kvcheck.Outside("sink 0: the anchor is the first block, of at least one frame")
        if self.block is not None and sink != self.block:
            raise kvcheck.Outside("sink %d: the anchor is the first block, of --block %d frames" % (sink, self.block))
        if not getattr(cm, "_kvcheck_attention", False):
            # RoPE is the identity here (model.freqs all 1 + 0j); the cached
            # path's rotation is replaced by the identity itself, since it
            # re-rotates the anchor on a grid of 3 frames, which a block
            # shorter than 3 frames does not fill.
            cm.causal_rope_apply = lambda x, *_a, **_k: x
            # The SDPA fallback casts to bf16 unless told the dtype: keep the rows'.
            real = cm.attention
            cm.attention = lambda q, k, v, **kw: real(q, k, v, **dict(kw, dtype=q.dtype))
            cm._kvcheck_attention = True
        self.config = config
        self.dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[config["dtype"]]
        self.width = 2 * d
        model = self.model(heads, self.width, capacity, sink).to(self.dtype)
        self.tap = self.tap or rt.AttentionTap()
        self.tap.forget()
        self.calls, self.rows = [], None
        self.global_end = 0
        self.current = None  # the latest block: start and the rows it holds
        # _initialize_kv_cache's dicts (it hard-codes 24 x 1560 tokens of 12 x
        # 128 heads): C + S frames of the tiny model's heads.
        size, b = capacity + sink, config["batch"]
        self.kv_cache = [{
            "k": torch.zeros([b, size, heads, self.width], dtype=self.dtype),
            "v": torch.zeros([b, size, heads, self.width], dtype=self.dtype),
            "global_end_index": torch.tensor([0], dtype=torch.long),
            "local_end_index": torch.tensor([0], dtype=torch.long),
        } for _ in range(self.layers)]
        self.crossattn = [{"is_init": False} for _ in range(self.layers)]
        self.pipe = types.SimpleNamespace(kv_cache_clean=self.kv_cache, crossattn_cache=self.crossattn,
                                          num_transformer_blocks=self.layers)
        generator = torch.Generator().manual_seed(1)
        self.context = torch.randn(b, TEXT_TOKENS, TEXT_DIM, generator=generator).to(self.dtype)

    # -- one forward ---------------------------------------------------------

    def padded(self, rows):
        """`[B, n, H, D]` -> `[B, n, H, 2D]` (zeros after the first D)."""
        b, n, h, d = rows.shape
        out = self.rt.torch.zeros((b, n, h, self.width), dtype=self.dtype)
        out[..., :d] = rows.to(self.dtype)
        return out

    def forward(self, start, kp, vp, updating_cache):
        """The block `[start, start+S)`: a denoising step, or its clean re-run."""
        torch = self.rt.torch
        b, n = kp.shape[0], kp.shape[1]
        self.rows = (kp.reshape(b, n, -1), vp.reshape(b, n, -1))
        model = self.models[(self.config["heads"], self.width, self.config["capacity"], self.config["sink"])]
        latents = torch.randn(b, LATENT_CHANNELS, n, 2, 2).to(self.dtype)
        timestep = torch.full((b, n), 0.0 if updating_cache else 500.0)
        model._forward_inference(
            latents, t=timestep, context=self.context, seq_len=n, updating_cache=updating_cache,
            kv_cache=self.kv_cache, crossattn_cache=self.crossattn, current_start=start, cache_start=None,
        )

    def observe(self, action):
        """Runs `action` inside the tap; the view the last block's
        self-attention read, which every other block must have read too."""
        tap = self.tap
        tap.begin_step()
        tap.clear_calls()
        with tap, self.rt.torch.no_grad():
            action()
        positions, k, v = tap.agreed_view(self.calls)
        d = self.config["head_dim"]
        return positions, k[..., :d], v[..., :d]

    def run_block(self, start, kp, vp, updating_cache):
        self.tap.produced(start, kp, vp)
        self.forward(start, kp, vp, updating_cache)

    # -- ops -----------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no frame has a negative index or count" % (start, length))
        g, block, sink = self.global_end, self.current, self.config["sink"]
        if length == 0:
            if start > g:
                raise kvcheck.Outside("zero-length write at %d past the global end %d" % (start, g))
            if block is None:
                c = self.config
                none = self.rt.torch.zeros((c["batch"], 0, c["heads"], c["head_dim"]), dtype=self.dtype)
                return [], none, none
            return self.observe(lambda: self.run_block(block["start"], block["k"], block["v"], True))
        kp, vp = self.padded(k), self.padded(v)
        if start == g and length == sink:
            # The adapter's own state changes only once the forward has run.
            seen = self.observe(lambda: self.run_block(start, kp, vp, False))
            self.current = {"start": start, "k": kp, "v": vp}
            self.global_end = start + length
            return seen
        if block is not None and start == block["start"] and length == sink:
            seen = self.observe(lambda: self.run_block(start, kp, vp, True))
            block["k"], block["v"] = kp, vp
            return seen
        if start > g:
            raise kvcheck.Outside("write %d+%d leaves a gap after the global end %d" % (start, length, g))
        raise kvcheck.Outside(
            "write %d+%d: the pipeline appends one block of %d frames at the global end %d, "
            "and runs again only the current block (%s)"
            % (start, length, sink, g, "none" if block is None else "%d+%d" % (block["start"], sink))
        )

    def reset(self):
        torch = self.rt.torch
        namespace = {"self": self.pipe, "torch": torch, "noise": torch.zeros(1)}  # the loop reads noise.device
        exec(self.rt.programs.reset, namespace)
        self.tap.forget()
        self.global_end = 0
        self.current = None


def parse(argv):
    parser = argparse.ArgumentParser(prog="subject.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks of the tiny model (default 2)")
    parser.add_argument("--block", type=int,
                        help="block_length in frames: only configs with this sink are opened, and the loop's domain"
                             " (appends and re-runs of one such block) is declared (default: any sink, no declaration)")
    args = parser.parse_args(argv)
    if args.layers < 1:
        raise SystemExit("--layers must be at least 1")
    if args.block is not None and args.block < 1:
        raise SystemExit("--block must be at least 1")
    return args


def _from_args(cls, argv):
    args = parse(argv)
    return cls(args.layers, args.block)


RollingForcingCache.from_args = classmethod(_from_args)


if __name__ == "__main__":
    sys.exit(kvcheck.serve.main([os.path.abspath(__file__) + ":RollingForcingCache"] + sys.argv[1:]))
