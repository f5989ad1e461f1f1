#!/usr/bin/env python3
"""sglang's real streaming KV caches as a kvcheck-subject/1 process.

Drives the classes of `sglang/multimodal_gen/runtime/layers/kvcache/`,
unmodified, the way a video-diffusion pipeline calls them:

| kvtrace op | dense: `CausalSelfAttentionKVCache` | packed: `QVGPackedCausalKVCache` |
|---|---|---|
| open | the dataclass over zeroed `[B, C, H, D]` K/V buffers: `cache_size`, `sink_tokens`, `attention_window_size`, `allow_growth`, `global_sink_tokens` | `batch_size`, `cache_size`, `num_heads`, `head_dim`, `sink_tokens`, `attention_window_size`, `quant_args` (quantization off) |
| write s, n, heads h0+hc, r | `update_and_get_attention_kv(key, value, current_chunk_start=s, cache_head_start=h0, recent_window_tokens=r)` with `[B, n, hc, D]` tensors | the same |
| pin n | `pin_current_chunk(n)` | `pin_current_chunk(n)` (raises NotImplementedError) |
| reset | `reset_indices()` | `reset_indices()` |

What it cannot express is left out of its capabilities, so kvcheck never
generates it: `rewind` and `evict` (neither class has such a call), packed
quantization (QVG packs with Quant-VideoGen's PRQ k-means Triton kernels:
CUDA only, and not the quantizer of SPEC.md §6), and the read-only `view`
probe (neither class has a read that does not write). A write with a
negative length or head count cannot be made into a tensor: it is answered
as an exception of type `Inexpressible`.

Positions. The classes return K/V tensors, not positions. To report which
global positions a view holds without re-implementing sglang's index
arithmetic, every cache is paired with a *twin*: a second instance of the
same class, same configuration, `head_dim = 1`, float64, that receives the
same calls with each row tagged `position + 2^32`. The twin's view, row by
row, is therefore the positions sglang put there; a row no write ever
reached (zeros, e.g. the gap of a write past the global end) is reported as
one past the row before it, the position sglang's layout assigns it. Values
come from the real cache: kvcheck checks that each row holds the bytes its
writer sent, so a row that is in the wrong place shows up either way.

    adapters/sglang/.venv/bin/python adapters/sglang/subject.py [--version 0.5.23]
"""

import argparse
import base64
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loader  # noqa: E402

PROTOCOL = "kvcheck-subject/1"
TAG_OFFSET = float(1 << 32)


class Inexpressible(Exception):
    """A request no pipeline can make of these classes (e.g. a negative tensor dimension)."""


def capabilities(version):
    """What the release's classes can express, read from its sources (so
    `hello` needs no torch import). The files first ship in 0.5.13; head
    ranges arrive in 0.5.14, recent windows in 0.5.15, pins and the global
    sink in 0.5.16, the QVG packed cache in 0.5.18."""
    with open(os.path.join(kvcache_dir(version), "causal_attention_cache.py")) as f:
        causal = f.read()
    has_qvg = os.path.isfile(os.path.join(kvcache_dir(version), "qvg_packed_cache.py"))
    ops = ["write", "reset"]
    if "def pin_current_chunk" in causal:
        ops.insert(1, "pin")
    features = ["window"]
    for feature, marker in (
        ("growth", "allow_growth"),
        ("head_ranges", "cache_head_start"),
        ("recent_window", "recent_window_tokens"),
        ("global_sink", "global_sink_tokens"),
    ):
        if marker in causal:
            features.append(feature)
    return {
        "variants": ["dense", "packed"] if has_qvg else ["dense"],
        "dtypes": ["f32", "f16", "bf16"],
        "ops": ops,
        "features": features,
        "values": True,
        "view": False,
    }


def kvcache_dir(version):
    return os.path.join(loader.version_dir(version), "sglang", "multimodal_gen", "runtime", "layers", "kvcache")


class Runtime:
    """torch and the sglang modules, imported in the background at start-up so
    `hello` is answered at once and `open` waits only for what is left."""

    def __init__(self, version):
        self.version = version
        self.error = None
        self.done = threading.Event()
        threading.Thread(target=self._load, daemon=True).start()

    def _load(self):
        try:
            import torch

            torch.set_num_threads(1)
            self.torch = torch
            self.causal, self.qvg = loader.load(self.version)
            if self.qvg is not None:
                import importlib

                qvg_kv = importlib.import_module("sglang.multimodal_gen.configs.quantization.qvg_kv")
                self.quant_args = qvg_kv.QVGKVQuantArgs
            self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
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

    def __init__(self, rt, config):
        self.rt = rt
        self.config = config
        self.variant = config["variant"]
        self.batch, self.heads, self.head_dim = config["batch"], config["heads"], config["head_dim"]
        self.dtype = rt.dtypes[config["dtype"]]
        self.real = self._build(self.dtype, self.batch, self.head_dim)
        self.twin = self._build(rt.torch.float64, 1, 1)

    def _build(self, dtype, batch, head_dim):
        torch, c = self.rt.torch, self.config
        window = c.get("window") or c["capacity"]
        index = (torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long))
        if self.variant == "dense":
            k = torch.zeros(batch, c["capacity"], self.heads, head_dim, dtype=dtype)
            extra = {}
            if c.get("global_sink", 0):
                # Releases before 0.5.16 have no such field (and no pins).
                extra["global_sink_tokens"] = c["global_sink"]
            return self.rt.causal.CausalSelfAttentionKVCache(
                k=k,
                v=torch.zeros_like(k),
                global_end_index=index[0],
                local_end_index=index[1],
                cache_size=c["capacity"],
                sink_tokens=c["sink"],
                attention_window_size=window,
                allow_growth=bool(c.get("growth")),
                **extra,
            )
        policy = c.get("packed") or {}
        return self.rt.qvg.QVGPackedCausalKVCache(
            batch_size=batch,
            cache_size=c["capacity"],
            num_heads=self.heads,
            head_dim=head_dim,
            dtype=dtype,
            device=torch.device("cpu"),
            global_end_index=index[0],
            local_end_index=index[1],
            sink_tokens=c["sink"],
            attention_window_size=window,
            quant_args=self.rt.quant_args(
                bits=None,
                keep_recent_chunks=policy.get("keep_recent_chunks", 1),
                sink=bool(policy.get("pack_sink", False)),
            ),
        )

    def global_end(self):
        return int(self.real.global_end_index.item())

    def both(self, call):
        """Applies `call(cache, is_twin)` to the twin, then to the real cache,
        so a call that mutates and then raises leaves both in the same state.
        Returns (twin result, real result); the real cache's exception wins."""
        twin_error = None
        try:
            twin_result = call(self.twin, True)
        except Exception as error:
            twin_error = error
        result = call(self.real, False)
        if twin_error is not None:
            raise RuntimeError("adapter: the position twin raised %r but the cache did not" % twin_error)
        return twin_result, result

    def tensor(self, data, shape):
        torch = self.rt.torch
        count = shape[0] * shape[1] * shape[2] * shape[3]
        size = torch.empty((), dtype=self.dtype).element_size()
        if data is None or len(data) != count * size:
            raise Inexpressible(
                "payload has %s bytes, expected %d for %s" % (None if data is None else len(data), count * size, shape)
            )
        if count == 0:
            return torch.zeros(shape, dtype=self.dtype)
        return torch.frombuffer(bytearray(data), dtype=self.dtype).reshape(shape)

    def write(self, body, k_data, v_data):
        torch = self.rt.torch
        start, length = body["start"], body["len"]
        heads = body.get("heads")
        recent = body.get("recent_window")
        if length < 0:
            raise Inexpressible("len %d cannot be a tensor dimension" % length)
        head_start, head_count = (None, self.heads) if heads is None else (heads[0], heads[1])
        if head_count < 0:
            raise Inexpressible("head count %d cannot be a tensor dimension" % head_count)
        shape = (self.batch, length, head_count, self.head_dim)
        key, value = self.tensor(k_data, shape), self.tensor(v_data, shape)
        tags = torch.arange(length, dtype=torch.float64) + (start + TAG_OFFSET)
        tag = tags.reshape(1, length, 1, 1).expand(1, length, head_count, 1).contiguous()

        # Optional arguments go only when used: early releases lack them.
        optional = {}
        if head_start is not None:
            optional["cache_head_start"] = head_start
        if recent is not None:
            optional["recent_window_tokens"] = recent

        def call(cache, is_twin):
            return cache.update_and_get_attention_kv(
                key=tag if is_twin else key,
                value=tag if is_twin else value,
                current_chunk_start=start,
                **optional,
            )

        twin_view, view = self.both(call)
        out = {"global_end": self.global_end(), "visible": positions(twin_view.k)}
        returned = view.k.shape[2]
        if returned != head_count:
            print(
                "sglang returned %d heads for a write of heads %s (cache has %d)"
                % (returned, heads, self.heads),
                file=sys.stderr,
                flush=True,
            )
        out["k"] = encode(torch, view.k)
        out["v"] = encode(torch, view.v)
        return out

    def pin(self, tokens):
        self.both(lambda cache, _: cache.pin_current_chunk(tokens))
        return {"global_end": self.global_end()}

    def reset(self):
        self.both(lambda cache, _: cache.reset_indices())
        return {"global_end": self.global_end()}


def positions(twin_k):
    """Row r of the twin's view holds tag `position + 2^32` (or 0: never written)."""
    out = []
    rows = twin_k[0, :, :, 0].tolist()  # [len, heads]
    for row in rows:
        tag = next((t for t in row if t != 0.0), None)
        out.append(int(tag - TAG_OFFSET) if tag is not None else (out[-1] + 1 if out else 0))
    return out


def encode(torch, tensor):
    data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return base64.b64encode(data).decode("ascii")


def exception(kind, message):
    return {"exception": {"type": kind, "message": message}}


class Session:
    def __init__(self, version):
        self.version = version
        self.runtime = Runtime(version)
        self.pair = None
        self.caps = capabilities(version)

    def handle(self, request):
        if "hello" in request:
            return {
                "hello": {
                    "protocol": PROTOCOL,
                    "name": "sglang %s" % self.version,
                    "capabilities": self.caps,
                }
            }
        if "open" in request:
            return self.open(request["open"].get("config") or {})
        if "close" in request:
            return None
        if self.pair is None:
            return exception("ProtocolError", "no cache is open: send open first")
        if "op" in request:
            try:
                return {"ok": self.apply(request)}
            except Exception as error:
                return exception(type(error).__name__, str(error))
        return exception("Unsupported", "this subject answers hello, open, op and close")

    def open(self, config):
        self.pair = None
        variant = config.get("variant")
        if variant not in self.caps["variants"]:
            return {"err": {"kind": "invalid_config", "message": "variant %r is not shipped by sglang %s" % (variant, self.version)}}
        quant = (config.get("packed") or {}).get("quant", "int8") if variant == "packed" else "none"
        if quant != "none":
            return {
                "err": {
                    "kind": "invalid_config",
                    "message": "packed quant %s: QVG quantizes with CUDA-only PRQ kernels, not SPEC.md §6" % quant,
                }
            }
        try:
            self.pair = Pair(self.runtime.ready(), config)
        except Exception as error:
            return {"err": {"kind": "invalid_config", "message": "%s: %s" % (type(error).__name__, error)}}
        return {"ok": {}}

    def apply(self, request):
        op = request["op"]
        if op == "reset":
            return self.pair.reset()
        (name, body), = op.items()
        if name == "write":
            k = request.get("k")
            v = request.get("v")
            return self.pair.write(
                body,
                None if k is None else base64.b64decode(k),
                None if v is None else base64.b64decode(v),
            )
        if name == "pin":
            return self.pair.pin(body["tokens"])
        raise Inexpressible("%s: sglang's caches have no such call" % name)


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
            response = session.handle(request) if isinstance(request, dict) else exception(
                "ProtocolError", "request is not a JSON object"
            )
            if response is None:
                return
        stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
        stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--version",
        default=os.environ.get("SGLANG_VERSION", loader.DEFAULT_VERSION),
        help="sglang release set up by setup.sh (default $SGLANG_VERSION or %s)" % loader.DEFAULT_VERSION,
    )
    args = parser.parse_args(argv)
    if not loader.is_ready(args.version):
        print(
            "sglang %s is not set up: run SGLANG_VERSION=%s adapters/sglang/setup.sh" % (args.version, args.version),
            file=sys.stderr,
        )
        return 2
    # Protocol lines go to the original stdout; anything a library prints
    # (Python or C level) goes to stderr, which kvcheck shows on divergence.
    protocol_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(Session(args.version), sys.stdin, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
