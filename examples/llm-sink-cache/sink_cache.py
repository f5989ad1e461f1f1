"""A sink cache of the Hugging Face kind (StreamingLLM), checked by kvcheck."""

import bisect

import kvcheck


class SinkCache(kvcheck.Subject):
    """Keeps the first `sink` positions and the latest `capacity - sink`
    others. A chunk is appended whole, attention reads every row held, and
    only then are the oldest rows beside the sink trimmed away."""

    variants, arrays = ("dense",), "bytes"   # rows as bytes: no numpy
    trims = ("after_read",)                  # read the whole chunk, then trim
    domain = {"rewrites": "none", "gaps": False, "malformed": False,
              "rewinds": "held", "configs": {"batch": [1]}}

    def __init__(self, bug=False):
        self.bug = bug

    @classmethod
    def from_args(cls, argv):
        return cls(bug="--bug" in argv)

    def open(self, config):
        self.capacity, self.sink = config["capacity"], config["sink"]
        self.reset()

    def reset(self):                         # a new conversation
        self.positions, self.k_rows, self.v_rows, self.global_end = [], [], [], 0

    def write(self, start, length, heads, recent_window, k, v):
        if length:                           # k, v: [1, length, heads, head_dim]
            row = len(k) // length
            self.positions += range(start, start + length)
            self.k_rows += [k[i * row:(i + 1) * row] for i in range(length)]
            self.v_rows += [v[i * row:(i + 1) * row] for i in range(length)]
            self.global_end = start + length
        read = list(self.positions), b"".join(self.k_rows), b"".join(self.v_rows)
        self.trim()                          # after attention has read it all
        return read

    def trim(self):
        keep = 0 if self.bug else self.sink  # the planted bug: the sink is trimmed with the window
        drop = len(self.positions) - self.capacity
        if drop > 0:
            for rows in (self.positions, self.k_rows, self.v_rows):
                del rows[keep:keep + drop]

    def rewind(self, to):                    # crop: only to rows it still holds
        held = bisect.bisect_left(self.positions, to)
        for rows in (self.positions, self.k_rows, self.v_rows):
            del rows[held:]
        self.global_end = to


if __name__ == "__main__":
    kvcheck.check(SinkCache, time=5)                    # passes
    kvcheck.check(SinkCache, time=5, args=["--bug"])    # raises kvcheck.Divergence
