"""A chunk loop whose KV-cache bookkeeping is inline, checked by kvcheck."""

import kvcheck


class ToyLoop(kvcheck.Subject):
    """Self-Forcing's cache bookkeeping, one position per slot: the first
    `sink` slots stay, the others roll left when a new chunk needs room,
    the chunk lands at `local_end`, attention reads the slots in use."""

    variants = ("dense",)
    values, arrays = False, "bytes"      # positions only: no tensors, no numpy
    domain = {"rewrites": "latest", "probes": "after_append", "gaps": False,
              "oversized": False, "malformed": False}

    def __init__(self, bug=False):
        self.bug = bug

    @classmethod
    def from_args(cls, argv):
        return cls(bug="--bug" in argv)

    def open(self, config):
        self.capacity, self.sink = config["capacity"], config["sink"]
        self.reset()

    def reset(self):                     # a new video
        self.slots, self.local_end, self.global_end, self.latest = [None] * self.capacity, 0, 0, None

    def write(self, start, length, heads, recent_window, k, v):
        if start < 0 or length < 0 or start > self.global_end:
            raise kvcheck.Outside("the loop never asks for write %d+%d" % (start, length))
        if length > self.capacity - self.sink:
            raise kvcheck.Outside("a chunk never exceeds the room beside the sink")
        if length == 0:                  # the next step reads what the cache holds
            if self.latest is None or start != self.global_end:
                raise kvcheck.Outside("attention reads only after a chunk")
            return self.slots[: self.local_end]
        if start < self.global_end:      # a denoising step rewrites the latest chunk in place
            if (start, length) != self.latest:
                raise kvcheck.Outside("only the latest chunk is denoised again")
            at = self.local_end - length
        else:                            # a new chunk: roll the window if it overflows
            overflow = self.local_end + length - self.capacity
            if overflow > 0:
                keep = 0 if self.bug else self.sink   # the planted bug: the sink rolls out
                kept = self.slots[keep + overflow : self.local_end]
                self.slots[keep : keep + len(kept)] = kept
                self.local_end -= overflow
            at = self.local_end
            self.local_end += length
            self.global_end, self.latest = start + length, (start, length)
        self.slots[at : at + length] = range(start, start + length)
        return self.slots[: self.local_end]


if __name__ == "__main__":
    kvcheck.check(ToyLoop, time=5, profile="pipeline")     # passes
    kvcheck.check(ToyLoop, time=5, args=["--bug"])           # raises kvcheck.Divergence
