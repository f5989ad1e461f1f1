#!/usr/bin/env python3
"""LongLive 2.0's streaming KV cache as a kvcheck-subject/1 process.

    python adapters/longlive/subject.py [--layers 2] [--relative-rope]

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

import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

# The fp64 complex RoPE path (identity freqs keep the rows' bytes) and the
# eager adaLN (the Triton kernels need CUDA).
os.environ.setdefault("LLV2_TRITON_ROPE", "0")
os.environ.setdefault("LLV2_TRITON_ADALN", "0")
# One process serves models of several head widths, and the per-process
# RoPE cache `_FREQS_I_CACHE` is keyed without the width (a pipeline runs one
# model): it is switched off.
os.environ["LLV2_FREQS_I_CACHE"] = "0"

import kvcheck  # noqa: E402
import kvcheck.serve  # noqa: E402
import loader  # noqa: E402
from subject_support import Background  # noqa: E402

LATENT_CHANNELS = 2
TEXT_DIM = 4
TEXT_TOKENS = 2
MODEL_NAME = "kvcheck-tiny"



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
        return os.environ.get("LONGLIVE_COMMIT", "?")[:12]


class LongLiveCache(kvcheck.Subject):
    """LongLive 2.0's per-block KV cache dicts (sink, global sink, floating pin)."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    features = ("global_sink",)
    ops = ("evict", "pin", "reset")
    # The loop's requests: chunks appended at the global end, denoising
    # rewrites and the clean re-run of the latest chunk, the next step's
    # read, a scene cut's pin of the latest chunk and its clean re-cache.
    domain = {"rewrites": "latest", "probes": "after_append", "gaps": False, "malformed": False,
              "evict": "scene_cut", "pin": "scene_cut"}

    def __init__(self, layers=2, relative_rope=False):
        self.layers = layers
        self.relative_rope = relative_rope
        self.name = "LongLive %s CausalWanModel kv_cache%s" % (_commit(), " (relative RoPE)" if relative_rope else "")
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
            num_heads=heads, num_layers=self.layers, local_attn_size=capacity, sink_size=sink,
        )
        model.eval()
        model.use_relative_rope = self.relative_rope
        # RoPE as the identity rotation: the rows reach attention as written.
        model.freqs = torch.ones_like(model.freqs)
        for block in model.blocks:
            block.self_attn.norm_k.register_forward_hook(lambda _m, _i, _o: self.rows[0])
            block.self_attn.v.register_forward_hook(lambda _m, _i, _o: self.rows[1])
            block.self_attn.register_forward_pre_hook(lambda _m, *_a: self.calls.append(len(self.tap.calls)))
            # flash-attention only (CUDA); the self-attention cache never sees it.
            block.cross_attn.forward = lambda x, *_a, **_k: torch.zeros_like(x)
        model.register_forward_pre_hook(lambda _m, *_a: self.calls.clear())
        self.models[key] = model
        return model

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch, cm = rt.torch, rt.programs.model
        if not getattr(cm, "_kvcheck_attention", False):
            # The SDPA fallback casts to bf16 unless told the dtype: keep the rows'.
            real = cm.attention
            cm.attention = lambda q, k, v, **kw: real(q, k, v, **dict(kw, dtype=q.dtype))
            cm._kvcheck_attention = True
        self.config = config
        self.dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[config["dtype"]]
        heads, d = config["heads"], config["head_dim"]
        capacity, sink = config["capacity"], config["sink"]
        global_sink = config.get("global_sink") or 0
        self.width = 2 * d
        model = self.model(heads, self.width, capacity, sink).to(self.dtype)
        self.tap = self.tap or rt.AttentionTap()
        self.tap.forget()
        self.calls, self.rows = [], None
        self.global_end = 0
        self.current = None  # the latest chunk: start, len, and the rows it holds
        rt.programs.pipeline_globals["wan_default_config"] = {MODEL_NAME: {"num_heads": heads, "head_dim": self.width}}
        pipe = types.SimpleNamespace(
            generator=types.SimpleNamespace(model=model), model_name=MODEL_NAME,
            num_transformer_blocks=self.layers, frame_seq_length=1, num_frame_per_block=1,
            local_attn_size=capacity, sink_size=sink, global_sink_size=global_sink,
            multi_shot_sink=global_sink == sink and sink > 0, quantize_kv=False, kv_cache_pos=None,
        )
        self.pipe = rt.programs.bind(pipe)
        pipe._initialize_kv_cache(batch_size=config["batch"], dtype=self.dtype, device=torch.device("cpu"))
        pipe._set_all_modules_max_attention_size(capacity)
        pipe._set_all_modules_sink_size(sink)
        pipe._set_all_modules_global_sink_size(global_sink)
        self.wrapper = rt.programs.bind(types.SimpleNamespace(model=model, _compiled_model_call=None))
        for name in [n for n in rt.programs.functions if n != "_call_model"]:
            delattr(self.wrapper, name)
        generator = torch.Generator().manual_seed(1)
        self.context = torch.randn(config["batch"], TEXT_TOKENS, TEXT_DIM, generator=generator).to(self.dtype)
        self.crossattn = [{"is_init": False} for _ in range(self.layers)]

    # -- one forward ---------------------------------------------------------

    def padded(self, rows):
        """`[B, n, H, D]` -> `[B, n, H, 2D]` (zeros after the first D)."""
        b, n, h, d = rows.shape
        out = self.rt.torch.zeros((b, n, h, self.width), dtype=self.dtype)
        out[..., :d] = rows.to(self.dtype)
        return out

    def forward(self, start, kp, vp):
        """One denoising step (or clean re-run) of the frames `[start, start+n)`."""
        torch = self.rt.torch
        b, n = kp.shape[0], kp.shape[1]
        self.rows = (kp.reshape(b, n, -1), vp.reshape(b, n, -1))
        latents = torch.randn(b, LATENT_CHANNELS, n, 2, 2).to(self.dtype)  # [B, C, F, H, W], as the wrapper permutes
        timestep = torch.full((b, n), 500.0)
        self.wrapper._call_model(
            latents, t=timestep, context=self.context, seq_len=n,
            kv_cache=self.pipe.kv_cache_pos, crossattn_cache=self.crossattn,
            current_start=start * self.pipe.frame_seq_length, cache_start=start * self.pipe.frame_seq_length,
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

    def run_chunk(self, start, kp, vp):
        self.tap.produced(start, kp, vp)
        self.forward(start, kp, vp)

    # -- ops -----------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no frame has a negative index or count" % (start, length))
        g, chunk = self.global_end, self.current
        if length == 0:
            if start > g:
                raise kvcheck.Outside("zero-length write at %d past the global end %d" % (start, g))
            if chunk is None:
                c = self.config
                none = self.rt.torch.zeros((c["batch"], 0, c["heads"], c["head_dim"]), dtype=self.dtype)
                return [], none, none
            return self.observe(lambda: self.run_chunk(chunk["start"], chunk["k"], chunk["v"]))
        kp, vp = self.padded(k), self.padded(v)
        # The adapter's own state changes only once the forward has run: a
        # forward that raises applies no cache update (they are applied after
        # every block), so neither may the adapter.
        if start == g:
            seen = self.observe(lambda: self.run_chunk(start, kp, vp))
            self.current = {"start": start, "len": length, "k": kp, "v": vp}
            self.global_end = start + length
            return seen
        if chunk is not None and start == chunk["start"] and length == chunk["len"]:
            seen = self.observe(lambda: self.run_chunk(start, kp, vp))
            chunk["k"], chunk["v"] = kp, vp
            return seen
        if start > g:
            raise kvcheck.Outside("write %d+%d leaves a gap after the global end %d" % (start, length, g))
        raise kvcheck.Outside(
            "write %d+%d: only the chunk being generated (%s) is run again"
            % (start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))
        )

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
        self.observe(lambda: self.run_chunk(chunk["start"], chunk["k"], chunk["v"]))

    def reset(self):
        torch = self.rt.torch
        namespace = {"self": self.pipe, "torch": torch, "use_cfg": False,
                     "noise": torch.zeros(1)}  # the loop reads noise.device
        exec(self.rt.programs.reset, namespace)
        self.tap.forget()
        self.global_end = 0
        self.current = None


def parse(argv):
    parser = argparse.ArgumentParser(prog="subject.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks of the tiny model (default 2)")
    parser.add_argument("--relative-rope", action="store_true",
                        help="use_relative_rope: raw K cached, RoPE applied at attention time (default off, as the release)")
    args = parser.parse_args(argv)
    if args.layers < 1:
        raise SystemExit("--layers must be at least 1")
    return args


def _from_args(cls, argv):
    args = parse(argv)
    return cls(args.layers, args.relative_rope)


LongLiveCache.from_args = classmethod(_from_args)


if __name__ == "__main__":
    sys.exit(kvcheck.serve.main([os.path.abspath(__file__) + ":LongLiveCache"] + sys.argv[1:]))
