#!/usr/bin/env python3
"""mlx-lm's real KV caches as a kvcheck-subject/1 process.

Drives the classes of `mlx_lm/models/cache.py`, unmodified, the way mlx-lm's
generation loop and its models call them (`generate_step`, the attention
layers of `mlx_lm/models/*.py`, `trim_prompt_cache` for speculative decoding
and prompt-cache reuse):

| kvtrace op | mlx-lm calls |
|---|---|
| open | `RotatingKVCache(max_size=capacity, keep=sink)` (`--cache rotating`, what `make_prompt_cache(model, max_kv_size)` builds), `KVCache()` (`--cache kv`, no capacity: it grows), or the continuous-batching classes `BatchRotatingKVCache(max_size=capacity, left_padding=[0] * batch)` (`--cache batch-rotating`, no keep) and `BatchKVCache(left_padding=[0] * batch)` (`--cache batch-kv`) |
| write G, n (append) | `mask = cache.make_mask(n, window_size=w)` first, as a model does before its layers run, then `keys, values = cache.update_and_fetch(k, v)` with `[B, H, n, D]` arrays; `w` is the config's `window` when it is below the capacity (a sliding-window layer), else none |
| write s, n with s < G <= s + n (rewrite of the tail) | `trim_prompt_cache([cache], G - s)` (refused with `NotTrimmable` when `can_trim_prompt_cache` says no), then the append above: how speculative decoding rewrites rejected tokens |
| write s, 0 (probe) | `cache.keys_and_values()`: the rows the cache holds for the next attention call |
| rewind to | `trim_prompt_cache([cache], G - to)` under the same `can_trim_prompt_cache` check |

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
packed variant (`QuantizedKVCache` quantizes with `mx.quantize` groups of
32-128 values, not docs/contract.md §6 rows, and returns packed tuples). A write that
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

Built on `kvcheck.Subject` (python/kvcheck): the base class owns the
protocol, this file only maps ops onto mlx-lm's calls.

    adapters/mlx-lm/.venv/bin/python adapters/mlx-lm/subject.py [--cache rotating|kv|batch-rotating|batch-kv] [--keep K] [--mask NAME]...
"""

import argparse
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import kvcheck
except ImportError:  # a checkout without the wheel installed: the package's sources
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    import kvcheck

CACHES = ("rotating", "kv", "batch-rotating", "batch-kv")



class NotTrimmable(Exception):
    """`can_trim_prompt_cache` refuses: mlx-lm's pipelines do not trim then."""


class Runtime:
    """mlx and mlx-lm, imported in the background at start-up so `hello` is
    answered at once and the first `open` waits only for what is left."""

    def __init__(self):
        self.error = None
        self.done = threading.Event()
        threading.Thread(target=self._load, daemon=True).start()

    def _load(self):
        try:
            import mlx.core as mx
            import numpy as np
            from mlx_lm.models import cache

            mx.set_default_device(mx.cpu)
            self.mx, self.np, self.cache = mx, np, cache
        except Exception as error:  # reported on the first open
            self.error = error
        finally:
            self.done.set()

    def ready(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self


class Pair:
    """The real cache and its position-tagged twin, driven call for call."""

    def __init__(self, rt, config, kind, keep=None):
        self.rt = rt
        self.kind = kind
        self.config = config
        self.keep = config["sink"] if keep is None else keep
        self.dtype = config["dtype"]
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
        return cache.KVCache()

    def global_end(self):
        # The batch caches keep one offset per row (all equal: no padding).
        offset = self.real.offset
        return int(offset) if isinstance(offset, int) else int(offset[0].item())

    def array(self, payload):
        """The payload (numpy, `[B, H, n, D]`, bf16 as uint16 bits) as mlx's array."""
        out = self.rt.mx.array(payload)
        return out.view(self.rt.mx.bfloat16) if self.dtype == "bf16" else out

    def tags(self, start, length):
        mx = self.rt.mx
        return (mx.arange(start, start + length, dtype=mx.float32) + 1).reshape(1, 1, length, 1)

    def mask(self, cache, length):
        if self.kind in ("rotating", "batch-rotating"):
            return cache.make_mask(length, window_size=self.window_size)
        return cache.make_mask(length, return_array=False, window_size=self.window_size)

    def trim(self, count):
        """`trim_prompt_cache` on both caches, refused as a pipeline would."""
        cache = self.rt.cache
        if not cache.can_trim_prompt_cache([self.real]):
            raise NotTrimmable(
                "can_trim_prompt_cache is false (%s offset %d, max_size %s)"
                % (type(self.real).__name__, self.real.offset, getattr(self.real, "max_size", None))
            )
        cache.trim_prompt_cache([self.twin], count)
        return cache.trim_prompt_cache([self.real], count)

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
            self.trim(g - start)
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
        return self.view(twin_keys, out_k, out_v, list(range(twin_keys.shape[2])))

    def columns(self, twin_keys, mask):
        """The key columns the chunk's last query reads under `mask`."""
        width = twin_keys.shape[2]
        if mask is None or isinstance(mask, str):
            return list(range(width))  # no mask, or "causal": the last query reads every key
        last = mask.reshape(-1, mask.shape[-1])[-1].tolist()
        if len(last) != width:
            raise ValueError("make_mask gave %d key columns, update_and_fetch returned %d" % (len(last), width))
        return [j for j, allowed in enumerate(last) if allowed]

    def view(self, twin_keys, out_k, out_v, columns):
        """Visible positions in ascending order and the library's own K/V
        rows gathered in that order (numpy, `[B, H, L, D]`)."""
        mx = self.rt.mx
        tags = untagged_as_neighbours(twin_keys[0, 0, :, 0].tolist())
        rows = sorted(columns, key=lambda j: (tags[j], j))
        visible = [int(tags[j]) - 1 for j in rows]
        index = mx.array(rows, dtype=mx.int32)
        return visible, self.numpy(mx.take(out_k, index, axis=2)), self.numpy(mx.take(out_v, index, axis=2))

    def numpy(self, array):
        if self.dtype == "bf16":
            array = array.view(self.rt.mx.uint16)
        return self.rt.np.array(array)

    def rewind(self, to):
        self.trim(self.global_end() - to)


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
}


class MlxLm(kvcheck.Subject):
    """mlx-lm's RotatingKVCache or KVCache behind kvcheck.Subject."""

    variants = ("dense",)
    dtypes = ("f32", "f16", "bf16")
    layout = "bhnd"  # mlx's [B, H, n, D], both ways

    def __init__(self, kind="rotating", masks=(), keep=None):
        self.kind = kind
        self.masks = list(masks)
        self.keep = keep
        self.features = ("window",) + (("growth",) if kind in ("kv", "batch-kv") else ())
        self.runtime = Runtime()
        self.pair = None
        from importlib.metadata import PackageNotFoundError, version

        try:
            parts = ["mlx-lm", version("mlx-lm"), "mlx", version("mlx"), kind]
        except PackageNotFoundError as error:
            raise ImportError("mlx-lm and mlx are needed (%s): run adapters/mlx-lm/setup.sh and use its venv" % error)
        if keep is not None:
            parts.append("--keep %d" % keep)
        self.name = " ".join(parts + ["--mask " + m for m in self.masks])

    @classmethod
    def from_args(cls, argv):
        parser = argparse.ArgumentParser(prog="subject.py", description=__doc__.split("\n\n")[0])
        parser.add_argument("--cache", choices=CACHES, default="rotating", help="which mlx-lm class (default rotating)")
        parser.add_argument(
            "--mask",
            action="append",
            default=[],
            choices=sorted(MASKS),
            help="hold back requests of a recorded difference (repeatable): %s"
            % "; ".join("%s: %s" % (name, MASKS[name][0]) for name in sorted(MASKS)),
        )
        parser.add_argument(
            "--keep",
            type=int,
            default=None,
            help="RotatingKVCache's keep for every config instead of the config's sink; only configs with sink 0"
            " and a window of at most capacity - keep open (the window mask must then hide the kept tokens, so"
            " the contract's view is what queries must read), and reads (zero-length writes) are refused",
        )
        args = parser.parse_args(argv)
        return cls(args.cache, args.mask, args.keep)

    @property
    def global_end(self):
        return None if self.pair is None else self.pair.global_end()

    def open(self, config):
        self.pair = None
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
        self.pair = Pair(self.runtime.ready(), config, self.kind, self.keep)

    def held_back(self, name, body):
        for mask in self.masks:
            self.held_back_by(mask, name, body)

    def held_back_by(self, mask, name, body):
        _, kind, test = MASKS[mask]
        reason = test(self.pair, name, body)
        if reason and kind is None:
            raise kvcheck.Outside("--mask %s: %s" % (mask, reason))
        if reason:
            raise kvcheck.Refused(kind, "--mask %s: %s" % (mask, reason))

    def write(self, start, length, heads, recent_window, k, v):
        self.held_back("write", {"start": start, "len": length})
        if heads is not None or recent_window is not None:
            raise kvcheck.Outside("mlx-lm's caches take every head and no per-call window")
        if self.keep is not None:
            # --keep checks what queries read; a read shows the kept rows the window hides from them.
            self.held_back_by("no-read", "write", {"start": start, "len": length})
        return self.pair.write(start, length, k, v)

    def rewind(self, to):
        self.held_back("rewind", {"to": to})
        self.pair.rewind(to)


def main(argv=None):
    from kvcheck.serve import main as serve

    return serve([os.path.abspath(__file__) + ":MlxLm"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
