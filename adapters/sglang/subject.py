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

It is a `kvcheck.Subject` (python/kvcheck): the base class speaks the
protocol and hands `write` the payload as torch tensors `[B, n, hc, D]` in
the config dtype. What the classes cannot express is left out of the
capabilities, so kvcheck never generates it: `rewind` and `evict` (neither
class has such a call), packed quantization (QVG packs with Quant-VideoGen's
PRQ k-means Triton kernels: CUDA only, and not the quantizer of docs/contract.md §6),
and the read-only `view` probe (neither class has a read that does not
write). A write with a negative length or head count cannot be made into a
tensor, as it cannot in a pipeline (torch refuses the shape): it is answered
as outside the adapter's domain (`kvcheck.Outside`: kvcheck cuts the case
there; before revision 3 of the protocol, an exception of type `Outside`).

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

    adapters/sglang/.venv/bin/python adapters/sglang/subject.py [--version 0.5.23] [--mask NAME ...]
"""

import copy
import os
import sys

import kvcheck
from kvcheck import adapter as kit

import loader

# The twin's tag offset: position + 2^32 in float64, so that no tag is 0
# (a row never written) and every one is exact.
TAG_OFFSET = float(1 << 32)


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


def load_runtime(version):
    """torch and the sglang classes of `version` (run by kit.Background at
    start-up, so that `hello` is answered at once and `open` waits only for
    what is left)."""
    import types

    import torch

    torch.set_num_threads(1)
    causal, qvg = loader.load(version)
    quant_args = None
    if qvg is not None:
        import importlib

        quant_args = importlib.import_module("sglang.multimodal_gen.configs.quantization.qvg_kv").QVGKVQuantArgs
    return types.SimpleNamespace(torch=torch, causal=causal, qvg=qvg, quant_args=quant_args)


class Pair:
    """The real cache and its position-tagged twin, driven call for call."""

    def __init__(self, rt, config):
        self.rt = rt
        self.config = config
        self.variant = config["variant"]
        self.batch, self.heads, self.head_dim = config["batch"], config["heads"], config["head_dim"]
        self.dtype = kit.dtype(rt.torch, config["dtype"])
        self.real = self._build(self.dtype, self.batch, self.head_dim)
        self.twin = self._build(rt.torch.float64, 1, 1)
        # Written on every head at every write, so a row whose reported heads
        # were never written still shows the position its slot stands for.
        self.slots = self._build(rt.torch.float64, 1, 1)

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
        """`call(cache, is_twin)` on the twin, then the real cache (kit.both):
        (twin result, real result)."""
        return kit.both(lambda cache: call(cache, cache is self.twin), self.twin, self.real)

    def write(self, body, key, value):
        """`update_and_get_attention_kv` on the cache and its twins; `key`
        and `value` are the payload tensors (None: no tensor has the shape)."""
        torch = self.rt.torch
        start, length = body["start"], body["len"]
        heads = body.get("heads")
        recent = body.get("recent_window")
        if length < 0:
            raise kvcheck.Outside("len %d cannot be a tensor dimension" % length)
        head_start, head_count = (None, self.heads) if heads is None else (heads[0], heads[1])
        if head_count < 0:
            raise kvcheck.Outside("head count %d cannot be a tensor dimension" % head_count)
        if key is None or value is None:
            if length * head_count != 0:
                raise kvcheck.AdapterError("no payload came for a write of %d tokens and %d heads" % (length, head_count))
            # A tensor without elements carries no values: the call a caller makes.
            key = value = torch.zeros((self.batch, length, head_count, self.head_dim), dtype=self.dtype)
        tags = kit.tags(torch, start, length, torch.float64, TAG_OFFSET)
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

        full = tags.reshape(1, length, 1, 1).expand(1, length, self.heads, 1).contiguous()
        slot_args = {"recent_window_tokens": recent} if recent is not None else {}
        try:
            twin_view, view = self.both(call)
        except Exception:
            self.slots = copy.deepcopy(self.twin)  # the twin mirrored the raise
            raise
        try:
            slot_view = self.slots.update_and_get_attention_kv(
                key=full, value=full, current_chunk_start=start, **slot_args
            )
            fallback = slot_view.k
        except Exception:
            self.slots = copy.deepcopy(self.twin)
            fallback = None
        visible = positions(twin_view.k, fallback)
        returned = view.k.shape[2]
        if returned != head_count:
            print(
                "sglang returned %d heads for a write of heads %s (cache has %d)"
                % (returned, heads, self.heads),
                file=sys.stderr,
                flush=True,
            )
        return visible, view.k, view.v

    def foresee(self, body):
        """The positions sglang's view would show for write `body`, from a
        copy of the twin (neither cache changes)."""
        start, length = body["start"], body["len"]
        heads = body.get("heads")
        count = self.heads if heads is None else heads[1]
        twin = copy.deepcopy(self.twin)
        tags = kit.tags(self.rt.torch, start, length, self.rt.torch.float64, TAG_OFFSET)
        optional = {}
        if heads is not None:
            optional["cache_head_start"] = heads[0]
        if body.get("recent_window") is not None:
            optional["recent_window_tokens"] = body["recent_window"]
        tag = tags.reshape(1, length, 1, 1).expand(1, length, count, 1).contiguous()
        view = twin.update_and_get_attention_kv(key=tag, value=tag, current_chunk_start=start, **optional)
        return positions(view.k)

    def pin(self, tokens):
        self.both(lambda cache, _: cache.pin_current_chunk(tokens))
        self.slots.pin_current_chunk(tokens)

    def reset(self):
        self.both(lambda cache, _: cache.reset_indices())
        self.slots.reset_indices()


def positions(twin_k, slots_k=None):
    """Row r of the twin's view holds, in each head, tag `position + 2^32`
    (or 0: that head of the row was never written). The row's position is
    the one its written heads hold. Where they hold different positions
    (D8: a head-range write rolls only its heads; or a head that a
    head-range write left out still holds a row of another position, which
    `reset_indices()` allows, D14's mechanism), the row is reported at the
    smallest of them, whatever the head order. The contract gives every head of a row one
    position, so such a row diverges either way: as `visible` when the
    smallest is not the position the contract expects there, else as
    `values` (the other heads' rows decode as wrong bytes). A row no head
    wrote takes its slot's tag from `slots_k` (the all-heads twin, written
    on every head at every write), else one past the row before it."""
    out = []
    rows = twin_k[0, :, :, 0].tolist()  # [len, heads]
    slot_rows = slots_k[0, :, :, 0].tolist() if slots_k is not None and slots_k.shape[1] == len(rows) else None
    for r, row in enumerate(rows):
        tag = min((t for t in row if t != 0.0), default=None)
        if tag is None and slot_rows is not None:
            tag = min((t for t in slot_rows[r] if t != 0.0), default=None)
        out.append(kit.position(tag, TAG_OFFSET) if tag is not None else (out[-1] + 1 if out else 0))
    return out


def _gap(pair, name, body):
    g = pair.global_end()
    if name == "write" and isinstance(body.get("start"), int) and body["start"] > g and body.get("len", 0) > 0:
        return "write starts at %d past the global end %d" % (body["start"], g)


def _gap_probe(pair, name, body):
    g = pair.global_end()
    if name == "write" and isinstance(body.get("start"), int) and body["start"] > g and body.get("len") == 0:
        return "zero-length write at %d past the global end %d" % (body["start"], g)


def _negative(pair, name, body):
    values = [body.get("start"), body.get("len")] if name == "write" else [body.get("tokens")]
    if any(isinstance(x, int) and x < 0 for x in values):
        return "negative argument"
    if name == "write" and isinstance(body.get("recent_window"), int) and body["recent_window"] < 0:
        return "negative recent window"


def _head_range(pair, name, body):
    heads = body.get("heads") if name == "write" else None
    if heads is not None:
        first, count = heads
        if first < 0 or count < 1 or first + count > pair.heads:
            return "heads [%d, %d] outside the %d heads" % (first, count, pair.heads)


def _empty_heads(pair, name, body):
    heads = body.get("heads") if name == "write" else None
    if heads is not None and heads[1] == 0:
        return "a head range of zero heads"


def _pin_args(pair, name, body):
    if name != "pin" or body.get("tokens", 0) <= 0:
        return None
    if pair.config["sink"] == 0:
        return "pin without a sink"
    if body["tokens"] > pair.global_end():
        return "pin %d past the global end %d" % (body["tokens"], pair.global_end())


def _own_view(pair, name, body):
    if name != "write" or body.get("len", 0) <= 0:
        return None
    try:
        shown = set(pair.foresee(body))
    except Exception:
        return None
    missing = [p for p in range(body["start"], body["start"] + body["len"]) if p not in shown]
    if missing:
        return "sglang's view would not hold position %d of its own chunk" % missing[0]


def _window_fit(pair, name, body):
    # The contract's window_too_small for a plain append beside the sink:
    # the chunk and the resident sink must fit in the window together.
    if name != "write" or body.get("recent_window") is not None or body.get("len", 0) <= 0:
        return None
    window = pair.config.get("window") or pair.config["capacity"]
    sink = min(pair.config["sink"], body["start"])
    if body["len"] + sink > window:
        return "a chunk of %d beside %d sink tokens does not fit in window %d" % (body["len"], sink, window)


def _capacity_fit(pair, name, body):
    # The contract's chunk_too_large for an append without pins: the chunk
    # and the resident sink must fit in the capacity together.
    if name != "write" or body.get("len", 0) <= 0 or pair.config.get("growth"):
        return None
    sink = min(pair.config["sink"], body["start"])
    if body["len"] + sink > pair.config["capacity"]:
        return "a chunk of %d beside %d sink tokens does not fit in capacity %d" % (
            body["len"],
            sink,
            pair.config["capacity"],
        )


def _raises(pair, name, body):
    if name != "write" or body.get("len", 0) < 0:
        return None
    try:
        pair.foresee(body)
    except Exception as error:
        return "sglang would raise %s: %s" % (type(error).__name__, error)


def probe_at_end(pair, body):
    """A zero-length write without a recent window is a read of the view,
    which the contract gives the same whatever its start: ask sglang at the
    global end, where it reads without raising."""
    if body.get("len") == 0 and body.get("recent_window") is None and 0 <= body.get("start", 0) < pair.global_end():
        return dict(body, start=pair.global_end())
    return body


def _packed_zero_len(pair, name, body):
    if _negative(pair, name, body):
        return None  # the contract says negative_window / invalid_argument first
    if name == "write" and pair.variant == "packed" and body.get("len") == 0:
        return "zero-length write to the packed cache"


# --mask NAME -> (what it holds back, test). Each holds back only requests
# the contract refuses on their arguments and the global end alone (which
# agree with sglang's until a first divergence), so with a mask the engines
# look past a finding already made, the way a fuzzer suppresses a known
# crash. Every finding is confirmed on the unmasked subject.
MASKS = {
    "gap": ("writes of at least one token that start past the global end (D2)", "non_sequential", _gap),
    "gap-probe": ("zero-length writes that start past the global end (D11)", "non_sequential", _gap_probe),
    "negative": (
        "negative starts, lengths, counts and recent windows (D12)",
        lambda pair, name, body: "invalid_argument" if "recent_window" not in body or min(body.get("start", 0), body.get("len", 0)) < 0 else "negative_window",
        _negative,
    ),
    "head-range": ("head ranges outside the cache's heads (D13)", "head_range", _head_range),
    "empty-heads": (
        "head ranges of zero heads, which sglang accepts (kept apart from D13's shifted ranges)",
        "head_range",
        _empty_heads,
    ),
    "pin-args": ("pins without a sink or past the global end", "pin_range", _pin_args),
    "packed-zero-len": ("zero-length writes to the packed cache", "unsupported", _packed_zero_len),
    "window-fit": (
        "appends that do not fit in the window beside the sink (D6)",
        "window_too_small",
        _window_fit,
    ),
    "capacity-fit": (
        "appends that do not fit in the capacity beside the sink (D4)",
        "chunk_too_large",
        _capacity_fit,
    ),
    "raises": (
        "writes sglang would raise on, foreseen on a copy of the position twin (D5 and the other raising classes)",
        "invalid_argument",
        _raises,
    ),
    "no-pin": (
        "declares no pin op, so the engines generate none (the pin findings, D7)",
        None,
        lambda pair, name, body: None,
    ),
    "no-reset": (
        "declares no reset op, so the engines generate none (reset keeps the old rows in heads a later head-range write leaves out)",
        None,
        lambda pair, name, body: None,
    ),
    "probe-at-end": (
        "zero-length reads below the global end, asked at the global end instead (the \"Invalid ... write range\" probe finding)",
        None,
        lambda pair, name, body: None,
    ),
    "own-view": (
        "writes whose chunk sglang would cut out of its own view (D6), foreseen on a copy of the position twin",
        "window_too_small",
        _own_view,
    ),
}


class SglangCache(kvcheck.Subject):
    """One release's classes, with masks, as a `kvcheck.Subject`."""

    arrays = "torch"

    def __init__(self, version=loader.DEFAULT_VERSION, masks=()):
        self.version = version
        self.masks = list(masks)
        self.runtime = kit.Background(lambda: load_runtime(version))
        self.pair = None
        caps = capabilities(version)
        self.name = " ".join(["sglang", version] + ["--mask " + m for m in self.masks])
        self.variants = caps["variants"]
        self.features = caps["features"]
        self.ops = [op for op in caps["ops"] if "no-" + op not in self.masks]

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__)
        parser.add_argument(
            "--version",
            default=os.environ.get("SGLANG_VERSION", loader.DEFAULT_VERSION),
            help="sglang release set up by setup.sh (default $SGLANG_VERSION or %s)" % loader.DEFAULT_VERSION,
        )
        kit.add_mask_option(parser, MASKS, "a known finding")
        args = parser.parse_args(argv)
        if not loader.is_ready(args.version):
            raise ValueError(
                "sglang %s is not set up: run SGLANG_VERSION=%s adapters/sglang/setup.sh" % (args.version, args.version)
            )
        return cls(args.version, args.mask)

    @property
    def global_end(self):
        return self.pair.global_end()

    def open(self, config):
        self.pair = None
        variant = config.get("variant")
        if variant not in self.variants:
            raise kvcheck.Refused("invalid_config", "variant %r is not shipped by sglang %s" % (variant, self.version))
        quant = (config.get("packed") or {}).get("quant", "int8") if variant == "packed" else "none"
        if quant != "none":
            raise kvcheck.Refused(
                "invalid_config", "packed quant %s: QVG quantizes with CUDA-only PRQ kernels, not docs/contract.md §6" % quant
            )
        self.pair = Pair(self.runtime.ready(), config)

    def masked(self, name, body):
        """Refuses a request one of the masks holds back, with the
        contract's kind for it."""
        kit.hold_back(MASKS, self.masks, self.pair, name, body)

    def write(self, start, length, heads, recent_window, k, v):
        body = {"start": start, "len": length}
        if heads is not None:
            body["heads"] = list(heads)
        if recent_window is not None:
            body["recent_window"] = recent_window
        if "probe-at-end" in self.masks:
            body = probe_at_end(self.pair, body)
        self.masked("write", body)
        return self.pair.write(body, k, v)

    def pin(self, tokens):
        self.masked("pin", {"tokens": tokens})
        self.pair.pin(tokens)

    def reset(self):
        self.pair.reset()


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "SglangCache"))
