#!/usr/bin/env python3
"""mlx-lm's real KV caches as a kvcheck-subject/1 process.

Drives the classes of `mlx_lm/models/cache.py`, unmodified, the way mlx-lm's
generation loop and its models call them (`generate_step`, the attention
layers of `mlx_lm/models/*.py`, `trim_prompt_cache` for speculative decoding
and prompt-cache reuse):

| kvtrace op | mlx-lm calls |
|---|---|
| open | `RotatingKVCache(max_size=capacity, keep=sink)` (`--cache rotating`, what `make_prompt_cache(model, max_kv_size)` builds), or `KVCache()` (`--cache kv`, no capacity: it grows) |
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
32-128 values, not SPEC.md §6 rows, and returns packed tuples). A write that
starts past the global end, or a rewrite that ends before it, has no call
(the cache appends at its offset): it is answered as an exception of type
`Inexpressible` and changes nothing.

Positions. The caches return arrays, not positions. Every cache is paired
with a *twin*: a second instance of the same class and arguments, batch 1,
one head, head_dim 1, float32, that receives the same calls with each row
tagged `position + 1` (0: a row never written). Column j of the twin's
returned keys is the position column j of the real cache's returned keys
holds, without re-implementing mlx-lm's index arithmetic.

    adapters/mlx-lm/.venv/bin/python adapters/mlx-lm/subject.py [--cache rotating|kv] [--mask NAME]...
"""

import argparse
import base64
import json
import os
import sys
import threading

PROTOCOL = "kvcheck-subject/1"
CACHES = ("rotating", "kv")
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


class Inexpressible(Exception):
    """A request no mlx-lm pipeline can make of these classes."""


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
            self.dtypes = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
            self.np_dtypes = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}
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
        self.keep = config["sink"] if keep is None else keep
        self.kind = kind
        self.config = config
        self.batch, self.heads, self.head_dim = config["batch"], config["heads"], config["head_dim"]
        self.dtype = config["dtype"]
        window = config.get("window")
        # A sliding-window layer passes its window to make_mask; a plain
        # layer passes none (RotatingKVCache then windows by max_size).
        self.window_size = window if window is not None and window < config["capacity"] else None
        self.real = self._build()
        self.twin = self._build()

    def _build(self):
        if self.kind == "rotating":
            return self.rt.cache.RotatingKVCache(max_size=self.config["capacity"], keep=self.keep)
        return self.rt.cache.KVCache()

    def global_end(self):
        return int(self.real.offset)

    def array(self, data, length):
        """The payload `[B, n, H, D]` as mlx's `[B, H, n, D]` in the dtype."""
        rt = self.rt
        shape = (self.batch, length, self.heads, self.head_dim)
        count = shape[0] * shape[1] * shape[2] * shape[3]
        size = DTYPE_BYTES[self.dtype]
        if data is None or len(data) != count * size:
            raise Inexpressible(
                "payload has %s bytes, expected %d for %s" % (None if data is None else len(data), count * size, shape)
            )
        flat = rt.np.frombuffer(bytes(data), dtype=rt.np_dtypes[self.dtype]).reshape(shape).transpose(0, 2, 1, 3)
        out = rt.mx.array(rt.np.ascontiguousarray(flat))
        return out.view(rt.mx.bfloat16) if self.dtype == "bf16" else out

    def tags(self, start, length):
        mx = self.rt.mx
        return (mx.arange(start, start + length, dtype=mx.float32) + 1).reshape(1, 1, length, 1)

    def mask(self, cache, length):
        if self.kind == "rotating":
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

    def write(self, start, length, k_data, v_data):
        g = self.global_end()
        if length < 0 or start < 0:
            raise Inexpressible("start %d, len %d cannot be a token range" % (start, length))
        if start > g:
            raise Inexpressible("write at %d past the cache offset %d: update_and_fetch appends at the offset" % (start, g))
        if length == 0:
            return self.read()
        if start + length < g:
            raise Inexpressible(
                "rewrite of %d..%d ends before the offset %d: trimming to %d would drop %d..%d"
                % (start, start + length, g, start, start + length, g)
            )
        keys, values = self.array(k_data, length), self.array(v_data, length)
        if start < g:
            self.trim(g - start)
        mask = self.mask(self.real, length)
        twin_keys, _ = self.twin.update_and_fetch(self.tags(start, length), self.tags(start, length))
        out_k, out_v = self.real.update_and_fetch(keys, values)
        columns = self.columns(twin_keys, mask)
        return self.view(twin_keys, out_k, out_v, columns)

    def read(self):
        """The rows the cache hands the next attention call (no query reads)."""
        if self.real.keys is None:
            return [], self.empty(), self.empty()
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
        mx = self.rt.mx
        tags = twin_keys[0, 0, :, 0].tolist()
        rows = sorted(columns, key=lambda j: (tags[j], j))
        visible = [int(tags[j]) - 1 for j in rows]
        index = mx.array(rows, dtype=mx.int32)
        return visible, self.bytes(mx.take(out_k, index, axis=2)), self.bytes(mx.take(out_v, index, axis=2))

    def bytes(self, array):
        """mlx's `[B, H, L, D]` as the protocol's `[B, L, H, D]` bytes."""
        mx, np = self.rt.mx, self.rt.np
        if self.dtype == "bf16":
            array = array.view(mx.uint16)
        return np.ascontiguousarray(np.array(array).transpose(0, 2, 1, 3)).tobytes()

    def empty(self):
        return b""

    def rewind(self, to):
        g = self.global_end()
        self.trim(g - to)
        return self.global_end()


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


MASKS = {
    "chunk-fit": ("appends that do not fit in the capacity beside the sink", "chunk_too_large", _chunk_fit),
    "window-fit": ("appends that do not fit in the window beside the sink", "window_too_small", _window_fit),
    "rewind-args": ("rewinds past the global end or below 0 (trim by a negative count)", "rewind_ahead", _rewind_args),
}


class Session:
    def __init__(self, kind, masks=(), keep=None):
        self.kind = kind
        self.keep = keep
        self.masks = list(masks)
        self.runtime = Runtime()
        self.pair = None
        features = ["window"] + (["growth"] if kind == "kv" else [])
        self.caps = {
            "variants": ["dense"],
            "dtypes": ["f32", "f16", "bf16"],
            "ops": ["write", "rewind"],
            "features": features,
            "values": True,
            "view": False,
        }

    def name(self):
        from importlib.metadata import version

        parts = ["mlx-lm", version("mlx-lm"), "mlx", version("mlx"), self.kind]
        if self.keep is not None:
            parts.append("--keep %d" % self.keep)
        return " ".join(parts + ["--mask " + m for m in self.masks])

    def handle(self, request):
        if "hello" in request:
            return {"hello": {"protocol": PROTOCOL, "name": self.name(), "capabilities": self.caps}}
        if "open" in request:
            return self.open(request["open"].get("config") or {})
        if "close" in request:
            return None
        if self.pair is None:
            return exception("ProtocolError", "no cache is open: send open first")
        if "op" in request:
            try:
                return {"ok": self.apply(request)}
            except Masked as error:
                return {"err": {"kind": error.kind, "message": str(error)}}
            except Exception as error:
                return exception(type(error).__name__, str(error))
        return exception("Unsupported", "this subject answers hello, open, op and close")

    def open(self, config):
        self.pair = None
        if config.get("variant") != "dense":
            return {"err": {"kind": "invalid_config", "message": "mlx-lm has no packed cache of SPEC.md §6"}}
        try:
            self.pair = Pair(self.runtime.ready(), config, self.kind, self.keep)
        except Exception as error:
            return {"err": {"kind": "invalid_config", "message": "%s: %s" % (type(error).__name__, error)}}
        return {"ok": {}}

    def apply(self, request):
        op = request["op"]
        if op == "reset":
            raise Inexpressible("reset: mlx-lm's caches have no such call")
        ((name, body),) = op.items()
        for mask in self.masks:
            _, kind, test = MASKS[mask]
            reason = test(self.pair, name, body)
            if reason:
                raise Masked(kind, "--mask %s: %s" % (mask, reason))
        if name == "write":
            if body.get("heads") is not None or body.get("recent_window") is not None:
                raise Inexpressible("mlx-lm's caches take every head and no per-call window")
            k, v = request.get("k"), request.get("v")
            visible, out_k, out_v = self.pair.write(
                body["start"],
                body["len"],
                None if k is None else base64.b64decode(k),
                None if v is None else base64.b64decode(v),
            )
            return {
                "global_end": self.pair.global_end(),
                "visible": visible,
                "k": base64.b64encode(out_k).decode("ascii"),
                "v": base64.b64encode(out_v).decode("ascii"),
            }
        if name == "rewind":
            return {"global_end": self.pair.rewind(body["to"])}
        raise Inexpressible("%s: mlx-lm's caches have no such call" % name)


class Masked(Exception):
    """A request held back by --mask, refused with the contract's kind for it."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def exception(kind, message):
    return {"exception": {"type": kind, "message": message}}


def serve(session, stdin, stdout):
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError as error:
            response = exception("ProtocolError", "request is not JSON: %s" % error)
        else:
            response = (
                session.handle(request)
                if isinstance(request, dict)
                else exception("ProtocolError", "request is not a JSON object")
            )
            if response is None:
                return
        stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
        stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        help="RotatingKVCache's keep for every config instead of the config's sink (use with sink 0 and a window"
        " at most capacity - keep: the window mask must then hide the kept tokens, so the view is the contract's)",
    )
    args = parser.parse_args(argv)
    protocol_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(Session(args.cache, args.mask, args.keep), sys.stdin, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
