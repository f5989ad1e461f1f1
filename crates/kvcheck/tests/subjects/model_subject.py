#!/usr/bin/env python3
"""A kvcheck-subject/1 subject for kvcheck's own tests: SPEC.md with the
Python standard library only (positions in a dict, rows as the payload's
bytes), dense and packed without quantization.

Options make it misbehave on purpose, so the tests can prove that the
harness reports each misbehaviour as its own divergence kind:

  --fault stale-rewrite     rewrites below the global end keep old rows
  --fault raise-on-refusal  raise ValueError where the contract refuses
  --fault raise-on-overlap  raise ValueError on writes that overlap G
  --misbehave KIND --at N   at op request N (0-based, counted over the
                            process's life): sleep (forever), exit (status
                            3), garbage (a non-JSON line), short (a K
                            payload one byte short)
  --caps NAME               declare fewer capabilities: positions-only,
                            dense-writes-only
"""

import argparse
import base64
import json
import sys
import time

SIZES = {"f32": 4, "f16": 2, "bf16": 2}
MAX_ELEMENTS = 1 << 31


class Refused(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class Cache:
    def __init__(self, config, fault):
        self.c = config
        self.fault = fault
        self.packed = config["variant"] == "packed"
        self.capacity = config["capacity"]
        self.window = config["window"] if config["window"] is not None else self.capacity
        self.row_bytes = config["head_dim"] * SIZES[config["dtype"]]
        self.reset()

    def reset(self):
        self.g = 0
        self.resident = {}  # position -> {(batch, head): row bytes}
        self.pin = None  # (start, end)
        self.chunks = []  # [start, len]
        self.current = None  # index into chunks
        return 0

    def protected_position(self, p):
        if self.pin is None:
            return p < self.c["sink"]
        return p < self.c["global_sink"] or self.pin[0] <= p < self.pin[1]

    def protected(self, resident):
        return [p for p in sorted(resident) if self.protected_position(p)]

    def evictable(self, resident):
        return [p for p in sorted(resident) if not self.protected_position(p)]

    def view(self, resident, window, recent=None):
        prot = self.protected(resident)
        others = self.evictable(resident)
        if recent is None:
            keep = max(0, window - len(prot))
            shown = others[max(0, len(others) - keep):] if keep else []
        else:
            s, r = recent
            shown = [q for q in others if q >= max(0, s - r)]
        return sorted(set(prot) | set(shown))

    def current_chunk(self):
        return None if self.current is None else self.chunks[self.current]

    def write(self, op, index, k, v):
        s, n = op["start"], op["len"]
        heads, r = op.get("heads"), op.get("recent_window")
        H = self.c["heads"]
        if s < 0 or n < 0:
            raise Refused("invalid_argument", "negative start or len")
        if r is not None and r < 0:
            raise Refused("negative_window", "recent_window < 0")
        if heads is not None:
            h0, hc = heads
            if h0 < 0 or hc < 1 or h0 + hc > H:
                raise Refused("head_range", "bad head range")
            head_range = range(h0, h0 + hc)
        else:
            head_range = range(H)
        end = s + n
        if self.packed:
            append = s == self.g and n >= 1
            cur = self.current_chunk()
            rewrite = cur is not None and cur == [s, n] and all(
                p in self.resident for p in range(s, s + n))
            if not append and not rewrite:
                raise Refused("unsupported", "neither an append nor the current chunk")
        if s > self.g:
            raise Refused("non_sequential", "gap")
        for p in range(s, min(end, self.g)):
            if p not in self.resident:
                raise Refused("evicted", "position %d is gone" % p)
        if self.fault == "raise-on-overlap" and s < self.g < end:
            raise ValueError("overlapping write")
        resident = set(self.resident)
        capacity, window = self.capacity, self.window
        new_from = max(s, self.g)
        total = len(resident) + max(0, end - new_from)
        if total > capacity:
            if self.c["growth"]:
                per_token = self.c["batch"] * H * self.c["head_dim"]
                top = MAX_ELEMENTS // per_token
                if total > top:
                    raise Refused("chunk_too_large", "beyond the size rule")
                old = capacity
                capacity = min(max(total, 2 * old), top)
                if window == old:
                    window = capacity
            else:
                excess = total - capacity
                victims = [p for p in self.evictable(resident) if not s <= p < end][:excess]
                if len(victims) < excess:
                    raise Refused("chunk_too_large", "no room beside the protected positions")
                resident -= set(victims)
        resident |= set(range(new_from, end))
        shown = self.view(resident, window, None if r is None else (s, r))
        if any(p not in shown for p in range(s, end)):
            raise Refused("window_too_small", "the chunk would not see itself")
        # Commit.
        B, hc = self.c["batch"], len(head_range)
        rows = {p: self.resident.get(p, {}) for p in resident}
        stale = self.fault == "stale-rewrite"
        for b in range(B):
            for i, p in enumerate(range(s, end)):
                for j, h in enumerate(head_range):
                    if stale and p < self.g and (b, h, "k") in rows[p]:
                        continue
                    at = ((b * n + i) * hc + j) * self.row_bytes
                    rows[p][(b, h, "k")] = k[at:at + self.row_bytes]
                    rows[p][(b, h, "v")] = v[at:at + self.row_bytes]
        self.resident = rows
        self.capacity, self.window = capacity, window
        self.g = max(self.g, end)
        if self.packed and self.current_chunk() != [s, n]:
            self.chunks.append([s, n])
            self.current = len(self.chunks) - 1
        return self.answer(shown, head_range)

    def answer(self, shown, head_range):
        out = {"k": bytearray(), "v": bytearray()}
        zeros = bytes(self.row_bytes)
        for kv in ("k", "v"):
            for b in range(self.c["batch"]):
                for p in shown:
                    for h in head_range:
                        out[kv] += self.resident[p].get((b, h, kv), zeros)
        return {"global_end": self.g, "visible": shown,
                "k": base64.b64encode(bytes(out["k"])).decode(),
                "v": base64.b64encode(bytes(out["v"])).decode()}

    def current_view(self):
        return self.answer(self.view(set(self.resident), self.window), range(self.c["heads"]))

    def rewind(self, to):
        if to < 0:
            raise Refused("invalid_argument", "negative")
        if to > self.g:
            raise Refused("rewind_ahead", "beyond G")
        if self.packed:
            boundary = to in (0, self.g) or any(
                c[0] == to and any(p in self.resident for p in range(c[0], c[0] + c[1]))
                for c in self.chunks)
            if not boundary:
                raise Refused("unsupported", "not a chunk boundary")
        self.resident = {p: rows for p, rows in self.resident.items() if p < to}
        self.g = to
        if self.pin is not None and self.pin[1] > to:
            self.pin = None
        self.chunks = [c for c in self.chunks if c[0] < to]
        self.current = None
        return self.g

    def evict(self, k):
        if k < 0:
            raise Refused("invalid_argument", "negative")
        if self.packed:
            raise Refused("unsupported", "packed")
        evictable = self.evictable(set(self.resident))
        if k > len(evictable):
            raise Refused("evict_too_many", "too many")
        for p in evictable[:k]:
            del self.resident[p]
        return self.g

    def pin_tokens(self, n):
        if n < 0:
            raise Refused("invalid_argument", "negative")
        if self.packed:
            raise Refused("unsupported", "packed")
        if n == 0:
            self.pin = None
            return self.g
        S = self.c["sink"]
        if S == 0 or n > self.g:
            raise Refused("pin_range", "no sink or beyond G")
        start = self.g - n
        pin = (start, start + min(S, n))
        if any(p not in self.resident for p in range(*pin)):
            raise Refused("pin_range", "not resident")
        self.pin = pin
        return self.g


def capabilities(name):
    full = {"variants": ["dense", "packed"], "dtypes": ["f32", "f16", "bf16"],
            "ops": ["write", "rewind", "evict", "pin", "reset"],
            "features": ["growth", "head_ranges", "recent_window", "window", "global_sink"],
            "values": True, "view": True}
    if name == "positions-only":
        full["values"] = False
    elif name == "dense-writes-only":
        full = {"variants": ["dense"], "dtypes": ["f32"], "ops": ["write"],
                "features": [], "values": True, "view": False}
    return full


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault")
    parser.add_argument("--misbehave", choices=["sleep", "exit", "garbage", "short"])
    parser.add_argument("--at", type=int, default=0)
    parser.add_argument("--caps", default="full")
    args = parser.parse_args()
    cache = None
    requests = 0
    out = sys.stdout
    for line in sys.stdin:
        msg = json.loads(line)
        if "close" in msg:
            return
        if "hello" in msg:
            reply = {"hello": {"protocol": "kvcheck-subject/1", "name": "model_subject.py",
                               "capabilities": capabilities(args.caps)}}
        elif "open" in msg:
            cache = Cache(msg["open"]["config"], args.fault)
            reply = {"ok": {}}
        else:
            if args.misbehave and requests == args.at:
                print("about to misbehave: %s" % args.misbehave, file=sys.stderr, flush=True)
                if args.misbehave == "sleep":
                    time.sleep(3600)
                if args.misbehave == "exit":
                    sys.exit(3)
                if args.misbehave == "garbage":
                    out.write("this is not json\n")
                    out.flush()
                    requests += 1
                    continue
            requests += 1
            try:
                if "view" in msg:
                    reply = {"ok": cache.current_view()}
                else:
                    op = msg["op"]
                    if op == "reset":
                        reply = {"ok": {"global_end": cache.reset()}}
                    elif "write" in op:
                        k = base64.b64decode(msg["k"])
                        v = base64.b64decode(msg["v"])
                        body = cache.write(op["write"], msg["index"], k, v)
                        if args.misbehave == "short" and requests - 1 == args.at:
                            body["k"] = base64.b64encode(base64.b64decode(body["k"])[:-1]).decode()
                        reply = {"ok": body}
                    elif "rewind" in op:
                        reply = {"ok": {"global_end": cache.rewind(op["rewind"]["to"])}}
                    elif "evict" in op:
                        reply = {"ok": {"global_end": cache.evict(op["evict"]["tokens"])}}
                    else:
                        reply = {"ok": {"global_end": cache.pin_tokens(op["pin"]["tokens"])}}
            except Refused as e:
                if args.fault == "raise-on-refusal":
                    reply = {"exception": {"type": "ValueError", "message": str(e)}}
                else:
                    reply = {"err": {"kind": e.kind, "message": str(e)}}
            except ValueError as e:
                reply = {"exception": {"type": "ValueError", "message": str(e)}}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
