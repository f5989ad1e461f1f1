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

The tiny model, the tap and the chunk loop's requests are the kit's
(kvcheck.pipeline.tapped); what follows is Rolling Forcing's part.

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

import sys
import types

import kvcheck
from kvcheck.pipeline import serving
from kvcheck.pipeline.tapped import LATENT_CHANNELS, TEXT_DIM, TEXT_TOKENS, TinyWanCache

import loader


class RollingForcingCache(TinyWanCache):
    """Rolling Forcing's per-block KV cache dicts (anchor block, working cache)."""

    loader = loader
    features = ()
    ops = ("reset",)

    def __init__(self, layers=2, block=None):
        super().__init__(layers)
        self.block = block
        self.name = "Rolling Forcing %s CausalWanModel kv_cache" % serving.commit(loader.CHECKOUT)
        if block is not None:
            # One block length for every video: the loop's domain is then
            # declared, so kvcheck draws only inside it.
            self.name += " (blocks of %d frames)" % block
            self.domain = serving.loop_domain(chunk=block)

    @classmethod
    def from_args(cls, argv):
        args = parse(argv)
        return cls(args.layers, args.block)

    # -- the tiny model and the cache ----------------------------------------

    def adapt_model(self, model, capacity, sink):
        for block in model.blocks:
            # The module's hard-coded sizes, in frames of one token.
            block.self_attn.frame_length, block.self_attn.block_length, block.self_attn.max_attention_size = 1, sink, capacity

    def adapt_module(self, cm):
        # RoPE is the identity here (model.freqs all 1 + 0j); the cached
        # path's rotation is replaced by the identity itself, since it
        # re-rotates the anchor on a grid of 3 frames, which a block
        # shorter than 3 frames does not fill.
        cm.causal_rope_apply = lambda x, *_a, **_k: x

    def check_config(self, config):
        sink = config["sink"]
        if sink < 1:
            raise kvcheck.Outside("sink 0: the anchor is the first block, of at least one frame")
        if self.block is not None and sink != self.block:
            raise kvcheck.Outside("sink %d: the anchor is the first block, of --block %d frames" % (sink, self.block))

    def start_video(self, config):
        torch = self.rt.torch
        # _initialize_kv_cache's dicts (it hard-codes 24 x 1560 tokens of 12 x
        # 128 heads): C + S frames of the tiny model's heads.
        size, b, heads = config["capacity"] + config["sink"], config["batch"], config["heads"]
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

    def forward(self, start, kp, vp, rerun):
        """The block `[start, start+S)`: a denoising step, or its clean re-run (`updating_cache`)."""
        torch = self.rt.torch
        b, n = kp.shape[0], kp.shape[1]
        self.hook_rows(kp, vp)
        latents = torch.randn(b, LATENT_CHANNELS, n, 2, 2).to(self.dtype)
        timestep = torch.full((b, n), 0.0 if rerun else 500.0)
        self.tiny._forward_inference(
            latents, t=timestep, context=self.context, seq_len=n, updating_cache=rerun,
            kv_cache=self.kv_cache, crossattn_cache=self.crossattn, current_start=start, cache_start=None,
        )

    # -- the loop: one block of S frames at a time ----------------------------

    def appends(self, length):
        return length == self.config["sink"]

    def refusal(self, start, length):
        block, sink = self.current, self.config["sink"]
        return ("write %d+%d: the pipeline appends one block of %d frames at the global end %d, "
                "and runs again only the current block (%s)"
                % (start, length, sink, self.global_end, "none" if block is None else "%d+%d" % (block["start"], sink)))


def parse(argv):
    parser = serving.parser(__doc__)
    serving.add_layers(parser, 2, "transformer blocks of the tiny model (default 2)")
    parser.add_argument("--block", type=int,
                        help="block_length in frames: only configs with this sink are opened, and the loop's domain"
                             " (appends and re-runs of one such block) is declared (default: any sink, no declaration)")
    return serving.parse(parser, argv, positive=("layers", "block"))



if __name__ == "__main__":
    sys.exit(serving.main(__file__, "RollingForcingCache"))
