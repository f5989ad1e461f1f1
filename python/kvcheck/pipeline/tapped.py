"""A chunk loop driven through a library's own tiny causal Wan model, its
keys read by the attention tap (`kvcheck.torch`).

`TinyWanCache` is what the LongLive and Rolling Forcing adapters share: the
library's `CausalWanModel` built tiny and randomly initialised (one token
per latent frame, `1 x 2 x 2` latents through the `(1, 2, 2)` patch, no
weights, CPU); RoPE as the identity rotation (`model.freqs` all `1 + 0j`)
and forward hooks on each block's `self_attn.norm_k` and `self_attn.v`
that return the write's rows, so they reach attention with the bytes they
were written with; each head `2 * head_dim` wide (the model needs an even
width), the write's channels first and zeros after, which the view leaves
out; the cross-attention (flash-attention, CUDA only) returning zeros and
the SDPA fallback keeping the rows' dtype. A write is one forward of every
block inside the tap; the view is what the last block's self-attention
read, which every block must have read (`kvcheck.torch.LayerMismatch`).

The loop's requests (`write`, `serving.ChunkLoop`): a chunk appended at
the global end, a rewrite of the current chunk (a later denoising step or
the clean re-run), a probe `s+0` (the current chunk run again with the
rows it holds; before any chunk, an empty view); anything else is
`kvcheck.Outside`.

A library's subclass sets `loader` (its loader module: `load()` returns
programs with the `model` module and the `reset` code), and defines
`start_video(config)` (its cache and stand-in pipeline) and
`forward(start, kp, vp, rerun)` (one call of the library's forward);
optionally `model_options`, `adapt_model`, `adapt_module`,
`check_config`, `reset_names`, and `serving.ChunkLoop`'s `appends` and
`refusal`.
"""

import kvcheck
from kvcheck import adapter as kit

from . import serving

LATENT_CHANNELS = 2
TEXT_DIM = 4
TEXT_TOKENS = 2


class TinyWanCache(serving.ChunkLoop, kvcheck.Subject):
    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    loader = None  # the adapter's loader module
    reset_names = {}  # names the reset code reads besides self, torch and noise

    def __init__(self, layers=2):
        self.layers = layers
        self.runtime = serving.runtime(type(self).loader)
        self.models = {}
        self.tap = None

    # -- what a library's subclass says ----------------------------------------

    def model_options(self, capacity, sink):
        """Keyword arguments of `CausalWanModel` beyond the tiny sizes."""
        return {}

    def adapt_model(self, model, capacity, sink):
        """The library's own settings on the built model."""

    def adapt_module(self, cm):
        """Once per process, the model module's value-only stand-ins besides
        `attention` (which keeps the rows' dtype)."""

    def check_config(self, config):
        """kvcheck.Outside for a config the pipeline cannot run."""

    def start_video(self, config):
        """The library's cache and stand-in pipeline for a new video."""
        raise NotImplementedError

    def forward(self, start, kp, vp, rerun):
        """One forward of the chunk `[start, start+n)`; `rerun` for a rewrite
        or a probe of the current chunk."""
        raise NotImplementedError

    # -- the tiny model ----------------------------------------------------------

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
            num_heads=heads, num_layers=self.layers, **self.model_options(capacity, sink),
        )
        model.eval()
        self.adapt_model(model, capacity, sink)
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
        self.check_config(config)
        if not getattr(cm, "_kvcheck_attention", False):
            self.adapt_module(cm)
            # The SDPA fallback casts to bf16 unless told the dtype: keep the rows'.
            real = cm.attention
            cm.attention = lambda q, k, v, **kw: real(q, k, v, **dict(kw, dtype=q.dtype))
            cm._kvcheck_attention = True
        self.config = config
        self.dtype = kit.dtype(torch, config["dtype"])
        self.width = 2 * config["head_dim"]
        self.tiny = self.model(config["heads"], self.width, config["capacity"], config["sink"]).to(self.dtype)
        self.tap = self.tap or rt.AttentionTap()
        self.tap.forget()
        self.calls, self.rows = [], None
        self.global_end = 0
        self.current = None  # the latest chunk: start, len, and the rows it holds
        self.start_video(config)

    # -- one forward -------------------------------------------------------------

    def padded(self, rows):
        """`[B, n, H, D]` -> `[B, n, H, 2D]` (zeros after the first D)."""
        b, n, h, d = rows.shape
        out = self.rt.torch.zeros((b, n, h, self.width), dtype=self.dtype)
        out[..., :d] = rows.to(self.dtype)
        return out

    def hook_rows(self, kp, vp):
        """What the blocks' `norm_k` and `v` hooks return for this forward: `[B, n, H * 2D]`."""
        b, n = kp.shape[0], kp.shape[1]
        self.rows = (kp.reshape(b, n, -1), vp.reshape(b, n, -1))

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

    def run(self, start, kp, vp, rerun):
        self.tap.produced(start, kp, vp)
        self.forward(start, kp, vp, rerun)

    # -- ops -----------------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        kind, chunk = self.request(start, length, k), self.current
        if kind == "probe":
            if chunk is None:
                return self.empty_view()
            return self.observe(lambda: self.run(chunk["start"], chunk["k"], chunk["v"], True))
        kp, vp = self.padded(k), self.padded(v)
        # The adapter's own state changes only once the forward has run: a
        # forward that raises leaves the cache as the library left it, and
        # the adapter's bookkeeping as it was.
        if kind == "append":
            seen = self.observe(lambda: self.run(start, kp, vp, False))
            self.current = {"start": start, "len": length, "k": kp, "v": vp}
            self.global_end = start + length
            return seen
        seen = self.observe(lambda: self.run(start, kp, vp, True))
        chunk["k"], chunk["v"] = kp, vp
        return seen

    def reset(self):
        """The pipeline's reset loop (a new video on the allocated cache)."""
        torch = self.rt.torch
        namespace = {"self": self.pipe, "torch": torch, "noise": torch.zeros(1)}  # the loop reads noise.device
        namespace.update(self.reset_names)
        exec(self.rt.programs.reset, namespace)
        self.tap.forget()
        self.global_end = 0
        self.current = None
