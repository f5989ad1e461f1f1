"""The Self-Forcing KV cache shape, taken out of a library's source files.

Self-Forcing (`wan/modules/causal_model.py`), fastvideo's causal Wan
(`models/dits/causal_wanvideo.py`) and LingBot-World 2's causal-fast model
(`models/dits/lingbotworld2/causal_fast.py`, fastvideo) keep the same cache:
per transformer block a dict

    {"k": [B, kv_cache_size, H, D], "v": ..., "global_end_index", "local_end_index"}

that `CausalWanSelfAttention.forward` updates inline. A chunk at
`current_start` writes its rows at `local_end_index + current_end -
global_end_index - n`; when a new chunk would overflow the buffer
(`current_end > global_end_index` and `n + local_end_index > kv_cache_size`)
the slots after the first `sink_size * frame_seqlen` roll left by the
overflow first; attention reads the slots
`[max(0, local_end_index - max_attention_size), local_end_index)`.

A library's adapter compiles, unmodified, that `forward` of the library's
file and the pipeline statements that size the cache and place each chunk
(kvcheck.pipeline.source; which statements, per library, is its `Flavour`); this
module runs them for kvtrace ops:

| kvtrace op | pipeline call |
|---|---|
| open, reset | the pipeline's cache allocation (`_initialize_kv_cache` and its sizes) for `local_attn_size = C`, `sink_size = S`, one token per latent frame; Self-Forcing's reset is its own `inference` reset (the end indices set to 0, the buffers kept) |
| append `G+n` | the first denoising step of a new chunk: every block's `forward` with `current_start` as the pipeline computes it from the chunk's first frame |
| rewrite of the latest chunk | a later denoising step, or the clean-context rerun at the context timestep: the same `forward` call with the new rows |
| write `s+0` | the latest chunk's forward again with its rows (what the next step reads); an empty view before any chunk |

Positions are latent frames, each one token (a tiny latent whose patches
make one token per frame), so the contract's `C` is `local_attn_size` and
`S` is `sink_size`; the pipelines set the attention window to the buffer
(`max_attention_size = local_attn_size * frame_seqlen`, or `kv_size`), so
`W = C`.

Only the parts of `forward` that touch the cache run as they are; what
only computes values is replaced, and says so: RoPE is the identity (the
rows reach attention with the bytes they were written with, which is how
the attention tap recognises them), the q/k/v projections return the
write's rows, and the attention call is
`torch.nn.functional.scaled_dot_product_attention` on the slice the library
passes, where the tap (`kvcheck.torch`) sees it.

Requests no run of the pipeline makes are answered as outside its domain
(`kvcheck.Outside`): a gap, a rewrite of anything but the latest chunk,
negative numbers. `ShapeCache` declares that domain (`LOOP`), so kvcheck
draws only inside it.
"""

import kvcheck

from kvcheck.adapter import dtype as torch_dtype
from .serving import LOOP


class Flavour:
    """One library's copy of the shape: where its statements are and how its
    `forward` is called. Subclasses compile their statements in `__init__`
    and define `sizes` and `forward` (and `reset` when a new video is not a
    new allocation)."""

    name = None
    where = None  # what the reports name (version or commit)

    def __init__(self, torch):
        self.torch = torch

    # the values-only stand-ins every flavour's forward is given
    def identity_rope(self, x, *args, **kwargs):
        return x

    def attention(self, q, k, v, *args, **kwargs):
        """The library's attention on `[B, n, H, D]`, seen by the tap."""
        F = self.torch.nn.functional
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)

    def sizes(self, config, layers):
        """The pipeline's sizes for `config` (its tokens per frame, the
        model's, the buffer) and `self.caches`, one dict per block, for a
        new video."""
        raise NotImplementedError

    def forward(self, layer, cache, start_frame, k, v):
        """Every block's self-attention forward for a chunk of rows `k`, `v`."""
        raise NotImplementedError

    def after_forward(self):
        """What the model does once every block has run (a deferred cache update)."""

    def reset(self):
        """A new video."""
        self.sizes(self.config, self.layers)


# LOOP (kvcheck.pipeline.serving): gaps, rewrites of older chunks and negative
# numbers are answered as kvcheck.Outside. A chunk wider than the room
# beside the sink stays inside: the stages accept such a geometry
# (docs/findings/fastvideo-chunk-overwrites-sink.md).


class ShapeCache(kvcheck.Subject):
    """The kvcheck subject over one `Flavour` (see the module docstring)."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    domain = LOOP

    def __init__(self, flavour_factory, layers=2):
        self.flavour_factory = flavour_factory
        self.layers = layers
        self.flavour = None
        self.tap = None

    def setup(self, config):
        import torch

        torch.set_num_threads(1)
        from kvcheck.torch import AttentionTap

        if self.flavour is None:
            self.flavour = self.flavour_factory(torch)
        if self.tap is None:
            self.tap = AttentionTap()
        if config.get("window") not in (None, config["capacity"]):
            raise kvcheck.Outside(
                "the pipelines read the whole buffer (max_attention_size = local_attn_size * frame_seqlen): W = C only"
            )
        if config.get("growth"):
            # (global_sink only matters with pins, which no pipeline makes)
            raise kvcheck.Outside("no growth: the buffer is local_attn_size frames")
        self.config = config
        self.torch = torch
        self.dtype = torch_dtype(torch, config["dtype"])
        self.flavour.config, self.flavour.layers, self.flavour.dtype = config, self.layers, self.dtype
        self.flavour.sizes(config, self.layers)
        self.tap.forget()
        self.global_end = 0
        self.current = None

    def check(self, start, length, k):
        """The chunk a write rewrites, None for an append or a probe."""
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no frame has a negative index or count" % (start, length))
        if start > self.global_end:
            raise kvcheck.Outside("write %d+%d leaves a gap after frame %d" % (start, length, self.global_end))
        if length == 0 or start == self.global_end:
            return None
        chunk = self.current
        if chunk is not None and start == chunk["start"] and length == chunk["len"]:
            return chunk
        raise kvcheck.Outside(
            "write %d+%d: the pipeline rewrites only the chunk being denoised (%s)"
            % (start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))
        )

    def write_chunk(self, start, length, k, v):
        chunk = self.check(start, length, k)
        if length == 0:
            if self.current is None:
                c = self.config
                none = self.torch.zeros((c["batch"], 0, c["heads"], c["head_dim"]), dtype=self.dtype)
                return [], none, none
            chunk = self.current
            return self.observe(chunk["start"], chunk["k"], chunk["v"])
        k, v = k.to(self.dtype).contiguous(), v.to(self.dtype).contiguous()
        self.tap.begin_step()
        self.tap.produced(start, k, v)
        view = self.observe(start, k, v)
        # Only a forward that went through makes this the chunk being denoised.
        self.current = {"start": start, "len": length, "k": k, "v": v}
        self.global_end = max(self.global_end, start + length)
        return view

    def observe(self, start, k, v):
        tap = self.tap
        tap.clear_calls()
        calls = []
        with tap, self.torch.no_grad():
            for layer, cache in enumerate(self.flavour.caches):
                self.flavour.forward(layer, cache, start, k, v)
                calls.append(len(tap.calls) - 1)
            self.flavour.after_forward()
        return tap.agreed_view(calls)

    # -- kvcheck.Subject ------------------------------------------------------

    def open(self, config):
        self.setup(config)

    def write(self, start, length, heads, recent_window, k, v):
        if heads is not None or recent_window is not None:
            raise kvcheck.Outside("every head is written, and attention reads the whole window")
        return self.write_chunk(start, length, k, v)

    def reset(self):
        self.reset_video()

    def reset_video(self):
        self.flavour.reset()
        self.tap.forget()
        self.global_end = 0
        self.current = None


def flatten_heads(rows):
    b, n, h, d = rows.shape
    return rows.reshape(b, n, h * d)
