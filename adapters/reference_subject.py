#!/usr/bin/env python3
"""The cache contract of docs/contract.md, naively, as a kvcheck-subject/1 process.

A stand-alone Python rendering of the reference model (crates/kvmodel): the
resident positions live in a dict, every operation works on a copy of the
state and commits it only when every check has passed, so "a refused
operation changes nothing" holds by construction. It stores the exact bytes
each write sends and returns them in the view; cold chunks of the packed
variant are quantized with the scalar quantizer of docs/contract.md §6, bit for bit.

It is a `kvcheck.Subject` (python/kvcheck) with every capability, so every
engine of kvcheck can be run through the protocol path with nothing but the
Python standard library (3.9+); it also reports its capacity and resident
bytes (docs/contract.md §6, §7) for kvcheck to compare.

    python3 adapters/reference_subject.py                 # the contract
    python3 adapters/reference_subject.py --fault NAME    # a planted bug
    python3 adapters/reference_subject.py --list-faults

The faults are bugs of the kinds real caches have (sglang's among them):
the engines must catch and minimize each one.
"""

import argparse
import copy
import math
import os
import struct
import sys

try:
    import kvcheck
except ImportError:
    # The adapters' one bootstrap: this subject runs from a bare checkout
    # with nothing but `python3` (kvcheck's own tests, `kvcheck run
    # --subject exec:'python3 adapters/reference_subject.py'`), so it finds
    # the package beside it. Every other adapter runs in a venv whose
    # setup.sh put python/ on its path (adapters/setup-kit.sh, kit_venv).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import kvcheck
from kvcheck import adapter as kit
from kvcheck.subject import Session as _Session
from kvcheck.subject import exception, serve  # noqa: F401  (the scripts that wrap this one use them)

MAX_ELEMENTS = 1 << 31

# --fault NAME -> what it breaks (printed by --list-faults).
FAULTS = {
    "roll-ignores-sink": "making room evicts the oldest resident positions, sink and pin "
    "included (a ring roll that forgets the protected slots)",
    "gap-write-accepted": "a write that starts past the global end is accepted; the "
    "never-written positions of the gap become visible (zeros)",
    "stale-rewrite": "a rewrite of positions below the global end keeps the old values "
    "(a denoise step that never lands)",
    "negative-window-mutates": "a negative recent window raises only after the write "
    "has been applied (mutate-then-raise)",
    "zero-len-advances": "a zero-length write past the global end moves the global end "
    "to its start",
    "head-start-ignored": "a head range as wide as the cache but starting above 0 is "
    "accepted and written to every head (its start is ignored)",
    "reset-keeps-rows": "reset forgets positions but keeps their rows: a head-range write "
    "after it shows the old stream in the heads it leaves out (sglang's D14)",
    "batch-crosstalk-last": "the last batch row of the newest visible position reads batch "
    "row 0's bytes (a stride bug that only the last row shows)",
    "head-crosstalk-last": "the last head of the newest visible position reads head 0's "
    "bytes (a stride bug that only the last head shows)",
    "long-append-hides-sink": "once the cache has evicted, an append of three or more "
    "tokens leaves the sink out of its view (a fast path that forgets the protected rows)",
    "refusal-moves-end": "a write refused after its arguments were checked (evicted, "
    "chunk_too_large, window_too_small) has already moved the global end to its end",
    "trim-before-read": "opens trim \"after_read\" configs but trims before the read, as "
    "the default mode does: a chunk at a full cache sees W - n older positions instead of the "
    "whole view before it",
}

DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2}
QUANT_MAX_CODE = {"none": None, "int8": 127, "int4": 7}


# A refusal of docs/contract.md §3: one error kind and a message with the numbers.
ContractError = kvcheck.Refused


class PayloadError(Exception):
    """A payload of the wrong size: checked after every contract check (docs/contract.md §7)."""


# ---------------------------------------------------------------------------
# f32 / f16 / bf16 conversions and the scalar quantizer of docs/contract.md §6.
# Python floats are f64; every f32 operation below is an f64 operation on
# f32 operands rounded once to f32, which is exact for +, -, *, / because
# 53 >= 2 * 24 + 2 (double rounding cannot change the result).


def f32(x):
    """Rounds an f64 to the nearest f32 (ties to even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):
    """The bf16 bit pattern of f32 value `x`, rounded to nearest even."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):
        return (bits >> 16) | 0x0040  # quiet NaN, as the `half` crate does
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def decode_row(raw, dtype):
    """Bytes of one row -> list of the f32 values they stand for."""
    if dtype == "f32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dtype == "f16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def encode_row(values, dtype):
    """f32 values -> bytes of the dtype, rounded to nearest even."""
    if dtype == "f32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "f16":
        return struct.pack("<%de" % len(values), *values)
    return struct.pack("<%dH" % len(values), *[bf16_bits(v) for v in values])


def round_half_away_from_zero(x):
    # |x| + 0.5 is exact in f64 for the f32 quotients seen here (|x| <= q + 1).
    return math.copysign(math.floor(abs(x) + 0.5), x)


def quantize_row(values, q):
    """docs/contract.md §6: the codes and the f32 scale of one row of D values."""
    amax = max((abs(x) for x in values), default=0.0)
    scale = f32(amax / q)
    if scale == 0.0:
        return [0] * len(values), scale
    codes = []
    for x in values:
        code = round_half_away_from_zero(f32(x / scale))
        codes.append(int(max(-q, min(q, code))))
    return codes, scale


def cold_round_trip(raw, quant, dtype):
    """What a cold row of bytes `raw` reads back as under `quant`, as bytes."""
    q = QUANT_MAX_CODE[quant]
    if q is None:
        return raw
    codes, scale = quantize_row(decode_row(raw, dtype), q)
    return encode_row([f32(code * scale) for code in codes], dtype)


# ---------------------------------------------------------------------------
# Configuration (docs/contract.md §1, docs/kvtrace.md `config`).


def parse_config(raw):
    """Fills docs/kvtrace.md defaults and validates docs/contract.md §1; ContractError names the field."""
    if not isinstance(raw, dict):
        raise ContractError("invalid_config", "config must be an object")
    config = {
        "variant": raw.get("variant"),
        "batch": raw.get("batch", 1),
        "heads": raw.get("heads", 1),
        "head_dim": raw.get("head_dim", 1),
        "dtype": raw.get("dtype", "f32"),
        "capacity": raw.get("capacity"),
        "sink": raw.get("sink", 0),
        "window": raw.get("window"),
        "growth": bool(raw.get("growth", False)),
        "global_sink": raw.get("global_sink", 0),
        "trim": raw.get("trim", "before_read"),
        "packed": None,
    }

    def bad(field, reason):
        raise ContractError("invalid_config", "invalid_config: %s %s" % (field, reason))

    if config["variant"] not in ("dense", "packed"):
        bad("variant", "must be \"dense\" or \"packed\", got %r" % (config["variant"],))
    if config["dtype"] not in DTYPE_SIZE:
        bad("dtype", "must be f32, f16 or bf16, got %r" % (config["dtype"],))
    for field in ("batch", "heads", "head_dim", "capacity", "sink", "global_sink"):
        value = config[field]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            bad(field, "must be a non-negative integer, got %r" % (value,))
    for field in ("batch", "heads", "head_dim", "capacity"):
        if config[field] < 1:
            bad(field, "must be at least 1, got %d" % config[field])
    if config["sink"] >= config["capacity"]:
        bad("sink", "must be below capacity %d, got %d" % (config["capacity"], config["sink"]))
    window = config["window"]
    if window is not None and (
        not isinstance(window, int) or window <= config["sink"] or window > config["capacity"]
    ):
        bad(
            "window",
            "must satisfy sink %d < window <= capacity %d, got %r"
            % (config["sink"], config["capacity"], window),
        )
    if config["global_sink"] > config["sink"]:
        bad("global_sink", "must be at most sink %d, got %d" % (config["sink"], config["global_sink"]))
    packed = raw.get("packed")
    if config["variant"] == "dense":
        if packed is not None:
            bad("packed", "is only allowed with variant \"packed\"")
    else:
        if config["growth"]:
            bad("growth", "is not supported by the packed variant")
        packed = packed or {}
        policy = {
            "keep_recent_chunks": packed.get("keep_recent_chunks", 1),
            "quant": packed.get("quant", "int8"),
            "pack_sink": bool(packed.get("pack_sink", False)),
        }
        keep = policy["keep_recent_chunks"]
        if not isinstance(keep, int) or keep < 0:
            bad("packed", "keep_recent_chunks must be a non-negative integer, got %r" % (keep,))
        if policy["quant"] not in QUANT_MAX_CODE:
            bad("packed", "quant must be none, int8 or int4, got %r" % (policy["quant"],))
        config["packed"] = policy
    # docs/contract.md §3, trim modes: after_read is a rule of the dense
    # rolling cache without growth.
    if config["trim"] not in kvcheck.TRIMS:
        bad("trim", "must be \"before_read\" or \"after_read\", got %r" % (config["trim"],))
    if config["trim"] == "after_read" and config["variant"] == "packed":
        bad("trim", "\"after_read\" is only allowed with variant \"dense\"")
    if config["trim"] == "after_read" and config["growth"]:
        bad("trim", "\"after_read\" cannot be combined with growth (a growing cache never trims)")
    elements = config["batch"] * config["heads"] * config["head_dim"] * config["capacity"]
    if elements > MAX_ELEMENTS:
        bad(
            "capacity",
            "batch %d x capacity %d x heads %d x head_dim %d = %d elements exceeds the size rule 2^31"
            % (config["batch"], config["capacity"], config["heads"], config["head_dim"], elements),
        )
    return config


def max_capacity(config):
    return MAX_ELEMENTS // max(1, config["batch"] * config["heads"] * config["head_dim"])


def format_ranges(positions):
    runs = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    return " ".join("%d..%d" % (lo, hi) for lo, hi in runs) or "-"


def non_negative(field, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise ContractError("invalid_argument", "invalid_argument: %s = %r is not an integer" % (field, value))
    if value < 0:
        raise ContractError("invalid_argument", "invalid_argument: %s = %d is negative" % (field, value))
    return value


# ---------------------------------------------------------------------------
# The cache: docs/contract.md §2-§6 read literally.


class Cache:
    """One cache (dense or packed) holding positions, writers and bytes."""

    def __init__(self, config, fault=None):
        self.config = config
        self.fault = fault
        self.capacity = config["capacity"]
        self.window = config["window"] if config["window"] is not None else config["capacity"]
        self.global_end = 0
        # position -> [writer or None per head]
        self.resident = {}
        # (position, batch, head) -> (k bytes, v bytes); absent means zeros.
        self.rows = {}
        self.pin = None  # (first, end) or None
        # packed: [{"start", "len", "cold"}], ascending; index of the current chunk.
        self.chunks = []
        self.current_chunk = None
        self.row_bytes = config["head_dim"] * DTYPE_SIZE[config["dtype"]]
        # Whether anything was evicted since the start or the last reset
        # (the state the long-append-hides-sink fault keys on).
        self.evicted_any = False

    def clone(self):
        """A copy that shares nothing mutable with `self` (row bytes are immutable)."""
        other = copy.copy(self)
        other.resident = {p: list(w) for p, w in self.resident.items()}
        other.rows = dict(self.rows)
        other.chunks = [dict(c) for c in self.chunks]
        return other

    # -- positions -----------------------------------------------------------

    def packed(self):
        return self.config["variant"] == "packed"

    def is_protected_position(self, p):
        if self.pin is None:
            return p < self.config["sink"]
        return p < self.config["global_sink"] or self.pin[0] <= p < self.pin[1]

    def protected(self):
        return [p for p in sorted(self.resident) if self.is_protected_position(p)]

    def evictable(self):
        return [p for p in sorted(self.resident) if not self.is_protected_position(p)]

    def view(self, recent=None):
        """docs/contract.md §4; `recent` is (s, r) for a write at s with recent window r."""
        protected = set(self.protected())
        others = [p for p in sorted(self.resident) if p not in protected]
        if recent is None:
            keep = max(0, self.window - len(protected))
            shown = others[max(0, len(others) - keep):] if keep else []
        else:
            s, r = recent
            shown = [q for q in others if q >= max(0, s - r)]
        return sorted(protected | set(shown))

    def drop(self, position):
        self.resident.pop(position, None)
        for b in range(self.config["batch"]):
            for h in range(self.config["heads"]):
                self.rows.pop((position, b, h), None)

    def current(self):
        return None if self.current_chunk is None else self.chunks[self.current_chunk]

    # -- operations ------------------------------------------------------------

    def check_write_arguments(self, body):
        """Checks 1-3 of docs/contract.md §3 write: (s, n, r, head range)."""
        s = non_negative("start", body.get("start"))
        n = non_negative("len", body.get("len"))
        r = body.get("recent_window")
        if r is not None and r < 0:
            if self.fault == "negative-window-mutates":
                r = None  # applied as if absent, refused afterwards
            else:
                raise ContractError(
                    "negative_window", "negative_window: recent_window = %d is negative" % r
                )
        heads = self.config["heads"]
        spec = body.get("heads")
        if spec is None:
            head_range = range(heads)
        else:
            first, count = spec
            fits = first >= 0 and count >= 1 and first + count <= heads
            if self.fault == "head-start-ignored" and count == heads and first > 0:
                first, fits = 0, True
            if not fits:
                raise ContractError(
                    "head_range",
                    "head_range: heads [%d, %d] is not a non-empty range inside the %d heads [0, %d)"
                    % (first, count, heads, heads),
                )
            head_range = range(first, first + count)
        return s, n, r, head_range

    def write(self, index, body, k, v):
        g = self.global_end
        try:
            return self.write_checked(index, body, k, v)
        except ContractError as refusal:
            late = ("evicted", "chunk_too_large", "window_too_small")
            if self.fault == "refusal-moves-end" and refusal.kind in late:
                self.global_end = max(g, body["start"] + body["len"])
            raise

    def write_checked(self, index, body, k, v):
        s, n, r, head_range = self.check_write_arguments(body)
        end = s + n
        g = self.global_end
        # 4. Packed: only an append or a rewrite of exactly the current chunk.
        if self.packed():
            cur = self.current()
            append = s == g and n >= 1
            rewrite = (
                cur is not None
                and cur["start"] == s
                and cur["len"] == n
                and all(p in self.resident for p in range(s, end))
            )
            if not append and not rewrite:
                where = (
                    "the current chunk is [%d, %d)" % (cur["start"], cur["start"] + cur["len"])
                    if cur is not None
                    else "there is no current chunk"
                )
                raise ContractError(
                    "unsupported",
                    "unsupported: write [%d, %d) is neither an append at the global end %d "
                    "nor a rewrite of exactly the current chunk (%s)" % (s, end, g, where),
                )
        # 5. A gap would leave unwritten positions visible.
        gap_from = None
        if s > g:
            if self.fault == "gap-write-accepted" and n >= 1:
                gap_from = g
            elif self.fault == "zero-len-advances" and n == 0:
                self.global_end = s
                return self.view_payload(self.view(), range(self.config["heads"]))
            else:
                raise ContractError(
                    "non_sequential",
                    "non_sequential: write starts at %d but the global end is %d" % (s, g),
                )
        # 6. Rewritten positions must still be resident.
        for p in range(s, min(end, g)):
            if p not in self.resident:
                raise ContractError(
                    "evicted",
                    "evicted: write [%d, %d) rewrites position %d, which is not resident "
                    "(resident: %s)" % (s, end, p, format_ranges(sorted(self.resident))),
                )
        if self.config["trim"] == "after_read" and self.fault != "trim-before-read":
            return self.write_after_read(index, body, s, n, r, head_range, k, v)
        # 7. Make room: grow, or evict the oldest evictable positions outside the write.
        nxt = self.clone()
        new_from = gap_from if gap_from is not None else max(s, g)
        total = len(self.resident) + max(0, end - new_from)
        if total > nxt.capacity:
            protected_outside = sum(
                1 for p in self.resident if self.is_protected_position(p) and not s <= p < end
            )

            def too_large(capacity):
                return ContractError(
                    "chunk_too_large",
                    "chunk_too_large: write [%d, %d) needs %d resident positions but capacity %d "
                    "leaves room for %d beside %d protected"
                    % (s, end, total, capacity, max(0, capacity - protected_outside), protected_outside),
                )

            if self.config["growth"]:
                most = max_capacity(self.config)
                if total > most:
                    raise too_large(most)
                old = nxt.capacity
                nxt.capacity = min(max(total, 2 * old), most)
                if nxt.window == old:
                    nxt.window = nxt.capacity
            else:
                excess = total - nxt.capacity
                if self.fault == "roll-ignores-sink":
                    candidates = sorted(self.resident)
                else:
                    candidates = self.evictable()
                victims = [p for p in candidates if not s <= p < end][:excess]
                if len(victims) < excess:
                    raise too_large(nxt.capacity)
                for p in victims:
                    nxt.drop(p)
                nxt.evicted_any = nxt.evicted_any or bool(victims)
                if nxt.pin is not None and any(nxt.pin[0] <= p < nxt.pin[1] for p in victims):
                    nxt.pin = None
        for p in range(new_from, end):
            nxt.resident[p] = [None] * self.config["heads"]
        # 8. The chunk must see itself.
        view = nxt.view(None if r is None else (s, r))
        shown = set(view)
        for p in range(s, end):
            if p not in shown:
                raise ContractError(
                    "window_too_small",
                    "window_too_small: write [%d, %d) would not see position %d in its own view "
                    "(window %d, %d protected)" % (s, end, p, nxt.window, len(nxt.protected())),
                )
        if self.fault == "long-append-hides-sink" and nxt.evicted_any and s == g and n >= 3:
            view = [p for p in view if p >= self.config["sink"]]
        # The payload is checked after every contract check (docs/contract.md §7).
        k_rows = self.split_payload("k", k, n, head_range)
        v_rows = self.split_payload("v", v, n, head_range)
        # 9. Commit.
        nxt.global_end = max(g, end)
        for i, p in enumerate(range(s, end)):
            for h in head_range:
                nxt.resident[p][h] = index
                for b in range(self.config["batch"]):
                    key = (p, b, h)
                    if self.fault == "stale-rewrite" and p < g and key in nxt.rows:
                        continue
                    nxt.rows[key] = (k_rows[(b, i, h)], v_rows[(b, i, h)])
        if nxt.packed():
            cur = nxt.current()
            if not (cur is not None and cur["start"] == s and cur["len"] == n):
                nxt.append_chunk(s, n)
        self.__dict__.update(nxt.__dict__)
        if body.get("recent_window") is not None and body["recent_window"] < 0:
            raise ValueError("recent_window_tokens must be >= 0 or None")
        return self.view_payload(view, head_range)

    def write_after_read(self, index, body, s, n, r, head_range, k, v):
        """docs/contract.md §3 write under trim "after_read", after checks 1-6:
        the view is the view before the write and the whole chunk; the chunk
        is committed; then the oldest evictable positions go while |R| > C,
        the chunk's own included."""
        end, g = s + n, self.global_end
        view = sorted(set(self.view(None if r is None else (s, r))) | set(range(s, end)))
        k_rows = self.split_payload("k", k, n, head_range)
        v_rows = self.split_payload("v", v, n, head_range)
        nxt = self.clone()
        for p in range(max(s, g), end):
            nxt.resident[p] = [None] * self.config["heads"]
        nxt.global_end = max(g, end)
        for i, p in enumerate(range(s, end)):
            for h in head_range:
                nxt.resident[p][h] = index
                for b in range(self.config["batch"]):
                    key = (p, b, h)
                    if self.fault == "stale-rewrite" and p < g and key in nxt.rows:
                        continue
                    nxt.rows[key] = (k_rows[(b, i, h)], v_rows[(b, i, h)])
        if self.fault == "long-append-hides-sink" and nxt.evicted_any and s == g and n >= 3:
            view = [p for p in view if p >= self.config["sink"]]
        # The read comes first: the rows the trim drops are in the view.
        read = nxt.view_payload(view, head_range)
        excess = len(nxt.resident) - nxt.capacity
        if excess > 0:
            if self.fault == "roll-ignores-sink":
                candidates = sorted(nxt.resident)
            else:
                candidates = nxt.evictable()
            victims = candidates[:excess]
            if len(victims) < excess:
                raise ContractError(
                    "chunk_too_large",
                    "chunk_too_large: write [%d, %d) leaves %d protected positions in capacity %d"
                    % (s, end, len(nxt.protected()), nxt.capacity),
                )
            for p in victims:
                nxt.drop(p)
            nxt.evicted_any = True
            if nxt.pin is not None and any(nxt.pin[0] <= p < nxt.pin[1] for p in victims):
                nxt.pin = None
        self.__dict__.update(nxt.__dict__)
        if body.get("recent_window") is not None and body["recent_window"] < 0:
            raise ValueError("recent_window_tokens must be >= 0 or None")
        return read

    def split_payload(self, which, data, n, head_range):
        """Payload bytes [B, n, hc, D] -> {(b, i, h): row bytes}."""
        batch, hc = self.config["batch"], len(head_range)
        want = batch * n * hc * self.row_bytes
        if data is None:
            raise PayloadError("write carries no %s payload" % which)
        if len(data) != want:
            raise PayloadError(
                "%s payload has %d bytes, expected %d for [B=%d, len=%d, heads=%d, D=%d] %s"
                % (which, len(data), want, batch, n, hc, self.config["head_dim"], self.config["dtype"])
            )
        rows, offset = {}, 0
        for b in range(batch):
            for i in range(n):
                for h in head_range:
                    rows[(b, i, h)] = data[offset:offset + self.row_bytes]
                    offset += self.row_bytes
        return rows

    def append_chunk(self, start, length):
        """docs/contract.md §6: record the append; chunks past keep_recent_chunks turn cold."""
        self.chunks.append({"start": start, "len": length, "cold": False})
        current = len(self.chunks) - 1
        self.current_chunk = current
        policy = self.config["packed"]
        keep_from = max(0, current - policy["keep_recent_chunks"])
        for chunk in self.chunks[:keep_from]:
            if chunk["cold"]:
                continue
            if chunk["start"] >= self.config["sink"] or policy["pack_sink"]:
                chunk["cold"] = True
                self.quantize_chunk(chunk)

    def quantize_chunk(self, chunk):
        """Cold is permanent: the resident rows are replaced by their round trip."""
        quant, dtype = self.config["packed"]["quant"], self.config["dtype"]
        for p in range(chunk["start"], chunk["start"] + chunk["len"]):
            if p not in self.resident:
                continue
            for b in range(self.config["batch"]):
                for h in range(self.config["heads"]):
                    k, v = self.rows.get((p, b, h), (None, None))
                    zeros = bytes(self.row_bytes)
                    self.rows[(p, b, h)] = (
                        cold_round_trip(k if k is not None else zeros, quant, dtype),
                        cold_round_trip(v if v is not None else zeros, quant, dtype),
                    )

    def view_payload(self, positions, head_range):
        """(positions, K bytes, V bytes): the view [B, len(view), heads reported, D]."""
        zeros = bytes(self.row_bytes)
        k_parts, v_parts = [], []
        newest = max(positions, default=None)
        last_batch, last_head = self.config["batch"] - 1, self.config["heads"] - 1
        for b in range(self.config["batch"]):
            for p in positions:
                for h in head_range:
                    source = (p, b, h)
                    if p == newest and self.fault == "batch-crosstalk-last" and b == last_batch > 0:
                        source = (p, 0, h)
                    if p == newest and self.fault == "head-crosstalk-last" and h == last_head > 0:
                        source = (p, b, 0)
                    k, v = self.rows.get(source, (zeros, zeros))
                    k_parts.append(k)
                    v_parts.append(v)
        return list(positions), b"".join(k_parts), b"".join(v_parts)

    def read_view(self):
        return self.view_payload(self.view(), range(self.config["heads"]))

    def resident_bytes(self):
        """docs/contract.md §7 (dense: the allocated buffers) and §6 (packed: per row)."""
        c = self.config
        hot = self.row_bytes
        rows = c["batch"] * c["heads"]
        if not self.packed():
            return 2 * rows * self.capacity * hot
        quant, d = c["packed"]["quant"], c["head_dim"]
        cold = {"none": hot, "int8": d + 4, "int4": (d + 1) // 2 + 4}[quant]
        return 2 * rows * sum(cold if self.is_cold(p) else hot for p in self.resident)

    def is_cold(self, p):
        chunk = next((c for c in reversed(self.chunks) if c["start"] <= p), None)
        return chunk is not None and chunk["cold"] and p < chunk["start"] + chunk["len"]

    def rewind(self, to):
        to = non_negative("to", to)
        if to > self.global_end:
            raise ContractError(
                "rewind_ahead", "rewind_ahead: rewind to %d is past the global end %d" % (to, self.global_end)
            )
        if self.packed():
            boundary = (
                to == 0
                or to == self.global_end
                or any(
                    c["start"] == to and any(p in self.resident for p in range(c["start"], c["start"] + c["len"]))
                    for c in self.chunks
                )
            )
            if not boundary:
                raise ContractError(
                    "unsupported",
                    "unsupported: rewind to %d is not a chunk boundary (0, the global end %d, "
                    "or the start of a resident chunk)" % (to, self.global_end),
                )
        for p in [p for p in self.resident if p >= to]:
            self.drop(p)
        self.global_end = to
        if self.pin is not None and self.pin[1] > to:
            self.pin = None
        self.chunks = [c for c in self.chunks if c["start"] < to]
        self.current_chunk = None
        return {"global_end": self.global_end}

    def evict(self, tokens):
        k = non_negative("tokens", tokens)
        if self.packed():
            raise ContractError("unsupported", "unsupported: evict is not supported by the packed variant")
        evictable = self.evictable()
        if k > len(evictable):
            raise ContractError(
                "evict_too_many",
                "evict_too_many: evict %d but only %d positions are evictable" % (k, len(evictable)),
            )
        for p in evictable[:k]:
            self.drop(p)
        self.evicted_any = self.evicted_any or k > 0
        return {"global_end": self.global_end}

    def pin_op(self, tokens):
        n = non_negative("tokens", tokens)
        if self.packed():
            raise ContractError("unsupported", "unsupported: pin is not supported by the packed variant")
        if n == 0:
            self.pin = None
            return {"global_end": self.global_end}
        sink = self.config["sink"]
        if sink == 0:
            raise ContractError("pin_range", "pin_range: pin %d needs a sink, but sink is 0" % n)
        if n > self.global_end:
            raise ContractError(
                "pin_range", "pin_range: pin %d exceeds the global end %d" % (n, self.global_end)
            )
        first = self.global_end - n
        pin = (first, first + min(sink, n))
        for p in range(*pin):
            if p not in self.resident:
                raise ContractError(
                    "pin_range",
                    "pin_range: pin %d would pin [%d, %d) but position %d is not resident" % (n, pin[0], pin[1], p),
                )
        self.pin = pin
        return {"global_end": self.global_end}

    def reset(self):
        self.resident.clear()
        if self.fault != "reset-keeps-rows":
            self.rows.clear()
        self.global_end = 0
        self.pin = None
        self.chunks = []
        self.current_chunk = None
        self.evicted_any = False
        return {"global_end": 0}


# ---------------------------------------------------------------------------
# The subject: the cache behind kvcheck.Subject (the helper speaks the protocol).


class Reference(kvcheck.Subject):
    """Every variant, dtype, op, feature and trim mode; K/V as the bytes sent."""

    features = kvcheck.FEATURES
    trims = kvcheck.TRIMS
    arrays = "bytes"
    reports = ("capacity", "resident_bytes")

    def __init__(self, fault=None):
        self.fault = fault
        self.name = "reference" if fault is None else "reference --fault " + fault
        self.cache = None
        self.writes = 0  # writer ids: the protocol never shows them

    @classmethod
    def from_args(cls, argv):
        """`--fault NAME`; `--list-faults` prints them and exits."""
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--fault", choices=sorted(FAULTS), help="plant this bug (see --list-faults)")
        parser.add_argument("--list-faults", action="store_true", help="print the faults and exit")
        args = parser.parse_args(argv)
        if args.list_faults:
            for name in sorted(FAULTS):
                print("%-24s %s" % (name, FAULTS[name]))
            sys.exit(0)
        return cls(args.fault)

    def open(self, config):
        self.cache = None
        self.cache = Cache(parse_config(config), self.fault)

    def write(self, start, length, heads, recent_window, k, v):
        body = {"start": start, "len": length, "heads": heads, "recent_window": recent_window}
        self.writes += 1
        return self.cache.write(self.writes, body, k, v)

    def rewind(self, to):
        self.cache.rewind(to)

    def evict(self, tokens):
        self.cache.evict(tokens)

    def pin(self, tokens):
        self.cache.pin_op(tokens)

    def reset(self):
        self.cache.reset()

    def view(self):
        return self.cache.read_view()

    @property
    def global_end(self):
        return self.cache.global_end

    @property
    def capacity(self):
        return self.cache.capacity

    @property
    def resident_bytes(self):
        return self.cache.resident_bytes()


def capabilities():
    return Reference().capabilities()


class Session(_Session):
    """One subject process (kept for the scripts that wrap it)."""

    def __init__(self, fault=None):
        super().__init__(Reference(fault))

    @property
    def cache(self):
        return self.subject.cache


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "Reference"))
