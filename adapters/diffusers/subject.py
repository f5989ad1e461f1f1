#!/usr/bin/env python3
"""diffusers' SANA-WM stage-2 refiner KV cache as a kvcheck-subject/1 process.

Drives, unmodified, the cache of the SANA-WM refiner of the installed
diffusers (0.42.1 by default, adapters/diffusers/setup.sh):
`SanaWMRefinerKVCache` and the transformer `SanaWMLTX2RefinerTransformer3DModel`
(whose `SanaWMLTX2RefinerAttnProcessor` prepends `[sink + history]` to the
active block and captures K/V), randomly initialised and tiny (two blocks,
no weights downloaded, CPU), and the statements of
`SanaWMLTX2Refiner.__call__` that keep the cache between forwards, which
loader.py compiles unmodified out of `pipelines/sana_wm/refiner.py`:

| kvtrace op | refiner calls (the programs of loader.py) |
|---|---|
| open | the tiny transformer; `setup`: `num_layers`, `tokens_per_frame`, `history_frames = 0`, `kv_cache = SanaWMRefinerKVCache(num_layers)` |
| the first write `0+n`, `n >= S` | `sink`: `_capture_block_kv(z[:, :, :sink_size], kv_cache_mode="capture_pre_rope")`, then `store_sink(*get_captured_pre_rope())` in every layer; for `n > S` the rest `[S, n)` is the first block (below) |
| append `G+n` | the block being denoised, if any, is finished: `commit` (`_capture_block_kv(..., "inject_and_capture_post_rope")`, the history append, `history_frames += ...`), then `window` with `kv_max_frames = C - n` and `trim`; the new block: `block` (`frame_positions`, `sink_rope_offset`, `kv_cache.sink_pe = ...`) and one `denoise` step (`self.transformer(..., kv_cache_mode="inject")`) |
| rewrite of the chunk being denoised (same start, same length) | another `denoise` step with the new rows (and `sink` again for the first chunk's sink frames) |
| write `s+0` (the probe) | the last `denoise` step again (inject mode does not store anything); with no block being denoised, an `inject` forward of one throwaway frame whose rows are left out of the view |
| evict `k` | the block being denoised is finished (`commit`), then `window` with `kv_max_frames = S + history_frames - k` and `trim` |
| reset | `kv_cache.clear()`, `history_frames = 0` |

One position is one latent frame: the latents are `1 x 1` pixels, so
`tokens_per_frame` is 1. `C` maps onto the refiner's window: before a block
of `n` frames the history is trimmed to `kv_max_frames - sink_size` with
`kv_max_frames = C - n`, so `[sink + history + block]` holds at most `C`
frames (the pipeline's `block_size=3, kv_max_frames=11` is `C = 14` with
3-frame chunks).

Visible means what attention reads: the attention tap (`kvcheck.torch`)
records the self-attention call (`attn1`) of every block of the forward that
answers the write, and identifies each key by the bytes of its K and V rows
among the rows the writes produced. The rows reach attention unchanged: a
forward hook on each `attn1.norm_k` returns the write's K rows and one on
`attn1.to_v` its V rows, and the video RoPE (`build_rotary_emb_for_absolute_positions`,
also used for the sink's shifted RoPE) is the identity rotation (`cos = 1`,
`sin = 0`), whose frame positions are recorded (`rope_calls`). Since RoPE
pairs channels, each head carries `2 * head_dim` channels, the write's in
the first half and zeros in the second, which the view leaves out. Every
block's call must read the same keys as the last block's; otherwise the
write raises `LayerMismatch`.

Left out of `hello`: `rewind` and `pin` (no such calls), head ranges,
recent windows, windows below the capacity, growth, the global sink and the
packed variant. Writes the refiner cannot make are answered with an
`Inexpressible` exception: a first chunk shorter than the sink, a rewrite
of anything but the block being denoised, a chunk that would need
`kv_max_frames < sink_size` (`n > C - S`), a gap, negative numbers.

    python adapters/diffusers/subject.py [--layers 2]
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

# The distilled schedule of refiner.py; only the timestep embedding sees it.
SIGMAS = (0.909375, 0.725, 0.421875, 0.0)
LATENT_CHANNELS = 2
CAPTION_CHANNELS = 4
TEXT_TOKENS = 2
THROWAWAY = -1  # the position the probe's throwaway frame is registered at


class Inexpressible(Exception):
    """A request no SANA-WM refinement can make of this cache."""


class LayerMismatch(RuntimeError):
    """Two blocks of one forward read different keys from their layer caches."""


def _load(layers):
    import torch

    torch.set_num_threads(1)
    from diffusers.models.transformers import transformer_sana_wm_refiner as refiner_model
    from kvcheck.torch import AttentionTap

    return types.SimpleNamespace(
        torch=torch, model=refiner_model, refiner=loader.load(), AttentionTap=AttentionTap, layers=layers
    )


class SanaWMRefinerCache(kvcheck.Subject):
    """diffusers' SANA-WM refiner cache behind kvcheck.Subject."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"

    def __init__(self, layers=2):
        self.layers = layers
        version = loader.installed_version() or "?"
        self.name = "diffusers %s SanaWMRefinerKVCache" % version
        self.runtime = Background(lambda: _load(layers))
        self.models = {}
        self.rope_calls = []

    @classmethod
    def from_args(cls, argv):
        parser = argparse.ArgumentParser(prog="subject.py", description=__doc__.split("\n\n")[0])
        parser.add_argument("--layers", type=int, default=2, help="transformer blocks of the tiny model (default 2)")
        args = parser.parse_args(argv)
        if args.layers < 1:
            raise SystemExit("--layers must be at least 1")
        return cls(args.layers)

    # -- the tiny transformer ----------------------------------------------

    def model(self, heads, head_dim, dtype):
        key = (heads, head_dim, dtype)
        if key not in self.models:
            rt, torch = self.rt, self.rt.torch
            torch.manual_seed(0)
            width = 2 * head_dim  # RoPE pairs channels: the write's head_dim, then as many zeros
            model = rt.model.SanaWMLTX2RefinerTransformer3DModel(
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
            ).to(dtype)
            model.eval()
            model.build_rotary_emb_for_absolute_positions = self.identity_rope(model, heads * width)
            for block in model.transformer_blocks:
                block.attn1.norm_k.register_forward_hook(lambda _m, _i, _o: self.rows[0])
                block.attn1.to_v.register_forward_hook(lambda _m, _i, _o: self.rows[1])
                block.attn1.register_forward_pre_hook(lambda _m, _i: self.attn1_calls.append(len(self.tap.calls)))
            model.register_forward_pre_hook(lambda _m, _i: self.attn1_calls.clear())
            self.models[key] = model
        return self.models[key]

    def identity_rope(self, model, inner):
        torch = self.rt.torch

        def build(batch_size, frame_positions, height, width, device, fps):
            self.rope_calls.append(list(frame_positions))
            tokens = len(frame_positions) * (height // model.config.patch_size) * (width // model.config.patch_size)
            shape = (batch_size, tokens, inner)
            return torch.ones(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.float32)

        return build

    # -- kvcheck.Subject ---------------------------------------------------

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch = rt.torch
        self.config = config
        self.dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[config["dtype"]]
        self.tap = getattr(self, "tap", None) or rt.AttentionTap()
        self.attn1_calls = []
        self.rows = None
        model = self.model(config["heads"], config["head_dim"], self.dtype)
        batch = config["batch"]
        generator = torch.Generator().manual_seed(1)
        self.ns = {
            "torch": torch,
            "SanaWMRefinerKVCache": rt.model.SanaWMRefinerKVCache,
            "_pack_latents": rt.refiner.pack_latents,
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
        fake._capture_block_kv = types.MethodType(rt.refiner.capture_block_kv, fake)
        self.ns["self"] = fake
        rt.refiner.run("setup", self.ns)
        self.tap.forget()
        self.rope_calls = []
        self.global_end = 0
        self.current = None  # the chunk of the latest append, while its rows may still be rewritten
        self.steps = 0

    # -- payload -----------------------------------------------------------

    def padded(self, rows):
        """`[B, n, H, D]` -> `[B, n, H, 2D]` (zeros in the second half)."""
        torch = self.rt.torch
        b, n, h, d = rows.shape
        out = torch.zeros((b, n, h, 2 * d), dtype=self.dtype)
        out[..., :d] = rows.to(self.dtype)
        return out

    def use_rows(self, k, v):
        """The rows the next forward's `attn1.norm_k` / `attn1.to_v` return."""
        b, n, h, w = k.shape
        self.rows = (k.reshape(b, n, h * w), v.reshape(b, n, h * w))

    def latents(self, frames):
        torch = self.rt.torch
        return torch.randn(self.config["batch"], LATENT_CHANNELS, frames, 1, 1).to(self.dtype)

    # -- the refiner's programs ----------------------------------------------

    def run(self, name, **variables):
        self.ns.update(variables)
        self.rt.refiner.run(name, self.ns)

    def capture_sink(self, k, v):
        self.use_rows(k, v)
        self.run("sink", z=self.latents(self.config["sink"]))

    def begin_block(self, start, end):
        self.run("block", block_start=start, block_end=end)

    def denoise(self, start, end, k, v):
        self.use_rows(k, v)
        self.run("denoise", block_start=start, block_end=end, i=self.steps % (len(SIGMAS) - 1),
                 latent_block=self.latents(end - start))
        self.steps += 1

    def commit(self):
        """Finishes the block being denoised: captured post-RoPE, appended to the history."""
        chunk, self.current = self.current, None
        if chunk is None or chunk["block"] is None:
            return
        start, end = chunk["block"]
        self.use_rows(chunk["k"][:, start - chunk["start"]:], chunk["v"][:, start - chunk["start"]:])
        self.run("commit", block_start=start, block_end=end, latent_block=self.latents(end - start))

    def trim(self, kv_max_frames):
        self.run("window", kv_max_frames=kv_max_frames)
        self.run("trim")

    # -- ops ---------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        if k is None or start < 0 or length < 0:
            raise Inexpressible("write %d+%d: no frame has a negative index or count" % (start, length))
        sink, capacity, g = self.config["sink"], self.config["capacity"], self.global_end
        chunk = self.current
        if length == 0:
            if start > g:
                raise Inexpressible("zero-length write at %d past the global end %d" % (start, g))
            return self.observe(self.probe)
        if start == g:
            room = capacity if g == 0 else capacity - sink
            if length > room:
                raise Inexpressible(
                    "a %d-frame chunk needs kv_max_frames = C - n = %d, below sink_size %d"
                    % (length, capacity - length + (sink if g == 0 else 0), sink)
                )
            if g == 0 and length < sink:
                raise Inexpressible("the sink is captured from its %d frames at once; the first chunk has %d" % (sink, length))
            return self.observe(lambda: self.append(start, length, k, v))
        if chunk is not None and start == chunk["start"] and length == chunk["len"]:
            return self.observe(lambda: self.rewrite(k, v))
        if start > g:
            raise Inexpressible("write %d+%d leaves a gap after the global end %d" % (start, length, g))
        raise Inexpressible(
            "write %d+%d: only the chunk being denoised (%s) can be rewritten; captured history is not"
            % (start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))
        )

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
            self.begin_block(*block)
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
        torch, c = self.rt.torch, self.config
        zeros = torch.zeros((c["batch"], 1, c["heads"], 2 * c["head_dim"]), dtype=self.dtype)
        self.tap.produced(THROWAWAY, zeros, zeros)
        self.begin_block(self.global_end, self.global_end + 1)
        self.denoise(self.global_end, self.global_end + 1, zeros, zeros)

    def observe(self, action):
        tap = self.tap
        tap.begin_step()
        tap.clear_calls()
        with tap:
            action()
        calls = list(self.attn1_calls)
        if not calls:
            raise kvcheck.AdapterError("the write ran no self-attention the tap could see")
        seen = [tap.observe(i) for i in calls]
        last = seen[-1]
        if last.ambiguous:
            raise kvcheck.AdapterError("rows are not byte-distinct: %s" % last.ambiguous)
        if last.unknown:
            from kvcheck.torch import UnknownRows

            raise UnknownRows(last)
        positions, k, v = last.view()
        for layer, other in enumerate(seen[:-1]):
            p, ok, ov = other.view()
            if p != positions or other.unknown or not (ok.equal(k) and ov.equal(v)):
                raise LayerMismatch(
                    "block %d read %s, block %d read %s" % (layer, p, len(seen) - 1, positions)
                )
        keep = [i for i, p in enumerate(positions) if p != THROWAWAY]
        d = self.config["head_dim"]
        index = self.rt.torch.tensor(keep, dtype=self.rt.torch.long)
        visible = [positions[i] for i in keep]
        return visible, k.index_select(1, index)[..., :d], v.index_select(1, index)[..., :d]

    def evict(self, tokens):
        if tokens is None or tokens < 0:
            raise Inexpressible("evict %s: no negative trim" % tokens)
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


if __name__ == "__main__":
    sys.exit(kvcheck.serve.main([os.path.abspath(__file__) + ":SanaWMRefinerCache"] + sys.argv[1:]))
