"""A rolling K/V cache in numpy: the first `sink` positions always stay, the
oldest others roll out when a write needs room. Checked by test_rolling_cache.py.

ROLLING_CACHE_BUG=1 plants a bug: the roll forgets that sink positions stay.
"""

import os

import numpy as np

import kvcheck

BUG = os.environ.get("ROLLING_CACHE_BUG") == "1"


class RollingCache(kvcheck.Subject):
    variants = ("dense",)  # no packed storage, growth, head ranges or windows
    reports = ("capacity", "resident_bytes")

    def open(self, config):
        self.capacity, self.sink = config["capacity"], config["sink"]
        b, h, d = config["batch"], config["heads"], config["head_dim"]
        dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[config["dtype"]]
        self.resident_bytes = 2 * b * self.capacity * h * d * np.dtype(dtype).itemsize
        self.empty = np.zeros((b, 0, h, d), dtype)
        self.reset()

    def reset(self):
        self.global_end, self.pos, self.k, self.v = 0, np.zeros(0, np.int64), self.empty, self.empty

    def write(self, start, length, heads, recent_window, k, v):
        if start < 0 or length < 0:
            raise kvcheck.Refused("invalid_argument", "write %d+%d" % (start, length))
        if start > self.global_end:
            raise kvcheck.Refused("non_sequential", "write at %d, end %d" % (start, self.global_end))
        if not set(range(start, min(start + length, self.global_end))) <= set(self.pos.tolist()):
            raise kvcheck.Refused("evicted", "write %d+%d rewrites evicted positions" % (start, length))
        if length > self.capacity:
            raise kvcheck.Refused("chunk_too_large", "%d > capacity %d" % (length, self.capacity))
        outside = (self.pos < start) | (self.pos >= start + length)
        pos = np.concatenate([self.pos[outside], np.arange(start, start + length)])
        order = np.argsort(pos, kind="stable")
        pos, k, v = pos[order], np.concatenate([self.k[:, outside], k], 1)[:, order], np.concatenate([self.v[:, outside], v], 1)[:, order]
        # Make room: evict the oldest positions that are neither sink nor written now.
        evictable = np.flatnonzero(((pos >= 0) if BUG else (pos >= self.sink)) & ((pos < start) | (pos >= start + length)))
        excess = len(pos) - self.capacity
        if excess > len(evictable):
            raise kvcheck.Refused("chunk_too_large", "no room for %d+%d beside the sink" % (start, length))
        keep = np.ones(len(pos), bool)
        keep[evictable[:max(excess, 0)]] = False
        self.pos, self.k, self.v = pos[keep], k[:, keep], v[:, keep]
        self.global_end = max(self.global_end, start + length)
        return self.pos, self.k, self.v

    def rewind(self, to):
        if to < 0 or to > self.global_end:
            raise kvcheck.Refused("rewind_ahead" if to > 0 else "invalid_argument", "rewind to %d" % to)
        keep = self.pos < to
        self.global_end, self.pos, self.k, self.v = to, self.pos[keep], self.k[:, keep], self.v[:, keep]
