#!/usr/bin/env python3
"""mlx-lm's real KV caches as a kvcheck-subject/1 process.

Drives the classes of `mlx_lm/models/cache.py`, unmodified, the way mlx-lm's
generation loop and its models call them (`generate_step`, the attention
layers of `mlx_lm/models/*.py`, `trim_prompt_cache` for speculative decoding
and prompt-cache reuse):

| kvtrace op | mlx-lm calls |
|---|---|
| open | `RotatingKVCache(max_size=capacity, keep=sink)` (`--cache rotating`, what `make_prompt_cache(model, max_kv_size)` builds), `KVCache()` (`--cache kv`, no capacity: it grows), the continuous-batching classes `BatchRotatingKVCache(max_size=capacity, left_padding=[0] * batch)` (`--cache batch-rotating`, no keep) and `BatchKVCache(left_padding=[0] * batch)` (`--cache batch-kv`), `QuantizedKVCache(group_size, bits)` (`--cache quantized`, what `maybe_quantize_kv_cache` swaps in for `kv_bits`) or `ChunkedKVCache(chunk_size)` (`--cache chunked`, Llama 4's chunked-attention layers; chunk_size `--chunk-size` or the config's capacity) |
| write G, n (append) | `mask = cache.make_mask(n, window_size=w)` first, as a model does before its layers run, then `keys, values = cache.update_and_fetch(k, v)` with `[B, H, n, D]` arrays; `w` is the config's `window` when it is below the capacity (a sliding-window layer), else none |
| write s, n with s < G <= s + n (rewrite of the tail) | `trim_prompt_cache([cache], G - s)` (refused with `NotTrimmable` when `can_trim_prompt_cache` says no), then the append above: how speculative decoding rewrites rejected tokens |
| write G, n on `chunked` | `cache.maybe_trim_front()` first (Llama 4's model does it for every chunked layer before a forward pass), Llama 4's chunk mask from `start_position` and `offset`, then `update_and_fetch`; a tail rewrite whose trim comes up short raises `ShortTrim` |
| write s, 0 (probe) | `cache.keys_and_values()`: the rows the cache holds for the next attention call |
| rewind to | `trim_prompt_cache([cache], G - to)` under the same `can_trim_prompt_cache` check; the global end is the cache's offset after it (a trim that trims nothing raises `ShortTrim`) |

Visible means what attention reads: the positions of the returned key
columns that the mask lets the chunk's *last* query read (all of them when
the mask is `None` or `"causal"`). mlx-lm applies RoPE before caching, so
attention is the same for any order of the key columns (with the mask's
columns permuted alike): the adapter reports the visible columns in
ascending position order, moving rows only. K/V bytes are the library's own
returned arrays, gathered by column.

What it cannot express is left out of its capabilities: `evict`, `pin` and
`reset` (no such calls; a pipeline builds a new cache), head ranges (every
call carries all heads), recent windows (a layer's window is fixed), the
packed variant (`QuantizedKVCache` quantizes every row at once with
`mx.quantize` groups of 32-128 values, not docs/contract.md §6's cold
chunks of per-row int8/int4, and returns packed tuples: it is checked as the
dense variant, on positions and global end, or with `--values dequantized`
on `mx.dequantize` of its rows; a row of D values is repeated to fill whole
groups, see `tiling`). A write that
starts past the global end, or a rewrite that ends before it, has no call
(the cache appends at its offset): it is answered as outside the adapter's
domain (`kvcheck.Outside`: kvcheck cuts the case there) and changes nothing.

Positions. The caches return arrays, not positions. Every cache is paired
with a *twin*: a second instance of the same class and arguments, batch 1,
one head, head_dim 1, float32, that receives the same calls with each row
tagged `position + 1`. Column j of the twin's returned keys is the
position column j of the real cache's returned keys holds, without
re-implementing mlx-lm's index arithmetic; a row no write reached (tag 0,
e.g. the gap a trim by a negative count opens) takes the position of its
place next to its neighbours.

`quantized` and `chunked` declare their domain (kvcheck-subject/1
revision 3): what a generation loop asks, appends, the latest chunk again,
trims and reads, never a gap, an older chunk or a negative count.

Built on `kvcheck.Subject` (python/kvcheck): the base class owns the
protocol, this file only maps ops onto mlx-lm's calls.

    adapters/mlx-lm/.venv/bin/python adapters/mlx-lm/subject.py [--cache rotating|kv|batch-rotating|batch-kv|quantized|chunked] [--keep K] [--mask NAME]...
        [--group-size G --bits B --values none|dequantized] [--chunk-size N]
"""

import kvcheck
from kvcheck import adapter as kit

CACHES = ("rotating", "kv", "batch-rotating", "batch-kv", "quantized", "chunked")

# The requests a generation loop makes of QuantizedKVCache and ChunkedKVCache
# (kvcheck-subject/1 revision 3, `domain`): appends at the offset, the
# latest chunk again (trim then append), trims (rewinds), reads; never a
# gap, a rewrite that ends before the offset, or a negative count.
LOOP_DOMAIN = {"rewrites": "latest", "gaps": False, "malformed": False}



class NotTrimmable(Exception):
    """`can_trim_prompt_cache` refuses: mlx-lm's pipelines do not trim then."""


def load_runtime():
    """mlx, numpy and mlx-lm's cache module (run by kit.Background at
    start-up, so that `hello` is answered at once and the first `open` waits
    only for what is left)."""
    import types

    import mlx.core as mx
    import numpy as np
    from mlx_lm.models import cache

    mx.set_default_device(mx.cpu)
    return types.SimpleNamespace(mx=mx, np=np, cache=cache)


class Pair:
    """The real cache and its position-tagged twin, driven call for call."""

    def __init__(self, rt, config, kind, keep=None, group_size=64, bits=8, chunk_size=None, dequantize=False):
        self.rt = rt
        self.kind = kind
        self.config = config
        self.keep = config["sink"] if keep is None else keep
        self.dtype = config["dtype"]
        self.group_size, self.bits, self.dequantize = group_size, bits, dequantize
        # Llama 4's chunked attention: ChunkedKVCache(chunk_size), or with
        # --cache kv --chunk-size N the same mask over a KVCache that never
        # drops its front (the differential oracle of the chunked cache).
        self.chunk_size = chunk_size if chunk_size is not None else (config["capacity"] if kind == "chunked" else None)
        window = config.get("window")
        # A sliding-window layer passes its window to make_mask; a plain
        # layer passes none (RotatingKVCache then windows by max_size).
        self.window_size = window if window is not None and window < config["capacity"] else None
        self.real = self._build(config["batch"])
        self.twin = self._build(1)

    def _build(self, batch):
        cache, rows = self.rt.cache, [0] * batch
        if self.kind == "rotating":
            return cache.RotatingKVCache(max_size=self.config["capacity"], keep=self.keep)
        if self.kind == "batch-rotating":
            return cache.BatchRotatingKVCache(max_size=self.config["capacity"], left_padding=rows)
        if self.kind == "batch-kv":
            return cache.BatchKVCache(left_padding=rows)
        if self.kind == "quantized":
            return cache.QuantizedKVCache(group_size=self.group_size, bits=self.bits)
        if self.kind == "chunked":
            return cache.ChunkedKVCache(self.chunk_size)
        return cache.KVCache()

    def global_end(self):
        # The batch caches keep one offset per row (all equal: no padding).
        offset = self.real.offset
        return int(offset) if isinstance(offset, int) else int(offset[0].item())

    def array(self, payload):
        """The payload (numpy, `[B, H, n, D]`, bf16 as uint16 bits) as mlx's array;
        for QuantizedKVCache each row tiled to whole quantization groups."""
        mx = self.rt.mx
        out = mx.array(payload)
        out = out.view(mx.bfloat16) if self.dtype == "bf16" else out
        if self.kind == "quantized":
            reps, width = tiling(out.shape[-1], self.group_size)
            if reps > 1:
                out = mx.concatenate([out] * reps, axis=-1)
            out = out[..., :width]
        return out

    def tags(self, start, length):
        mx = self.rt.mx
        tags = kit.tags(mx, start, length, mx.float32).reshape(1, 1, length, 1)
        if self.kind == "quantized":
            # One group per row, 0 then the tag: min 0 and max the tag, which
            # every bit width dequantizes back to the tag exactly.
            rest = mx.broadcast_to(tags, (1, 1, length, self.group_size - 1))
            tags = mx.concatenate([mx.zeros((1, 1, length, 1), dtype=mx.float32), rest], axis=-1)
        return tags

    def twin_tags(self, twin_keys):
        """The tag of every column of the twin's returned keys."""
        if self.kind == "quantized":
            mx = self.rt.mx
            if width(twin_keys) == 0:
                return []  # mx.dequantize cannot take an empty array
            rows = mx.dequantize(*twin_keys, group_size=self.group_size, bits=self.bits)
            return [int(round(t)) for t in rows[0, 0, :, -1].tolist()]
        return twin_keys[0, 0, :, 0].tolist()

    def mask(self, cache, length):
        if self.chunk_size is not None:
            return self.chunk_mask(cache, length)
        if self.kind in ("rotating", "batch-rotating"):
            return cache.make_mask(length, window_size=self.window_size)
        return cache.make_mask(length, return_array=False, window_size=self.window_size)

    def chunk_mask(self, cache, length):
        """Llama 4's chunked-attention mask (`mlx_lm/models/llama4.py`,
        `LlamaModel.__call__`), over the keys `update_and_fetch` returns:
        columns `start_position .. offset + length`."""
        mx, chunk = self.rt.mx, self.chunk_size
        start, offset = getattr(cache, "start_position", 0), cache.offset
        end = offset + length
        linds = mx.arange(start, end)
        rinds = mx.arange(offset, end)[:, None]
        block_pos = mx.abs((linds // chunk) - (rinds // chunk))
        token_pos = linds <= rinds
        return (block_pos == 0) & token_pos

    def trim(self, count):
        """`trim_prompt_cache` on both caches, refused as a pipeline would."""
        cache = self.rt.cache
        if not cache.can_trim_prompt_cache([self.real]):
            raise NotTrimmable(
                "can_trim_prompt_cache is false (%s offset %d, max_size %s)"
                % (type(self.real).__name__, self.real.offset, getattr(self.real, "max_size", None))
            )
        if hasattr(self.real, "can_trim") and not self.real.can_trim(count):
            # A cache that says which trims it can do in full (a ChunkedKVCache
            # with docs/findings/mlx-lm-chunked-trim-below-dropped-front.diff):
            # its server does not reuse it for the others.
            raise NotTrimmable(
                "%s.can_trim(%d) is false (offset %d, start_position %s)"
                % (type(self.real).__name__, count, self.real.offset, getattr(self.real, "start_position", None))
            )
        cache.trim_prompt_cache([self.twin], count)
        return cache.trim_prompt_cache([self.real], count)

    def before_forward(self):
        """What a model does to its caches before a forward pass: Llama 4
        drops the front of every chunked layer's cache beyond one chunk."""
        for c in (self.real, self.twin):
            if hasattr(c, "maybe_trim_front"):
                c.maybe_trim_front()

    def write(self, start, length, k, v):
        g = self.global_end()
        if length < 0 or start < 0:
            raise kvcheck.Outside("start %d, len %d cannot be a token range" % (start, length))
        if start > g:
            raise kvcheck.Outside("write at %d past the cache offset %d: update_and_fetch appends at the offset" % (start, g))
        if length == 0:
            return self.read()
        if start + length < g:
            raise kvcheck.Outside(
                "rewrite of %d..%d ends before the offset %d: trimming to %d would drop %d..%d"
                % (start, start + length, g, start, start + length, g)
            )
        keys, values = self.array(k), self.array(v)
        if start < g:
            trimmed = self.trim(g - start)
            if self.global_end() != start:
                raise ShortTrim(
                    "trim_prompt_cache trimmed %d of %d tokens (%s offset %d, start_position %s): the append would land at %d, not %d"
                    % (trimmed, g - start, type(self.real).__name__, self.global_end(), getattr(self.real, "start_position", None), self.global_end(), start)
                )
        self.before_forward()
        mask = self.mask(self.real, length)
        twin_keys, _ = self.twin.update_and_fetch(self.tags(start, length), self.tags(start, length))
        out_k, out_v = self.real.update_and_fetch(keys, values)
        return self.view(twin_keys, out_k, out_v, self.columns(twin_keys, mask))

    def read(self):
        """The rows the cache hands the next attention call (no query reads)."""
        if self.real.keys is None:
            shape = (self.config["batch"], self.config["heads"], 0, self.config["head_dim"])
            empty = self.rt.np.zeros(shape, dtype=self.rt.np.uint16 if self.dtype == "bf16" else None)
            return [], empty, empty
        twin_keys, _ = self.twin.keys_and_values()
        out_k, out_v = self.real.keys_and_values()
        return self.view(twin_keys, out_k, out_v, list(range(width(twin_keys))))

    def columns(self, twin_keys, mask):
        """The key columns the chunk's last query reads under `mask`."""
        width_ = width(twin_keys)
        if mask is None or isinstance(mask, str):
            return list(range(width_))  # no mask, or "causal": the last query reads every key
        last = [bool(a) for a in mask.reshape(-1, mask.shape[-1])[-1].tolist()]
        if len(last) != width_:
            raise ValueError("the mask gave %d key columns, update_and_fetch returned %d" % (len(last), width_))
        return [j for j, allowed in enumerate(last) if allowed]

    def view(self, twin_keys, out_k, out_v, columns):
        """Visible positions in ascending order and the library's own K/V
        rows gathered in that order (numpy, `[B, H, L, D]`)."""
        mx = self.rt.mx
        tags = untagged_as_neighbours(self.twin_tags(twin_keys))
        rows = sorted(columns, key=lambda j: (tags[j], j))
        visible = [kit.position(tags[j]) for j in rows]
        index = mx.array(rows, dtype=mx.int32)
        return visible, self.numpy(self.gather(out_k, index)), self.numpy(self.gather(out_v, index))

    def gather(self, out, index):
        if isinstance(out, tuple):
            return tuple(self.rt.mx.take(part, index, axis=2) for part in out)
        return self.rt.mx.take(out, index, axis=2)

    def real_dtype(self):
        return kit.dtype(self.rt.mx, self.dtype)

    def numpy(self, array):
        if isinstance(array, tuple):
            # QuantizedKVCache's (packed, scales, biases): what attention
            # reads, mx.dequantize of them, on the row's own D columns.
            if not self.dequantize:
                return None
            mx = self.rt.mx
            b, h, n = array[0].shape[:3]
            if n == 0:  # mx.dequantize cannot take an empty array
                array = mx.zeros((b, h, 0, self.config["head_dim"]), dtype=self.real_dtype())
            else:
                array = mx.dequantize(*array, group_size=self.group_size, bits=self.bits)[..., : self.config["head_dim"]]
                array = array.astype(self.real_dtype())
        if self.dtype == "bf16":
            array = array.view(self.rt.mx.uint16)
        return self.rt.np.array(array)

    def rewind(self, to):
        g, count = self.global_end(), self.global_end() - to
        trimmed = self.trim(count)
        if 0 <= to and trimmed < count and self.global_end() == g:
            # trim_prompt_cache trimmed nothing: a caller that reads its count
            # (the server's prompt cache) does not reuse this cache.
            raise ShortTrim(
                "trim_prompt_cache trimmed %d of %d tokens (%s offset %d, start_position %s)"
                % (trimmed, count, type(self.real).__name__, g, getattr(self.real, "start_position", None))
            )


def width(keys):
    """How many key columns a cache returned (QuantizedKVCache: a tuple)."""
    return (keys[0] if isinstance(keys, tuple) else keys).shape[2]


class ShortTrim(Exception):
    """`trim_prompt_cache` trimmed fewer tokens than asked (ChunkedKVCache
    caps a trim at the rows it still holds): the append that follows would
    land at another position than the caller's, and a caller that reads the
    count does not reuse the cache."""


def tiling(head_dim, group_size):
    """How a row of `head_dim` values fills whole quantization groups:
    (copies of the row side by side, width kept). `mx.quantize` takes groups
    of 32, 64 or 128 values along the last axis; a row narrower than a whole
    number of groups is repeated and cut to the next multiple of
    `group_size`, so that each group's minimum and maximum are those of the
    row's own values (zeros would widen the range)."""
    width = -(-head_dim // group_size) * group_size
    return -(-width // head_dim), width


def chunk_columns(start, offset, length, chunk):
    """The key columns (`start .. offset + length`) that the last query of a
    chunk of `length` tokens at `offset` reads under Llama 4's chunked mask:
    its own attention chunk, up to itself. Pure Python, as a reference for
    the adapter's tests; the adapter uses the model's mx formula."""
    last = offset + length - 1
    return [j for j, p in enumerate(range(start, offset + length)) if p // chunk == last // chunk and p <= last]


def untagged_as_neighbours(tags):
    """Tags with each 0 (a row no write reached, e.g. the gap a trim by a
    negative count leaves) replaced by the position its place in the buffer
    stands for: one past the row before it, or one before the row after it."""
    out = list(tags)
    for j in range(len(out)):
        if out[j] == 0 and j > 0 and out[j - 1] != 0:
            out[j] = out[j - 1] + 1
    for j in reversed(range(len(out))):
        if out[j] == 0 and j + 1 < len(out) and out[j + 1] > 1:
            out[j] = out[j + 1] - 1
    return [t if t != 0 else 1 for t in out]


# --mask NAME -> (what it holds back, contract kind, test). Each holds back
# only requests the contract refuses on their arguments and the global end
# alone, so with masks the engines look past a difference already recorded
# in docs/mlx-lm.md; every finding is confirmed on the unmasked subject.
def _chunk_fit(pair, name, body):
    if name != "write" or body.get("len", 0) <= 0 or pair.config.get("growth"):
        return None
    sink = min(pair.config["sink"], body["start"])
    room = pair.config["capacity"]
    if body["len"] + sink > room:
        return "a chunk of %d beside %d sink tokens does not fit in capacity %d" % (body["len"], sink, room)


def _window_fit(pair, name, body):
    if name != "write" or body.get("len", 0) <= 0:
        return None
    window = pair.config.get("window") or pair.config["capacity"]
    if pair.config.get("growth") and window >= pair.config["capacity"]:
        return None  # no window: a growing cache takes any chunk
    sink = min(pair.config["sink"], body["start"])
    if body["len"] + sink > window:
        return "a chunk of %d beside %d sink tokens does not fit in window %d" % (body["len"], sink, window)


def _rewind_args(pair, name, body):
    if name == "rewind" and (body.get("to", 0) < 0 or body.get("to", 0) > pair.global_end()):
        return "rewind to %d outside 0..%d" % (body["to"], pair.global_end())


def _read(pair, name, body):
    if name == "write" and body.get("len") == 0:
        return "a read (zero-length write): it shows every row held, however many the last chunk left"


def _full_trim(pair, name, body):
    g, capacity = pair.global_end(), pair.config["capacity"]
    trims = name == "rewind" or (name == "write" and body.get("len", 0) > 0 and body.get("start", g) < g)
    if trims and g >= capacity:
        return "a trim at global end %d, capacity %d (RotatingKVCache is no longer trimmable there)" % (g, capacity)


def _dropped_front(pair, name, body, short_only=False):
    """A trim back into an attention chunk whose start ChunkedKVCache already
    dropped (maybe_trim_front): what docs/findings/mlx-lm-chunked-trim-below-dropped-front.md
    is about; with `short_only`, only a trim below the dropped front itself
    (the one trim_prompt_cache cannot do in full)."""
    start = getattr(pair.real, "start_position", 0)
    if not start:
        return None
    g = pair.global_end()
    if name == "rewind":
        target = body.get("to", g)
    elif name == "write" and body.get("len", 0) > 0 and body.get("start", g) < g:
        target = body["start"]
    else:
        return None
    if short_only and 0 <= target < start:
        return "a trim to %d, below the dropped front %d" % (target, start)
    if not short_only and 0 <= target < g and target // pair.chunk_size * pair.chunk_size < start:
        return "a trim to %d: its attention chunk starts at %d, before the dropped front %d" % (
            target, target // pair.chunk_size * pair.chunk_size, start)


MASKS = {
    "chunk-fit": ("appends that do not fit in the capacity beside the sink", "chunk_too_large", _chunk_fit),
    "window-fit": ("appends that do not fit in the window beside the sink", "window_too_small", _window_fit),
    "rewind-args": ("rewinds past the global end or below 0 (trim by a negative count)", "rewind_ahead", _rewind_args),
    # The contract has no refusal for a read, so this one answers with an
    # exception: for --oracle self searches (both runs refuse alike), where
    # the rows a read shows (B1, B6 of docs/mlx-lm.md) would hide what
    # queries read.
    "full-trim": (
        "rewinds and tail rewrites once the global end reaches the capacity, answered as outside (kvcheck.Outside);"
        " for --oracle between --cache kv and rotating (B4)",
        None,
        _full_trim,
    ),
    "no-read": ("reads (zero-length writes), answered as outside (kvcheck.Outside); for --oracle self", None, _read),
    "dropped-front": (
        "chunked: rewinds and tail rewrites into an attention chunk whose start maybe_trim_front dropped, answered as"
        " outside (the class then declares no domain); the finding mlx-lm-chunked-trim-below-dropped-front",
        None,
        _dropped_front,
    ),
    "short-trim": (
        "chunked: rewinds and tail rewrites below the front maybe_trim_front dropped (the trims that come up short),"
        " answered as outside (the class then declares no domain)",
        None,
        lambda pair, name, body: _dropped_front(pair, name, body, short_only=True),
    ),
    # Checked at open (the whole case): the positional window mask hides
    # sink tokens by design (B2), on every class that takes a window.
    "window-sink": ("configs with sink tokens and a window below the capacity (B2), answered as outside at open", None, None),
}


def window_sink(config):
    window = config.get("window")
    if config["sink"] > 0 and window is not None and window < config["capacity"]:
        return "sink %d with window %d below capacity %d: the window mask hides the sink (B2)" % (
            config["sink"], window, config["capacity"])


class MlxLm(kvcheck.Subject):
    """One of mlx-lm's KV cache classes behind kvcheck.Subject."""

    variants = ("dense",)
    dtypes = ("f32", "f16", "bf16")
    layout = "bhnd"  # mlx's [B, H, n, D], both ways

    def __init__(self, kind="rotating", masks=(), keep=None, group_size=64, bits=8, chunk_size=None, values=None):
        self.kind = kind
        self.masks = list(masks)
        self.keep = keep
        self.group_size, self.bits, self.chunk_size = group_size, bits, chunk_size
        self.features = ("window",) + (("growth",) if kind in ("kv", "batch-kv", "quantized") else ())
        if kind == "chunked" or chunk_size is not None:
            # Chunked attention has no sliding window; the cache never evicts.
            self.features = ("growth",)
        # QuantizedKVCache hands attention packed tuples: by default only
        # positions and the global end are compared (the model's contract);
        # --values dequantized reports mx.dequantize of them, for the
        # model-free oracles.
        self.dequantize = values == "dequantized"
        self.values = kind != "quantized" or self.dequantize
        if kind in ("quantized", "chunked"):
            self.domain = dict(LOOP_DOMAIN)
            if "no-read" in self.masks:
                self.domain["probes"] = "none"  # what the mask answers outside
            if "dropped-front" in self.masks or "short-trim" in self.masks:
                self.domain = None  # trims the domain admits, answered outside
        self.runtime = kit.Background(load_runtime)
        self.pair = None
        from importlib.metadata import PackageNotFoundError, version

        try:
            parts = ["mlx-lm", version("mlx-lm"), "mlx", version("mlx"), kind]
        except PackageNotFoundError as error:
            raise ImportError("mlx-lm and mlx are needed (%s): run adapters/mlx-lm/setup.sh and use its venv" % error)
        if keep is not None:
            parts.append("--keep %d" % keep)
        if kind == "quantized":
            parts.append("--group-size %d --bits %d" % (group_size, bits))
            if self.dequantize:
                parts.append("--values dequantized")
        if chunk_size is not None:
            parts.append("--chunk-size %d" % chunk_size)
        self.name = " ".join(parts + ["--mask " + m for m in self.masks])

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__)
        parser.add_argument("--cache", choices=CACHES, default="rotating", help="which mlx-lm class (default rotating)")
        kit.add_mask_option(parser, MASKS, "a recorded difference")
        parser.add_argument(
            "--keep",
            type=int,
            default=None,
            help="RotatingKVCache's keep for every config instead of the config's sink; only configs with sink 0"
            " and a window of at most capacity - keep open (the window mask must then hide the kept tokens, so"
            " the contract's view is what queries must read), and reads (zero-length writes) are refused",
        )
        parser.add_argument("--group-size", type=int, default=64, choices=(32, 64, 128),
                            help="quantized: QuantizedKVCache's group_size (default 64)")
        parser.add_argument("--bits", type=int, default=8, choices=(2, 3, 4, 5, 6, 8),
                            help="quantized: QuantizedKVCache's bits (default 8)")
        parser.add_argument("--values", choices=("none", "dequantized"), default=None,
                            help="quantized: what the view's K/V bytes are: none (positions and global end only,"
                            " the default) or mx.dequantize of the packed rows (for --oracle relations or self)")
        parser.add_argument("--chunk-size", type=int, default=None,
                            help="chunked: ChunkedKVCache's chunk_size (default each config's capacity); with --cache kv:"
                            " a KVCache read through Llama 4's chunked mask (the chunked cache's differential oracle)")
        args = parser.parse_args(argv)
        if args.values is not None and args.cache != "quantized":
            parser.error("--values is for --cache quantized")
        if args.chunk_size is not None and args.cache not in ("chunked", "kv"):
            parser.error("--chunk-size is for --cache chunked or kv")
        if args.chunk_size is not None and args.chunk_size < 1:
            parser.error("--chunk-size must be at least 1")
        return cls(args.cache, args.mask, args.keep, args.group_size, args.bits, args.chunk_size, args.values)

    @property
    def global_end(self):
        return None if self.pair is None else self.pair.global_end()

    def open(self, config):
        self.pair = None
        if "window-sink" in self.masks and window_sink(config):
            raise kvcheck.Outside("--mask window-sink: " + window_sink(config))
        if self.keep is not None:
            # --keep checks what queries read where the window must hide the
            # kept tokens; elsewhere the contract is not the oracle.
            window = config.get("window")
            if config["sink"] != 0 or window is None or window > config["capacity"] - self.keep:
                raise kvcheck.Refused(
                    "invalid_config",
                    "--keep %d needs sink 0 and a window of at most capacity - %d (sink %d, window %s, capacity %d)"
                    % (self.keep, self.keep, config["sink"], window, config["capacity"]),
                )
        self.pair = Pair(
            self.runtime.ready(), config, self.kind, self.keep,
            self.group_size, self.bits, self.chunk_size, self.dequantize,
        )

    def write(self, start, length, heads, recent_window, k, v):
        kit.hold_back(MASKS, self.masks, self.pair, "write", {"start": start, "len": length})
        if heads is not None or recent_window is not None:
            raise kvcheck.Outside("mlx-lm's caches take every head and no per-call window")
        if self.keep is not None:
            # --keep checks what queries read; a read shows the kept rows the window hides from them.
            kit.hold_back(MASKS, ["no-read"], self.pair, "write", {"start": start, "len": length})
        return self.pair.write(start, length, k, v)

    def rewind(self, to):
        kit.hold_back(MASKS, self.masks, self.pair, "rewind", {"to": to})
        self.pair.rewind(to)


if __name__ == "__main__":
    # mlx's teardown at interpreter exit sometimes aborts (SIGABRT,
    # "terminate called without an active exception") once a cache has
    # computed; the protocol is over by then: leave without it.
    kit.leave(kit.main(__file__, "MlxLm"))
