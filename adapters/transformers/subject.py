#!/usr/bin/env python3
"""transformers' real KV caches as a kvcheck-subject/1 process.

Drives the classes of `transformers/cache_utils.py`, unmodified, through the
calls a transformers model and `generate()` make on them, one attention
layer (`layer_idx = 0`) built from a one-layer `PretrainedConfig`:

| kvtrace op | transformers calls |
|---|---|
| open | `--cache dynamic`: `DynamicCache(config=cfg)`; `--cache static`: `StaticCache(config=cfg, max_cache_len=capacity)`; `--cache hqq`, `quanto`, `fp8`: `QuantizedCache(backend, cfg, ...)`. `cfg.layer_types` is `["sliding_attention"]` with `sliding_window = window` when the config's window is below its capacity (so the cache builds `DynamicSlidingWindowLayer` / `StaticSlidingWindowLayer`), else `["full_attention"]` (`DynamicLayer` / `StaticLayer` / the quantized layers). `DynamicCache` gets `activate_past_recording()`, as assisted decoding does, so that its sliding layer can be cropped |
| write G, n (append) | `mask = create_causal_mask(...)` (or `create_sliding_window_causal_mask`) with `cache=`, eager attention, before the update, as a model builds its masks before its layers run; then `keys, values = cache.update(k, v, 0)` with `[B, H, n, D]` tensors |
| write s, n with s < G <= s + n (rewrite of the tail) | `cache.crop(-(G - s))` then the append above: how assisted decoding drops rejected draft tokens and writes the accepted ones. Refused, as `generate()` refuses, when `cache.is_croppable` is false (`NotCroppable`) |
| write s, n with s + n < G (rewrite inside the stream) | the rows of `[s + n, G)` copied out of the layer's own tensors, the crop and append above, then those rows re-appended by the same calls (`kvcheck.Outside` when the layer no longer holds them) |
| write s, 0 (the read-only probe) | no call: the rows the layer holds (`layer.keys`) that the same mask function lets a query at `G - 1` read (quantized: a zero-length `update`) |
| rewind to | `cache.crop(-(G - to))` under the same `is_croppable` check |
| reset | `cache.reset()` |

The global end is the library's own `cache.get_seq_length(0)`.

Visible means what attention reads: the columns of the returned keys that
the mask's *last* row (the chunk's last query) admits, in the order the
returned tensors hold them. A mask wider than the returned keys is sliced
to them (`mask[..., :K]`, so that the trace goes on; transformers' attention
functions do not slice: eager attention raises on the size mismatch, SDPA
too unless it builds no mask, as for a one-token step below the window); a
mask narrower than the keys cannot be added to the scores and is raised as
`MaskShapeMismatch`. K/V bytes are the library's returned tensors, those
columns gathered (no arithmetic).

Positions. The caches return tensors, not positions. Every cache except
the quantized ones is paired with a *twin*: the same class and config,
batch 1, one head, head_dim 1, float64, that receives the same calls with
each row tagged `position + 1` (0: a slot never written). Column j of the
twin's returned keys is the position column j of the real cache's keys
holds. A never-written column that the mask admits is reported at the
position the mask takes it for (`kv_offset + j`). The quantized caches
cannot carry tags (they round them); their columns are reported at the
positions the mask takes them for, and they declare no values (their K/V
are lossy by design; only outcomes, global ends and positions compare).

What it cannot express is left out of its capabilities: `evict` and `pin`
(no such calls), head ranges (every call carries all heads), recent
windows (a layer's window is fixed), the packed variant, `growth` on the
static cache (it never grows), windows on the quantized cache
(`QuantizedCache` refuses sliding layers), `rewind` on the quantized cache
(not croppable). A write that starts past the global end has no call (the
cache appends at its own length): it is answered as outside the adapter's
domain (`kvcheck.Outside`: kvcheck cuts the case there) and changes nothing.
Sinks have no counterpart: `sink` is ignored (docs/transformers.md lists
what that changes).

    adapters/transformers/.venv/bin/python adapters/transformers/subject.py [--cache dynamic|static|hqq|quanto|fp8] [--mask NAME]...
"""

import sys

import kvcheck
from kvcheck import adapter as kit

CACHES = ("dynamic", "static", "hqq", "quanto", "fp8")
QUANTIZED = ("hqq", "quanto", "fp8")



class NotCroppable(Exception):
    """`cache.is_croppable` is false: `generate()` refuses to crop then."""


class MaskShapeMismatch(Exception):
    """The mask has fewer columns than the keys the cache returned: eager
    attention cannot add it to the scores."""


class NegativeLength(Exception):
    """The cache reports a negative length (a crop of more tokens than it
    held): no global end can be reported."""


class Masked(kvcheck.Refused):
    """A request held back by --mask (a known difference), refused with the
    contract's kind for it."""


def _version(dist):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _load_transformers():
    """torch and transformers' cache and mask modules (run by kit.Background)."""
    import types

    import torch

    torch.set_num_threads(1)
    import transformers
    from transformers import cache_utils, masking_utils

    return types.SimpleNamespace(
        torch=torch, transformers=transformers, cache_utils=cache_utils, masking_utils=masking_utils
    )


class Layer:
    """One transformers cache (one layer) built for a kvtrace config, and the
    mask a model would build for it."""

    def __init__(self, rt, kind, config, batch, heads, head_dim, dtype):
        self.rt = rt
        self.kind = kind
        self.batch, self.heads, self.head_dim, self.dtype = batch, heads, head_dim, dtype
        capacity = config["capacity"]
        window = config.get("window")
        self.sliding = window is not None and window < capacity
        cfg = rt.transformers.PretrainedConfig(
            num_hidden_layers=1,
            layer_types=["sliding_attention" if self.sliding else "full_attention"],
            sliding_window=window if self.sliding else None,
        )
        cfg._attn_implementation = "eager"
        self.cfg = cfg
        cu = rt.cache_utils
        if kind == "dynamic":
            self.cache = cu.DynamicCache(config=cfg)
            # What assisted decoding and the deferred stop do before they crop.
            self.cache.activate_past_recording()
        elif kind == "static":
            self.cache = cu.StaticCache(config=cfg, max_cache_len=capacity)
        else:
            self.cache = cu.QuantizedCache(kind, cfg)

    @property
    def layer(self):
        return self.cache.layers[0]

    def seq_length(self):
        return int(self.cache.get_seq_length(0))

    def mask_row(self, length):
        """The last query's row of the mask a model builds before appending
        `length` tokens: (allowed columns as a bool list, kv_offset)."""
        rt = self.rt
        torch = rt.torch
        embeds = torch.zeros(self.batch, length, 1)
        build = (
            rt.masking_utils.create_sliding_window_causal_mask
            if self.sliding
            else rt.masking_utils.create_causal_mask
        )
        mask = build(config=self.cfg, inputs_embeds=embeds, attention_mask=None, cache=self.cache)
        _, kv_offset = self.cache.get_mask_sizes(length, 0)
        if mask is None:
            return None, int(kv_offset)
        row = mask[0, 0, -1]
        allowed = row == 0 if row.dtype != torch.bool else row
        return allowed.tolist(), int(kv_offset)

    def probe_row(self, columns):
        """Which of `columns` held rows a query at G - 1 may read, by the
        mask function the model's mask is built from."""
        mu = self.rt.masking_utils
        torch = self.rt.torch
        g = self.seq_length()
        fn = (
            mu.sliding_window_causal_mask_function(self.cfg.sliding_window)
            if self.sliding
            else mu.causal_mask_function
        )
        kv = torch.tensor(columns, dtype=torch.long)
        q = torch.full_like(kv, g - 1)
        zero = torch.zeros_like(kv)
        return fn(zero, zero, q, kv).tolist()


class TransformersCache(kvcheck.Subject):
    """transformers' caches behind kvcheck.Subject (see the module docs)."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bhnd"

    def __init__(self, cache="dynamic", masks=()):
        if cache not in CACHES:
            raise ValueError("--cache %s: expected one of %s" % (cache, ", ".join(CACHES)))
        self.kind = cache
        self.masks = list(masks)
        self.name = " ".join(
            ["transformers", _version("transformers") or "?", cache] + ["--mask " + m for m in self.masks]
        )
        quantized = cache in QUANTIZED
        self.values = not quantized
        self.features = ("growth",) if cache != "static" else ()
        if not quantized:
            self.features += ("window",)
        self.ops = ("write", "reset") if quantized else ("write", "rewind", "reset")
        self.runtime = kit.Background(_load_transformers)
        self.pair = None

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__)
        parser.add_argument("--cache", default="dynamic", choices=CACHES, help="which cache class (default dynamic)")
        kit.add_mask_option(parser, MASKS)
        args = parser.parse_args(argv)
        return cls(args.cache, args.mask)

    # -- the cache and its twin -------------------------------------------

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch = rt.torch
        self.config = config
        if "sink" in self.masks and config["sink"] > 0:
            raise kvcheck.Outside("--mask sink: %d sink tokens, which transformers has no counterpart for" % config["sink"])
        self.dtype = kit.dtype(torch, config["dtype"])
        self.real = Layer(rt, self.kind, config, config["batch"], config["heads"], config["head_dim"], self.dtype)
        self.twin = None
        if self.kind not in QUANTIZED:
            self.twin = Layer(rt, self.kind, config, 1, 1, 1, torch.float64)

    @property
    def global_end(self):
        end = self.real.seq_length()
        if end < 0:
            raise NegativeLength("get_seq_length() is %d after a crop of more tokens than the layer held" % end)
        return end

    def _both(self, call):
        """`call(layer)` on the twin (when there is one), then the real cache (kit.both)."""
        return kit.both(call, self.twin, self.real)

    def _tags(self, start, length):
        torch = self.rt.torch
        return kit.tags(torch, start, length, torch.float64).reshape(1, 1, length, 1)

    def _crop(self, tokens):
        if not self.real.cache.is_croppable:
            raise NotCroppable(
                "cache.is_croppable is false for %s: generate() does not crop it" % self.real.layer.__class__.__name__
            )
        if "crop-past-held" in self.masks:
            reason = _crop_past_held(self, tokens)
            if reason:
                raise kvcheck.Outside("--mask crop-past-held: %s" % reason)
        self._both(lambda layer: layer.cache.crop(-tokens))

    # -- ops ----------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        self._masked("write", {"start": start, "len": length})
        g = self.global_end
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no tensor has a negative length" % (start, length))
        if start > g:
            raise kvcheck.Outside("write at %d past the global end %d: the cache appends at its length" % (start, g))
        if length == 0:
            return self._probe()
        later = None
        if start + length < g:
            later = self._held(start + length, g)
        if start < g:
            self._crop(g - start)
        view = self._append(start, k, v)
        if later is not None:
            # The rows after the rewritten ones go back as they were: the
            # cache's own tensors, re-appended by the same calls.
            view = self._append(start + length, *later)
        return view

    def _append(self, start, k, v):
        """One forward's cache traffic: the mask, then `cache.update`."""
        length = k.shape[2]
        rows, offset = self.real.mask_row(length)
        tags = self._tags(start, length)
        twin, (keys, values) = self._both(
            lambda layer: layer.cache.update(k, v, 0) if layer is self.real else layer.cache.update(tags, tags, 0)
        )
        return self._view(rows, offset, keys, values, None if twin is None else twin[0])

    def _held(self, begin, end):
        """The rows of positions [begin, end) the layer holds, as (K, V)
        copies of its own tensors, for a rewrite that ends before the global
        end; kvcheck.Outside when the layer no longer holds them all."""
        what = "write ending at %d before the global end %d" % (begin, end)
        if self.twin is None:
            raise kvcheck.Outside("%s: the quantized cache cannot give back its rows unrounded" % what)
        layer, twin = self.real.layer, self.twin.layer
        tags = twin.keys[0, 0, :, 0].tolist() if twin.is_initialized and twin.keys.dim() == 4 else []
        column = {kit.position(t): j for j, t in enumerate(tags) if t > 0}
        missing = [p for p in range(begin, end) if p not in column]
        if missing:
            raise kvcheck.Outside("%s: the cache no longer holds positions %s to re-append" % (what, missing))
        torch = self.rt.torch
        index = torch.tensor([column[p] for p in range(begin, end)], dtype=torch.long)
        return layer.keys.index_select(2, index).clone(), layer.values.index_select(2, index).clone()

    def _view(self, rows, offset, keys, values, twin_keys):
        count = keys.shape[2]
        if rows is None:
            rows = [True] * count
        if len(rows) < count:
            raise MaskShapeMismatch(
                "the mask has %d key columns but the cache returned %d keys" % (len(rows), count)
            )
        columns = [j for j in range(count) if rows[j]]
        visible = []
        for j in columns:
            tag = 0 if twin_keys is None else int(twin_keys[0, 0, j, 0].item())
            visible.append(kit.position(tag) if tag > 0 else offset + j)
        if not self.values:
            return visible
        torch = self.rt.torch
        index = torch.tensor(columns, dtype=torch.long)
        return visible, keys.index_select(2, index), values.index_select(2, index)

    def _probe(self):
        if self.kind in QUANTIZED:
            if self.global_end == 0:
                return []
            # The quantized layers hold their rows quantized: a zero-length
            # update (no residual flush: the residual only grows) returns
            # them dequantized, and a query at G - 1 reads them all.
            keys, _ = self.real.cache.update(*self._empty(), 0)
            return list(range(keys.shape[2]))
        layer = self.real.layer
        keys = getattr(layer, "keys", None)
        if not layer.is_initialized or keys is None or keys.dim() != 4:
            empty, _ = self._empty()
            return [], empty, empty
        count = keys.shape[2]
        twin_keys = self.twin.layer.keys if self.twin is not None else None
        positions = [
            # An untagged column (tag 0) becomes -1, which no query reads.
            int(twin_keys[0, 0, j, 0].item()) - kit.TAG if twin_keys is not None else j for j in range(count)
        ]
        allowed = self.real.probe_row(positions)
        rows = [ok and p >= 0 for ok, p in zip(allowed, positions)]
        return self._view(rows, 0, keys, layer.values, twin_keys)

    def _empty(self):
        torch = self.rt.torch
        shape = (self.config["batch"], self.config["heads"], 0, self.config["head_dim"])
        return torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)

    def rewind(self, to):
        if self._masked("rewind", {"to": to}):
            return
        if "rewind-window" in self.masks and self.real.sliding and self.global_end >= self.config["window"]:
            raise kvcheck.Outside("--mask rewind-window: a crop keeps window - 1 rows of a sliding layer (T3)")
        # With to > G this is a positive crop, which every layer refuses:
        # passed on as is, so that the library answers.
        self._crop(self.global_end - to)

    def reset(self):
        self._both(lambda layer: layer.cache.reset())

    def _masked(self, name, body):
        """Applies the masks: a held-back request is refused with its kind,
        or, for a mask without one, skipped (True: make no call)."""
        found = kit.held_back(MASKS, self.masks, self, name, body)
        if found is None:
            return False
        mask, kind, reason = found
        if kind is None:
            print("--mask %s: %s: call skipped" % (mask, reason), file=sys.stderr)
            return True
        raise Masked(kind, "--mask %s: %s" % (mask, reason))


def _chunk_over_window(subject, name, body):
    window = subject.config.get("window")
    if name == "write" and subject.real.sliding and body["len"] > window:
        return "chunk of %d tokens wider than the sliding window %d" % (body["len"], window)


def _crop_uninitialized(subject, name, body):
    layer = subject.real.layer
    if name == "rewind" and body["to"] == 0 and subject.real.sliding and not layer.is_initialized:
        return "rewind 0 of a sliding layer that holds nothing yet"


def _static_overflow(subject, name, body):
    if name == "write" and subject.kind == "static" and not subject.real.sliding:
        end = max(body["start"] + body["len"], subject.global_end)
        if body["len"] > 0 and end > subject.config["capacity"]:
            return "write %d+%d past max_cache_len %d" % (body["start"], body["len"], subject.config["capacity"])


def _crop_past_held(subject, tokens):
    """Why a crop of `tokens` needs rows the sliding layer no longer holds
    (the next forward reads the `window - 1` positions before the new
    length), or None."""
    real = subject.real
    keys = getattr(real.layer, "keys", None)
    if not real.sliding or tokens <= 0 or not real.layer.is_initialized or keys is None or keys.dim() != 4:
        return None
    length, held = real.seq_length(), keys.shape[2]
    new = length - tokens
    if new < 0 or new - min(subject.config["window"] - 1, new) < length - held:
        return "crop of %d tokens from a sliding layer of length %d that holds its last %d rows" % (tokens, length, held)
    return None


def _over_crop(subject, name, body):
    if name == "rewind" and body["to"] < 0:
        return "rewind to %d below 0 (crop of more tokens than the cache holds)" % body["to"]


# name -> (what it holds back, the contract kind it answers, test)
MASKS = {
    "chunk-over-window": (
        "chunks wider than the sliding window (its first rows fall outside the last query's window)",
        "window_too_small",
        _chunk_over_window,
    ),
    "crop-uninitialized": (
        "rewinds to 0 of a sliding layer before its first update (crop raises AttributeError there)",
        None,
        _crop_uninitialized,
    ),
    "static-overflow": (
        "writes past max_cache_len on StaticLayer (the failed update has already advanced its length)",
        "chunk_too_large",
        _static_overflow,
    ),
    "over-crop": ("rewinds to a negative position", "invalid_argument", _over_crop),
    # Held back as outside, at the crop or at open, not by _masked.
    "crop-past-held": (
        "crops (rewinds, rewrites) of a sliding layer that need rows it no longer holds (finding 3): answered as outside",
        None,
        lambda *_: None,
    ),
    "rewind-window": (
        "rewinds of a sliding layer that has reached its window (the crop keeps window - 1 rows, T3): answered as outside",
        None,
        lambda *_: None,
    ),
    "sink": ("configs with sink tokens (transformers has none): answered as outside at open", None, lambda *_: None),
}


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "TransformersCache"))
