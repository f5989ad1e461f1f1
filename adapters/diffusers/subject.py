#!/usr/bin/env python3
"""diffusers' streaming video KV caches as kvcheck-subject/1 processes.

Two caches of the installed diffusers (0.42.1 by default,
adapters/diffusers/setup.sh), each driven through its own transformer,
randomly initialised and tiny (two blocks, no weights downloaded, CPU), and
through the statements of its pipeline's `__call__` that keep the cache
between forwards, which loader.py compiles unmodified out of the pipeline
file:

    python adapters/diffusers/subject.py --cache sana-wm-refiner [--layers 2]
    python adapters/diffusers/subject.py --cache anyflow-far [--layers 2] [--full-chunk-limit 3]

**`sana-wm-refiner`**: `SanaWMRefinerKVCache` with
`SanaWMLTX2RefinerTransformer3DModel` (`SanaWMLTX2RefinerAttnProcessor`
prepends `[sink + history]` to the active block and captures K/V), and the
loop of `SanaWMLTX2Refiner.__call__` (`pipelines/sana_wm/refiner.py`):

| kvtrace op | refiner calls (the programs of loader.py) |
|---|---|
| open | the tiny transformer; `setup`: `num_layers`, `tokens_per_frame`, `history_frames = 0`, `kv_cache = SanaWMRefinerKVCache(num_layers)` |
| the first write `0+n`, `n >= S` | `sink`: `_capture_block_kv(z[:, :, :sink_size], kv_cache_mode="capture_pre_rope")`, then `store_sink(*get_captured_pre_rope())` in every layer; for `n > S` the rest `[S, n)` is the first block (below) |
| append `G+n` | the block being denoised, if any, is finished: `commit` (`_capture_block_kv(..., "inject_and_capture_post_rope")`, the history append, `history_frames += ...`), then `window` with `kv_max_frames = C - n` and `trim`; the new block: `block` (`frame_positions`, `sink_rope_offset`, `kv_cache.sink_pe = ...`) and one `denoise` step (`self.transformer(..., kv_cache_mode="inject")`) |
| rewrite of the chunk being denoised (same start, same length) | another `denoise` step with the new rows (and `sink` again for the first chunk's sink frames) |
| write `s+0` (the probe) | the last `denoise` step again (inject mode stores nothing); with no block being denoised, an `inject` forward of one throwaway frame whose rows are left out of the view |
| evict `k` | the block being denoised is finished (`commit`), then `window` with `kv_max_frames = S + history_frames - k` and `trim` |
| reset | `kv_cache.clear()`, `history_frames = 0` |

`C` maps onto the refiner's window: before a block of `n` frames the
history is trimmed to `kv_max_frames - sink_size` frames with
`kv_max_frames = C - n`, so `[sink + history + block]` holds at most `C`
frames (the pipeline's `block_size=3, kv_max_frames=11` is `C = 14` with
3-frame chunks).

**`anyflow-far`**: `AnyFlowFARTransformer3DModel`, whose
`AnyFlowCausalAttnProcessor` writes the per-layer `full_cache` /
`compressed_cache` buffers in the cache-prefill forward and reads their
first `num_cached_*` rows before the current chunk in the autoregressive
forward, and the loop of `AnyFlowFARPipeline.__call__`
(`pipelines/anyflow/pipeline_anyflow_far.py`):

| kvtrace op | AnyFlow-FAR calls (the programs of loader.py) |
|---|---|
| open, reset | the tiny transformer (patch and compressed patch `(1, 1, 1)`); `setup`: `full_token_per_frame`, `compressed_token_per_frame`, the `if use_kv_cache:` allocation of every layer's buffers and `kv_cache_flag`, for a `chunk_partition` of `C` chunks of `C` frames (at least `full_chunk_limit` chunks) |
| append `G+n` (chunk `k`) | for `k > 0`, `commit`: `kv_cache = self.encode_kv_cache(kv_cache, kv_cache_flag, chunk_partition=chunk_partition[:chunk_idx + 1], ...)` for the chunks so far; then one `denoise` step: `this_chunk_partition`, `latent_model_input`, `timestep`, `r_timestep`, `noise_pred, _ = self.transformer(..., kv_cache=kv_cache, kv_cache_flag=copy.deepcopy(kv_cache_flag))` |
| rewrite of the chunk being denoised | another `denoise` step with the new rows |
| write `s+0` (the probe) | the last `denoise` step again (the autoregressive forward stores nothing); nothing written yet: an empty view, no forward |

AnyFlow-FAR keeps every frame of the video (old chunks as compressed
tokens, here one token per frame as for the full ones): a cache that never
evicts is the contract's `growth` configuration, which it declares (its
buffers are then allocated for 80 chunks of up to 16 frames); without
`growth`, an append past `C` frames is outside (`kvcheck.Outside`), so within what it
accepts the contract never evicts either.

**Visible means what attention reads.** The attention tap
(`kvcheck.torch`) records the self-attention call (`attn1`) of every block
of the forward that answers the write and identifies each key by the bytes
of its K and V rows among the rows the writes produced. The rows reach
attention unchanged: a forward hook on each `attn1.norm_k` returns the
write's K rows and one on `attn1.to_v` its V rows (in the cache-prefill
forward, the latest rows of every position), and RoPE is the identity
rotation (SANA-WM: `build_rotary_emb_for_absolute_positions`, also used for
the sink's shifted RoPE, returns `cos = 1, sin = 0` and records the frame
positions asked for in `rope_calls`; AnyFlow-FAR: the rotary module's
frequencies are replaced by `1 + 0j`). Each head carries more channels than
the write's `head_dim` (SANA-WM `2 * head_dim`, RoPE pairs channels;
AnyFlow-FAR at least 16, below which the processor pads), the write's
first and zeros after, which the view leaves out. Every block's call must
read the same keys as the last block's, otherwise the write raises
`kvcheck.torch.LayerMismatch`; a key whose rows no write produced raises
`kvcheck.torch.UnknownRows`.

Left out of `hello`: `rewind` and `pin` (no such calls; AnyFlow-FAR also
`evict`), head ranges, recent windows, windows below the capacity, the
global sink and the packed variant; SANA-WM also growth. Writes the pipeline cannot make are
answered as outside the adapter's domain (`kvcheck.Outside`): a rewrite of anything but the
chunk being denoised, a gap, negative numbers; SANA-WM: a first chunk
shorter than the sink, a chunk that would need `kv_max_frames < sink_size`
(`n > C - S`); AnyFlow-FAR: a stream longer than `C` frames.
"""

import argparse
import os
import sys
import types

import kvcheck
import kvcheck.serve
from kvcheck.adapter import Background

import loader

# The distilled schedule of refiner.py; only the timestep embedding sees it.
SIGMAS = (0.909375, 0.725, 0.421875, 0.0)
LATENT_CHANNELS = 2
CAPTION_CHANNELS = 4
TEXT_TOKENS = 2
GROWTH_CHUNKS, GROWTH_FRAMES = 80, 16  # AnyFlow-FAR's buffers for a growth config
THROWAWAY = -1  # the position the SANA-WM probe's throwaway frame is registered at



def _load(cache):
    import torch

    torch.set_num_threads(1)
    from kvcheck.torch import AttentionTap

    if cache == "sana-wm-refiner":
        from diffusers.models.transformers import transformer_sana_wm_refiner as model

        programs = loader.load_refiner()
    else:
        from diffusers.models.transformers import transformer_anyflow_far as model

        programs = loader.load_anyflow()
    return types.SimpleNamespace(torch=torch, model=model, programs=programs, AttentionTap=AttentionTap)


class TappedPipelineCache(kvcheck.Subject):
    """What both caches share: the tiny model's hooks, the tap, the programs."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    cache = None  # the --cache name
    label = None  # the class named in reports

    def __init__(self, layers=2):
        self.layers = layers
        self.name = "diffusers %s %s" % (loader.installed_version() or "?", self.label)
        self.runtime = Background(lambda: _load(self.cache))
        self.models = {}
        self.rope_calls = []
        self.tap = None

    def width(self, head_dim):
        """Channels per head of the tiny model (at least head_dim)."""
        raise NotImplementedError

    def build(self, heads, width, dtype):
        """The tiny transformer (randomly initialised)."""
        raise NotImplementedError

    def model(self, heads, head_dim, dtype):
        key = (heads, head_dim, dtype)
        if key not in self.models:
            torch = self.rt.torch
            torch.manual_seed(0)
            model = self.build(heads, self.width(head_dim), dtype).to(dtype)
            model.eval()
            blocks = getattr(model, "transformer_blocks", None) or model.blocks
            for block in blocks:
                block.attn1.norm_k.register_forward_hook(lambda _m, _i, _o: self.rows[0])
                block.attn1.to_v.register_forward_hook(lambda _m, _i, _o: self.rows[1])
                block.attn1.register_forward_pre_hook(lambda _m, *_a: self.attn1_calls.append(len(self.tap.calls)))
            model.register_forward_pre_hook(lambda _m, *_a: self.attn1_calls.clear())
            self.models[key] = model
        return self.models[key]

    def start(self, config):
        """What every open does first: the runtime, the model, the tap."""
        rt = self.rt = self.runtime.ready()
        torch = rt.torch
        self.config = config
        self.dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[config["dtype"]]
        self.tap = self.tap or rt.AttentionTap()
        self.tap.forget()
        self.attn1_calls = []
        self.rows = None
        self.rope_calls = []
        self.global_end = 0
        self.current = None  # the chunk of the latest append, while its rows may still be rewritten
        return self.model(config["heads"], config["head_dim"], self.dtype)

    # -- payload -----------------------------------------------------------

    def padded(self, rows):
        """`[B, n, H, D]` -> `[B, n, H, width]` (zeros after the first D)."""
        torch = self.rt.torch
        b, n, h, d = rows.shape
        out = torch.zeros((b, n, h, self.width(d)), dtype=self.dtype)
        out[..., :d] = rows.to(self.dtype)
        return out

    def use_rows(self, k, v):
        """The rows the next forward's `attn1.norm_k` / `attn1.to_v` return."""
        b, n, h, w = k.shape
        self.rows = (k.reshape(b, n, h * w), v.reshape(b, n, h * w))

    def latents(self, *shape):
        return self.rt.torch.randn(*shape).to(self.dtype)

    def run(self, name, **variables):
        self.ns.update(variables)
        self.rt.programs.run(name, self.ns)

    def check(self, start, length, k):
        """The checks every write shares; returns the chunk being denoised
        when the write rewrites it, else None."""
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no frame has a negative index or count" % (start, length))
        if length == 0 and start > self.global_end:
            raise kvcheck.Outside("zero-length write at %d past the global end %d" % (start, self.global_end))
        chunk = self.current
        if length == 0 or start == self.global_end:
            return None
        if chunk is not None and start == chunk["start"] and length == chunk["len"]:
            return chunk
        if start > self.global_end:
            raise kvcheck.Outside("write %d+%d leaves a gap after the global end %d" % (start, length, self.global_end))
        raise kvcheck.Outside(
            "write %d+%d: only the chunk being denoised (%s) can be rewritten"
            % (start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))
        )

    def observe(self, action, leave_out=()):
        """Runs `action` inside the tap; the view of the last block's
        self-attention, which every other block must have read too."""
        tap = self.tap
        tap.begin_step()
        tap.clear_calls()
        with tap, self.rt.torch.no_grad():  # as the pipelines' __call__ runs
            action()
        calls = list(self.attn1_calls)
        if not calls:
            raise kvcheck.AdapterError("the write ran no self-attention the tap could see")
        positions, k, v = tap.agreed_view(calls)
        torch = self.rt.torch
        keep = [i for i, p in enumerate(positions) if p not in leave_out]
        index = torch.tensor(keep, dtype=torch.long)
        d = self.config["head_dim"]
        return [positions[i] for i in keep], k.index_select(1, index)[..., :d], v.index_select(1, index)[..., :d]

    def empty(self):
        torch, c = self.rt.torch, self.config
        none = torch.zeros((c["batch"], 0, c["heads"], c["head_dim"]), dtype=self.dtype)
        return [], none, none


class SanaWMRefinerCache(TappedPipelineCache):
    """diffusers' SANA-WM stage-2 refiner cache (`SanaWMRefinerKVCache`)."""

    cache = "sana-wm-refiner"
    label = "SanaWMRefinerKVCache"

    def width(self, head_dim):
        return 2 * head_dim  # RoPE pairs channels: the write's head_dim, then as many zeros

    def build(self, heads, width, dtype):
        model = self.rt.model.SanaWMLTX2RefinerTransformer3DModel(
            in_channels=LATENT_CHANNELS,
            out_channels=LATENT_CHANNELS,
            num_attention_heads=heads,
            attention_head_dim=width,
            cross_attention_dim=heads * width,
            audio_in_channels=2,
            audio_out_channels=2,
            audio_num_attention_heads=1,
            audio_attention_head_dim=2,
            audio_cross_attention_dim=2,
            num_layers=self.layers,
            caption_channels=CAPTION_CHANNELS,
        )
        model.build_rotary_emb_for_absolute_positions = self.identity_rope(model, heads * width)
        return model

    def identity_rope(self, model, inner):
        torch = self.rt.torch

        def build(batch_size, frame_positions, height, width, device, fps):
            self.rope_calls.append(list(frame_positions))
            tokens = len(frame_positions) * (height // model.config.patch_size) * (width // model.config.patch_size)
            shape = (batch_size, tokens, inner)
            return torch.ones(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.float32)

        return build

    def open(self, config):
        model = self.start(config)
        rt, torch = self.rt, self.rt.torch
        batch = config["batch"]
        generator = torch.Generator().manual_seed(1)
        self.ns = {
            "torch": torch,
            "SanaWMRefinerKVCache": rt.model.SanaWMRefinerKVCache,
            "_pack_latents": rt.programs.functions["_pack_latents"],
            "transformer_config": model.config,
            "batch_size": batch,
            "height": 1,
            "width": 1,
            "device": torch.device("cpu"),
            "dtype": self.dtype,
            "fps": 24.0,
            "sink_size": config["sink"],
            "sigmas_t": torch.tensor(SIGMAS, dtype=torch.float32),
            "prompt_embeds": torch.randn(batch, TEXT_TOKENS, CAPTION_CHANNELS, generator=generator).to(self.dtype),
            "prompt_attention_mask": torch.ones(batch, TEXT_TOKENS),
        }
        fake = types.SimpleNamespace(transformer=model)
        fake._capture_block_kv = types.MethodType(rt.programs.functions["_capture_block_kv"], fake)
        self.ns["self"] = fake
        self.run("setup")
        self.steps = 0

    def frames(self, n):
        return self.latents(self.config["batch"], LATENT_CHANNELS, n, 1, 1)

    # -- the refiner's programs ----------------------------------------------

    def capture_sink(self, k, v):
        self.use_rows(k, v)
        self.run("sink", z=self.frames(self.config["sink"]))

    def denoise(self, start, end, k, v):
        self.use_rows(k, v)
        self.run("denoise", block_start=start, block_end=end, i=self.steps % (len(SIGMAS) - 1),
                 latent_block=self.frames(end - start))
        self.steps += 1

    def commit(self):
        """Finishes the block being denoised: captured post-RoPE, appended to the history."""
        chunk, self.current = self.current, None
        if chunk is None or chunk["block"] is None:
            return
        start, end = chunk["block"]
        skip = start - chunk["start"]
        self.use_rows(chunk["k"][:, skip:], chunk["v"][:, skip:])
        self.run("commit", block_start=start, block_end=end, latent_block=self.frames(end - start))

    def trim(self, kv_max_frames):
        self.run("window", kv_max_frames=kv_max_frames)
        self.run("trim")

    # -- ops ---------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        chunk = self.check(start, length, k)
        sink, capacity, g = self.config["sink"], self.config["capacity"], self.global_end
        if length == 0:
            return self.observe(self.probe, leave_out=(THROWAWAY,))
        if chunk is not None:
            return self.observe(lambda: self.rewrite(k, v))
        if length > (capacity if g == 0 else capacity - sink):
            raise kvcheck.Outside(
                "a %d-frame chunk after %d frames would need kv_max_frames below sink_size %d (C = %d)"
                % (length, g, sink, capacity)
            )
        if g == 0 and length < sink:
            raise kvcheck.Outside("the sink is captured from its %d frames at once; the first chunk has %d" % (sink, length))
        return self.observe(lambda: self.append(start, length, k, v))

    def append(self, start, length, k, v):
        sink, end = self.config["sink"], start + length
        kp, vp = self.padded(k), self.padded(v)
        self.tap.produced(start, kp, vp)
        if start == 0:
            self.capture_sink(kp[:, :sink], vp[:, :sink])
            block = (sink, end) if end > sink else None
        else:
            self.commit()
            self.trim(self.config["capacity"] - length)
            block = (start, end)
        self.current = {"start": start, "len": length, "block": block, "k": kp, "v": vp}
        self.global_end = end
        if block is not None:
            self.run("block", block_start=block[0], block_end=block[1])
            self.denoise(block[0], block[1], kp[:, block[0] - start:], vp[:, block[0] - start:])

    def rewrite(self, k, v):
        chunk = self.current
        start, sink = chunk["start"], self.config["sink"]
        kp, vp = self.padded(k), self.padded(v)
        self.tap.produced(start, kp, vp)
        chunk["k"], chunk["v"] = kp, vp
        if start == 0:
            self.capture_sink(kp[:, :sink], vp[:, :sink])
        if chunk["block"] is not None:
            b0, b1 = chunk["block"]
            self.denoise(b0, b1, kp[:, b0 - start:], vp[:, b0 - start:])

    def probe(self):
        chunk = self.current
        if chunk is not None and chunk["block"] is not None:
            b0, b1 = chunk["block"]
            self.denoise(b0, b1, chunk["k"][:, b0 - chunk["start"]:], chunk["v"][:, b0 - chunk["start"]:])
            return
        # No block is being denoised: one throwaway frame (zero rows, which no
        # write produces) attends to the sink and the history without storing.
        torch, c, g = self.rt.torch, self.config, self.global_end
        zeros = torch.zeros((c["batch"], 1, c["heads"], self.width(c["head_dim"])), dtype=self.dtype)
        self.tap.produced(THROWAWAY, zeros, zeros)
        self.run("block", block_start=g, block_end=g + 1)
        self.denoise(g, g + 1, zeros, zeros)

    def evict(self, tokens):
        if tokens is None or tokens < 0:
            raise kvcheck.Outside("evict %s: no negative trim" % tokens)
        chunk = self.current
        held = self.ns["history_frames"] * self.ns["tokens_per_frame"]
        if chunk is not None and chunk["block"] is not None:
            held += chunk["block"][1] - chunk["block"][0]
        if tokens > held:
            raise kvcheck.Refused("evict_too_many", "evict %d: the history and the block hold %d frames" % (tokens, held))
        if tokens == 0:
            return
        self.commit()
        self.trim(self.config["sink"] + self.ns["history_frames"] - tokens)

    def reset(self):
        self.ns["kv_cache"].clear()
        self.ns["history_frames"] = 0
        self.tap.forget()
        self.global_end = 0
        self.current = None


class AnyFlowFARCache(TappedPipelineCache):
    """diffusers' AnyFlow-FAR autoregressive cache (`full_cache` / `compressed_cache`)."""

    cache = "anyflow-far"
    label = "AnyFlow-FAR kv_cache"
    features = ("growth",)  # it never evicts: a growing cache is its contract

    def __init__(self, layers=2, full_chunk_limit=3):
        self.full_chunk_limit = full_chunk_limit
        super().__init__(layers)
        self.label = "AnyFlow-FAR kv_cache (full_chunk_limit %d)" % full_chunk_limit
        self.name = "diffusers %s %s" % (loader.installed_version() or "?", self.label)

    def width(self, head_dim):
        return max(16, head_dim + head_dim % 2)

    def build(self, heads, width, dtype):
        model = self.rt.model.AnyFlowFARTransformer3DModel(
            patch_size=(1, 1, 1),
            compressed_patch_size=(1, 1, 1),
            full_chunk_limit=self.full_chunk_limit,
            num_attention_heads=heads,
            attention_head_dim=width,
            in_channels=LATENT_CHANNELS,
            out_channels=LATENT_CHANNELS,
            text_dim=CAPTION_CHANNELS,
            freq_dim=8,
            ffn_dim=8,
            num_layers=self.layers,
        )
        real = model.rope.forward
        torch = self.rt.torch

        def identity(far_cfg, device, clean_hidden_states=None):
            freqs = real(far_cfg, device, clean_hidden_states)
            self.rope_calls.append(dict(far_cfg))
            return {name: torch.ones_like(value) for name, value in freqs.items()}

        model.rope.forward = identity
        return model

    def open(self, config):
        model = self.start(config)
        torch = self.rt.torch
        batch, capacity = config["batch"], config["capacity"]
        generator = torch.Generator().manual_seed(1)
        fake = types.SimpleNamespace(transformer=model, do_classifier_free_guidance=False, attention_kwargs=None)
        fake.encode_kv_cache = types.MethodType(self.rt.programs.functions["encode_kv_cache"], fake)
        if config.get("growth"):
            # Room for any stream kvcheck draws: GROWTH_CHUNKS chunks of up to GROWTH_FRAMES frames.
            self.plan = [GROWTH_FRAMES] * GROWTH_CHUNKS
        else:
            self.plan = [capacity] * max(capacity, self.full_chunk_limit)
        self.ns = {
            "torch": torch,
            "copy": __import__("copy"),
            "self": fake,
            "use_kv_cache": True,
            "use_mean_velocity": True,
            "attention_kwargs": None,
            "negative_prompt_embeds": None,
            "prompt_embeds": torch.randn(batch, TEXT_TOKENS, CAPTION_CHANNELS, generator=generator).to(self.dtype),
        }
        self.ns["encoder_hidden_states"] = self.ns["prompt_embeds"]
        self.allocate()

    def allocate(self):
        """The buffers and flags of a new video (the pipeline allocates per call)."""
        c = self.config
        self.run("setup", chunk_partition=self.plan,
                 init_latents=self.latents(c["batch"], 1, LATENT_CHANNELS, 1, 1))
        self.chunks = []  # the frame count of every chunk so far
        self.steps = 0

    def rows_so_far(self):
        torch = self.rt.torch
        return (torch.cat([chunk["k"] for chunk in self.chunks], dim=1),
                torch.cat([chunk["v"] for chunk in self.chunks], dim=1))

    def denoise(self):
        chunk = self.chunks[-1]
        torch = self.rt.torch
        self.use_rows(chunk["k"], chunk["v"])
        t = torch.tensor(1000.0 - 250.0 * (self.steps % 3))
        self.run("denoise", chunk_idx=len(self.chunks) - 1, chunk_partition=[c["len"] for c in self.chunks],
                 chunk_latents=self.latents(self.config["batch"], chunk["len"], LATENT_CHANNELS, 1, 1),
                 t=t, r=t - 250.0)
        self.steps += 1

    def write(self, start, length, heads, recent_window, k, v):
        chunk = self.check(start, length, k)
        if length == 0:
            if not self.chunks:
                return self.empty()
            return self.observe(self.denoise)
        kp, vp = self.padded(k), self.padded(v)
        if chunk is not None:
            self.tap.produced(start, kp, vp)
            chunk["k"], chunk["v"] = kp, vp
            return self.observe(self.denoise)
        if self.config.get("growth"):
            if length > GROWTH_FRAMES or len(self.chunks) >= GROWTH_CHUNKS:
                raise kvcheck.Outside(
                    "the buffers hold %d chunks of up to %d frames (chunk %d of %d frames)"
                    % (GROWTH_CHUNKS, GROWTH_FRAMES, len(self.chunks), length)
                )
        elif start + length > self.config["capacity"]:
            raise kvcheck.Outside(
                "AnyFlow-FAR keeps every frame: %d frames do not fit the video of C = %d frames"
                % (start + length, self.config["capacity"])
            )
        return self.observe(lambda: self.append(start, length, kp, vp))

    def append(self, start, length, kp, vp):
        self.tap.produced(start, kp, vp)
        if self.chunks:
            self.use_rows(*self.rows_so_far())
            g = self.global_end
            self.run("commit", chunk_idx=len(self.chunks) - 1,
                     chunk_partition=[c["len"] for c in self.chunks] + [length],
                     output=self.latents(self.config["batch"], g, LATENT_CHANNELS, 1, 1))
        self.current = {"start": start, "len": length, "k": kp, "v": vp}
        self.chunks.append(self.current)
        self.global_end = start + length
        self.denoise()

    def reset(self):
        self.allocate()
        self.tap.forget()
        self.global_end = 0
        self.current = None


CACHES = {"sana-wm-refiner": SanaWMRefinerCache, "anyflow-far": AnyFlowFARCache}


def parse(argv):
    parser = argparse.ArgumentParser(prog="subject.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=sorted(CACHES), default="sana-wm-refiner",
                        help="which cache to serve (default sana-wm-refiner)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks of the tiny model (default 2)")
    parser.add_argument("--full-chunk-limit", type=int, default=3,
                        help="anyflow-far: full_chunk_limit of the model config (default 3, the released checkpoints')")
    args = parser.parse_args(argv)
    if args.layers < 1 or args.full_chunk_limit < 1:
        raise SystemExit("--layers and --full-chunk-limit must be at least 1")
    return args


def _from_args(cls, argv):
    args = parse(argv)
    if CACHES[args.cache] is not cls:
        raise SystemExit("--cache %s is served by %s, not %s" % (args.cache, CACHES[args.cache].__name__, cls.__name__))
    if cls is AnyFlowFARCache:
        return cls(args.layers, args.full_chunk_limit)
    return cls(args.layers)


SanaWMRefinerCache.from_args = classmethod(_from_args)
AnyFlowFARCache.from_args = classmethod(_from_args)


if __name__ == "__main__":
    chosen = CACHES[parse(sys.argv[1:]).cache]
    sys.exit(kvcheck.serve.main([os.path.abspath(__file__) + ":" + chosen.__name__] + sys.argv[1:]))
