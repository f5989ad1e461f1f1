"""Small subjects for the tests: each echoes what it was sent, so a test
sees exactly what the helper handed to the subclass and made of its answer."""

import sys

import kvcheck


class Echo(kvcheck.Subject):
    """Returns each write's payload as its view; refuses gaps; raises on
    negative starts like a library would."""

    variants = ("dense",)
    arrays = "bytes"

    def __init__(self, chatty=False):
        self.chatty = chatty
        self.global_end = 0

    @classmethod
    def from_args(cls, argv):
        return cls(chatty="--chatty" in argv)

    def open(self, config):
        if config["heads"] > 4:
            raise kvcheck.Refused("invalid_config", "at most 4 heads")
        self.config = config
        self.global_end = 0

    def write(self, start, length, heads, recent_window, k, v):
        if self.chatty:
            print("a library printing to stdout")
        if start < 0:
            raise ValueError("start must be >= 0")
        if start > self.global_end:
            raise kvcheck.Refused("non_sequential", "gap at %d" % start)
        if recent_window == 99:
            raise kvcheck.Refused("no_such_kind", "a kind docs/contract.md does not have")
        self.global_end = max(self.global_end, start + length)
        self.last = (start, length, heads, recent_window, k, v)
        return list(range(start, start + length)), k, v

    def reset(self):
        self.global_end = 0


class EchoNumpy(Echo):
    arrays = "numpy"
    reports = ("capacity", "resident_bytes")

    def open(self, config):
        super().open(config)
        self.capacity = config["capacity"]
        self.resident_bytes = 7

    def write(self, start, length, heads, recent_window, k, v):
        if recent_window == 1:
            if self.config["dtype"] == "bf16":  # uint16 bit patterns -> their values
                k = (k.astype("uint32") << 16).view("float32")
                v = (v.astype("uint32") << 16).view("float32")
            return super().write(start, length, heads, None, k.astype("float64"), v.astype("float64"))
        if recent_window == 2:
            return super().write(start, length, heads, None, k.tolist(), v)
        if recent_window == 3:
            return super().write(start, length, heads, None, ForeignArray(k), v)
        return super().write(start, length, heads, recent_window, k, v)

    def rewind(self, to):
        self.global_end = to

    def view(self):
        return [], b"", b""


class ForeignArray:
    """An array of another library: numpy can convert it."""

    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


class EchoBhnd(EchoNumpy):
    layout = "bhnd"

    def write(self, start, length, heads, recent_window, k, v):
        self.shape = k.shape
        return super().write(start, length, heads, recent_window, k, v)


class Pipeline(Echo):
    """Echo as a chunk loop: a write past the end or a rewrite of anything
    but the latest chunk is Outside; a config with a window is too."""

    domain = {"rewrites": "latest", "gaps": False}

    def open(self, config):
        if config["window"] is not None:
            raise kvcheck.Outside("the loop reads the whole buffer")
        super().open(config)
        self.latest = None

    def write(self, start, length, heads, recent_window, k, v):
        if start > self.global_end:
            raise kvcheck.Outside("gap at %d" % start)
        if start < self.global_end and length > 0 and (start, length) != self.latest:
            raise kvcheck.Outside("rewrite of %d+%d" % (start, length))
        if start == self.global_end and length > 0:
            self.latest = (start, length)
        return super().write(start, length, heads, recent_window, k, v)


class Nowhere(Echo):
    """Outside for every write: nothing is ever judged."""

    def write(self, start, length, heads, recent_window, k, v):
        raise kvcheck.Outside("never asked")


class NoWrite(kvcheck.Subject):
    def open(self, config):
        pass


if __name__ == "__main__":
    sys.exit("serve these with python -m kvcheck.serve")
