#!/usr/bin/env python3
"""LongLive 2.0's streaming KV cache as a kvcheck-subject/1 process.

    python adapters/longlive/subject.py [--layers 2] [--relative-rope] [--mask chunk-fit]

The cache of a LongLive checkout (adapters/longlive/setup.sh,
LONGLIVE_SRC), driven through its own `CausalWanModel` (randomly
initialised, tiny: two blocks, no weights, CPU), the wrapper's
`_call_model` that publishes the cache scalars before each forward, and the
pipeline methods that keep the cache between forwards, which loader.py
compiles unmodified out of `pipeline/causal_diffusion_inference.py`:

| kvtrace op | LongLive calls |
|---|---|
| open | the tiny model (`local_attn_size = C`, `sink_size = S`); a stand-in pipeline with `local_attn_size = C`, `sink_size = S`, `global_sink_size = GS`, `frame_seq_length = 1`; `_initialize_kv_cache`, `_set_all_modules_max_attention_size(C)`, `_set_all_modules_sink_size(S)`, `_set_all_modules_global_sink_size(GS)` (what `inference` does) |
| append `G+n` | the first denoising step of a chunk of `n` frames: `_call_model(..., kv_cache, current_start=G)` |
| rewrite of the current chunk (same start and length) | a later denoising step, or the clean re-run at timestep 0: `_call_model` at the chunk's start again |
| write `s+0` (the probe) | the current chunk run again with the rows it holds (a rewrite with the same bytes); before any chunk, an empty view |
| pin `n`, `n` = the current chunk's length | the scene cut: `_pin_current_chunk(kv_cache, n)` |
| evict `k`, `k` = every position between the sink and the current chunk | the clean re-cache of a scene cut: `_zero_kv_data(kv_cache, chunk_start)`, then the chunk's clean re-run (`_call_model` at its start with the rows it holds) |
| reset | the reset loop of `inference` (a new video on the allocated cache) |

One position is one latent frame (`1 x 2 x 2` latents, patch `(1, 2, 2)`:
`frame_seq_length` 1). The pipeline allocates `local_attn_size` frames and
attends over `local_attn_size` frames (`max_attention_size`), so the
window is the capacity: `C = local_attn_size`.

The tiny model, the tap and the chunk loop's requests are the kit's
(kvcheck.pipeline.tapped); what follows is LongLive's part.

**Visible means what attention reads.** The attention tap
(`kvcheck.torch`) records each block's self-attention call and identifies
every key by the bytes of its K and V rows among the rows the writes
produced. A forward hook on each block's `self_attn.norm_k` returns the
write's K rows and one on `self_attn.v` its V rows; RoPE is the identity
rotation (`model.freqs` all `1 + 0j`, and `LLV2_TRITON_ROPE=0` so the
complex path runs), so the rows reach attention unchanged;
`LLV2_FREQS_I_CACHE=0`, since the RoPE cache is keyed without the head
width and one process serves several. Each head
carries `2 * head_dim` channels (the model needs an even head width), the
write's first and zeros after, which the view leaves out. Two pieces that
do not touch the self-attention cache are replaced: the cross-attention
(which calls flash-attention, CUDA only) returns zeros, and `attention`
(the SDPA fallback, which casts to bf16 by default) keeps the rows' dtype.
Every block must read the keys the last block read (`kvcheck.torch.LayerMismatch`); a
key whose rows no write produced raises `kvcheck.torch.UnknownRows`.

Left out of `hello`: `rewind`, head ranges, recent windows, windows below
the capacity, growth and the packed variant. Requests the pipeline cannot
make are answered as outside its domain (`kvcheck.Outside`): a rewrite of anything
but the current chunk, a gap, negative numbers; a pin other than of the
current chunk, a pin without `global_sink == sink > 0` (the pipeline pins
only with `multi_shot_sink`, which sets `global_sink_size = sink_size`), a
pin of 0 (LongLive never clears a pin but by a reset or a re-cache); an
evict other than the re-cache's, or with a pin set (the re-cache drops
it), or without `global_sink == sink`; a pin or re-cache of the first
chunk (chunk 0 is never a shot boundary). The adapter declares that
domain (`rewrites` latest, `probes` after an append, no gaps, nothing
malformed, `evict` and `pin` of a scene cut), so kvcheck draws only inside
it; it matches the answers above on the configs kvcheck draws, whose
global sink is 0 or the sink.
"""

import os
import sys
import types

# The fp64 complex RoPE path (identity freqs keep the rows' bytes) and the
# eager adaLN (the Triton kernels need CUDA).
os.environ.setdefault("LLV2_TRITON_ROPE", "0")
os.environ.setdefault("LLV2_TRITON_ADALN", "0")
# One process serves models of several head widths, and the per-process
# RoPE cache `_FREQS_I_CACHE` is keyed without the width (a pipeline runs one
# model): it is switched off.
os.environ["LLV2_FREQS_I_CACHE"] = "0"

import kvcheck  # noqa: E402
from kvcheck.pipeline import serving  # noqa: E402
from kvcheck.pipeline.tapped import LATENT_CHANNELS, TEXT_DIM, TEXT_TOKENS, TinyWanCache  # noqa: E402

import loader  # noqa: E402

MODEL_NAME = "kvcheck-tiny"


class LongLiveCache(TinyWanCache):
    """LongLive 2.0's per-block KV cache dicts (sink, global sink, floating pin)."""

    loader = loader
    features = ("global_sink",)
    ops = ("evict", "pin", "reset")
    # The loop's requests: chunks appended at the global end, denoising
    # rewrites and the clean re-run of the latest chunk, the next step's
    # read, a scene cut's pin of the latest chunk and its clean re-cache.
    domain = serving.loop_domain(evict="scene_cut", pin="scene_cut")
    reset_names = {"use_cfg": False}

    def __init__(self, layers=2, relative_rope=False, masks=()):
        super().__init__(layers)
        self.relative_rope = relative_rope
        self.masks = frozenset(masks)
        self.pinned = ()  # the contract's pin (positions), for --mask chunk-fit
        self.name = "LongLive %s CausalWanModel kv_cache%s%s" % (
            serving.commit(loader.CHECKOUT), " (relative RoPE)" if relative_rope else "",
            "".join(" --mask " + m for m in sorted(self.masks)))

    @classmethod
    def from_args(cls, argv):
        args = parse(argv)
        return cls(args.layers, args.relative_rope, args.mask or ())

    def open(self, config):
        self.pinned = ()
        super().open(config)

    def reset(self):
        super().reset()
        self.pinned = ()

    def appends(self, length):
        """With `--mask chunk-fit`, an append that does not fit in the
        capacity beside the positions the contract protects (the sink; with
        a pin, the global sink and the pin) is refused with the contract's
        `chunk_too_large` before LongLive runs it: L1 of docs/longlive.md
        (LongLive takes it and overwrites sink slots), held back so that the
        engines look past it."""
        if "chunk-fit" in self.masks:
            c, g = self.config, self.global_end
            if self.pinned:
                protected = set(range(min(c.get("global_sink") or 0, g))) | set(self.pinned)
            else:
                protected = set(range(min(c["sink"], g)))
            if length > c["capacity"] - len(protected):
                raise kvcheck.Refused(
                    "chunk_too_large", "--mask chunk-fit: a chunk of %d beside %d protected frames does not fit in %d (L1)"
                    % (length, len(protected), c["capacity"]))
        return True

    # -- the tiny model and the stand-in pipeline ----------------------------

    def model_options(self, capacity, sink):
        return {"local_attn_size": capacity, "sink_size": sink}

    def adapt_model(self, model, capacity, sink):
        model.use_relative_rope = self.relative_rope

    def start_video(self, config):
        rt, torch = self.rt, self.rt.torch
        heads, capacity, sink = config["heads"], config["capacity"], config["sink"]
        global_sink = config.get("global_sink") or 0
        rt.programs.pipeline_globals["wan_default_config"] = {MODEL_NAME: {"num_heads": heads, "head_dim": self.width}}
        pipe = types.SimpleNamespace(
            generator=types.SimpleNamespace(model=self.tiny), model_name=MODEL_NAME,
            num_transformer_blocks=self.layers, frame_seq_length=1, num_frame_per_block=1,
            local_attn_size=capacity, sink_size=sink, global_sink_size=global_sink,
            multi_shot_sink=global_sink == sink and sink > 0, quantize_kv=False, kv_cache_pos=None,
        )
        self.pipe = rt.programs.bind(pipe)
        pipe._initialize_kv_cache(batch_size=config["batch"], dtype=self.dtype, device=torch.device("cpu"))
        pipe._set_all_modules_max_attention_size(capacity)
        pipe._set_all_modules_sink_size(sink)
        pipe._set_all_modules_global_sink_size(global_sink)
        self.wrapper = rt.programs.bind(types.SimpleNamespace(model=self.tiny, _compiled_model_call=None))
        for name in [n for n in rt.programs.functions if n != "_call_model"]:
            delattr(self.wrapper, name)
        generator = torch.Generator().manual_seed(1)
        self.context = torch.randn(config["batch"], TEXT_TOKENS, TEXT_DIM, generator=generator).to(self.dtype)
        self.crossattn = [{"is_init": False} for _ in range(self.layers)]

    def forward(self, start, kp, vp, rerun):
        """One denoising step (or clean re-run) of the frames `[start, start+n)`."""
        torch = self.rt.torch
        b, n = kp.shape[0], kp.shape[1]
        self.hook_rows(kp, vp)
        latents = torch.randn(b, LATENT_CHANNELS, n, 2, 2).to(self.dtype)  # [B, C, F, H, W], as the wrapper permutes
        timestep = torch.full((b, n), 500.0)
        self.wrapper._call_model(
            latents, t=timestep, context=self.context, seq_len=n,
            kv_cache=self.pipe.kv_cache_pos, crossattn_cache=self.crossattn,
            current_start=start * self.pipe.frame_seq_length, cache_start=start * self.pipe.frame_seq_length,
        )

    # -- the scene cut -------------------------------------------------------

    def multi_shot(self):
        c = self.config
        return c["sink"] > 0 and (c.get("global_sink") or 0) == c["sink"]

    def pin(self, tokens):
        chunk = self.current
        if not self.multi_shot():
            raise kvcheck.Outside("the pipeline pins only with multi_shot_sink (global_sink == sink > 0)")
        if chunk is not None and chunk["start"] == 0:
            raise kvcheck.Outside("the first chunk is never a shot boundary (_is_shot_boundary)")
        if chunk is None or tokens != chunk["len"]:
            raise kvcheck.Outside(
                "pin %s: the pipeline pins the chunk just generated (%s)"
                % (tokens, "none" if chunk is None else "%d frames" % chunk["len"])
            )
        self.pipe._pin_current_chunk(self.pipe.kv_cache_pos, tokens)
        # The contract's pin: the first min(S, n) of the last n positions written.
        self.pinned = tuple(range(chunk["start"], chunk["start"] + min(self.config["sink"], tokens)))

    def evict(self, tokens):
        chunk, cache = self.current, self.pipe.kv_cache_pos
        if tokens is None or tokens < 0:
            raise kvcheck.Outside("evict %s: no negative re-cache" % tokens)
        if not self.multi_shot() or chunk is None:
            raise kvcheck.Outside("the pipeline re-caches only on a scene cut with multi_shot_sink, after a chunk")
        if chunk["start"] == 0:
            raise kvcheck.Outside("the first chunk is never a shot boundary (_is_shot_boundary)")
        if int(cache[0]["pinned_len"].item()) > 0:
            raise kvcheck.Outside("the re-cache clears the pin; the contract's evict keeps it")
        between = max(0, int(cache[0]["local_end_index"].item()) - self.config["sink"] - chunk["len"])
        if tokens != between:
            raise kvcheck.Outside("evict %d: the re-cache drops the %d frames between the sink and the chunk" % (tokens, between))
        self.pipe._zero_kv_data(cache, chunk["start"] * self.pipe.frame_seq_length)
        self.observe(lambda: self.run(chunk["start"], chunk["k"], chunk["v"], True))


def parse(argv):
    parser = serving.parser(__doc__)
    serving.add_layers(parser, 2, "transformer blocks of the tiny model (default 2)")
    parser.add_argument("--relative-rope", action="store_true",
                        help="use_relative_rope: raw K cached, RoPE applied at attention time (default off, as the release)")
    parser.add_argument("--mask", action="append", choices=sorted(MASKS),
                        help="refuse, as the contract does, what a difference by design of docs/longlive.md"
                        " lets LongLive take, so that the engines look past it (repeatable): "
                        + "; ".join("%s: %s" % kv for kv in sorted(MASKS.items())))
    return serving.parse(parser, argv)


# --mask NAME -> what it holds back.
MASKS = {
    "chunk-fit": "appends that do not fit in the capacity beside the sink (with a pin: the global sink and the pin),"
                 " refused with chunk_too_large before LongLive runs them (L1: LongLive overwrites sink slots)",
}



if __name__ == "__main__":
    sys.exit(serving.main(__file__, "LongLiveCache"))
