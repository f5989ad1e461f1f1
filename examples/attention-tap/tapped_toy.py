"""The toy pipeline (toy_pipeline.py) as a kvcheck subject, read through the
attention tap: a write is one `generate_chunk` (an AR step at the global
end, a denoising step when it rewrites), a rewind is `regenerate_from`, an
evict is `drop_oldest`, a reset is the next video, and the
visible positions and the K/V view are what the chunk's last attention call
read, identified by bytes.

    python -m kvcheck.serve tapped_toy:TappedToy [--masked] [--bug NAME]

`--bug NAME` plants one of toy_pipeline.BUGS; `--masked` makes attention
read the whole buffer under a mask.

`RecomputedToy` is the toy's cache-free path (`ToyPipeline.full_forward`)
as a subject, the differential oracle of the cached one; `RecomparedToy`
runs both in one process and compares their outputs too:

    kvcheck run --subject "exec:python -m kvcheck.serve tapped_toy:TappedToy" \
                --oracle "exec:python -m kvcheck.serve tapped_toy:RecomputedToy"
    python -m kvcheck.serve tapped_toy:RecomparedToy [--masked] [--bug NAME]
"""

from __future__ import annotations

import argparse

import torch

import kvcheck
from kvcheck.torch import Recompared, RecomputeSubject, TappedSubject

from toy_pipeline import BUGS, ToyPipeline


class TappedToy(TappedSubject):
    variants = ("dense",)
    dtypes = ("f32", "f16", "bf16")
    features = ()  # no growth, head ranges, recent or narrower windows, global sinks
    reports = ("capacity", "resident_bytes")

    def __init__(self, bug: str | None = None, masked: bool = False, blocks: int = 2) -> None:
        super().__init__()
        self.bug, self.masked, self.blocks = bug, masked, blocks
        self.name = "toy pipeline%s%s" % (" (masked)" if masked else "", " bug %s" % bug if bug else "")
        self.pipeline: ToyPipeline | None = None
        self.chunk_start = 0

    @classmethod
    def from_args(cls, argv: list) -> "TappedToy":
        parser = argparse.ArgumentParser(prog="tapped_toy:TappedToy")
        parser.add_argument("--bug", choices=BUGS)
        parser.add_argument("--masked", action="store_true")
        parser.add_argument("--blocks", type=int, default=2)
        args = parser.parse_args(argv)
        return cls(args.bug, args.masked, args.blocks)

    def open(self, config: dict) -> None:
        self.pipeline = toy(config, self.blocks, self.masked, self.bug)
        self.tap.forget()
        # The rows each block's K/V projection produces, registered at the chunk's start.
        for block in self.pipeline.model.blocks:
            self.tap.watch(block.kv, lambda: self.chunk_start)

    def forward(self, start: int, length: int, k, v) -> None:
        if k is None or v is None:
            raise ValueError("write %d+%d came without a payload" % (start, length))
        self.chunk_start = start
        return self.pipeline.generate_chunk(start, k, v)

    def rewind(self, to: int) -> None:
        self.pipeline.regenerate_from(to)

    def evict(self, tokens: int) -> None:
        self.pipeline.drop_oldest(tokens)

    def reset(self) -> None:
        self.pipeline.reset()
        self.tap.forget()  # rows of the old video are unknown from now on

    @property
    def global_end(self) -> int:
        return self.pipeline.kv_cache[0]["global_end_index"]

    @property
    def capacity(self) -> int:
        return self.pipeline.kv_cache[0]["k"].shape[1]

    @property
    def resident_bytes(self) -> int:
        cache = self.pipeline.kv_cache[0]  # one block's cache, the contract's unit
        return sum(cache[name].numel() * cache[name].element_size() for name in ("k", "v"))



class LoopToy(TappedToy):
    """The toy as its own chunk loop asks it, and nothing more: appends at
    the global end that fit beside the sink, denoising rewrites of the
    latest chunk, reads after a chunk, resets. Every other request is
    answered `kvcheck.Outside`, so kvcheck judges what comes before it and
    cuts the case there; it declares nothing (`DeclaredLoopToy` does)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.latest: tuple | None = None

    @classmethod
    def from_args(cls, argv: list):
        toy = TappedToy.from_args(argv)
        return cls(toy.bug, toy.masked, toy.blocks)

    def open(self, config: dict) -> None:
        super().open(config)
        self.room = config["capacity"] - config["sink"]
        self.latest = None

    def write(self, start, length, heads, recent_window, k, v):
        end = self.global_end
        if start < 0 or length < 0 or start > end:
            raise kvcheck.Outside("the loop never asks for write %d+%d" % (start, length))
        if length > self.room:
            raise kvcheck.Outside("a chunk never exceeds the room beside the sink")
        if length == 0 and (self.latest is None or start != end):
            raise kvcheck.Outside("attention reads only after a chunk")
        if length > 0 and start < end and (start, length) != self.latest:
            raise kvcheck.Outside("only the latest chunk is denoised again")
        view = super().write(start, length, heads, recent_window, k, v)
        if length > 0 and start == end:
            self.latest = (start, length)
        return view

    def rewind(self, to: int) -> None:
        raise kvcheck.Outside("the loop never rewinds")

    def evict(self, tokens: int) -> None:
        raise kvcheck.Outside("the loop never evicts")

    def reset(self) -> None:
        super().reset()
        self.latest = None


class DeclaredLoopToy(LoopToy):
    """`LoopToy` declaring its loop, so that kvcheck draws inside it."""

    ops = ("reset",)  # no rewind, evict or pin: the loop never makes them
    domain = {"rewrites": "latest", "probes": "after_append", "gaps": False,
              "oversized": False, "malformed": False}


def toy(config: dict, blocks: int = 2, masked: bool = False, bug: str | None = None) -> ToyPipeline:
    """The toy pipeline for a kvtrace config; refuses what it cannot express."""
    torch.set_num_threads(1)  # tiny tensors: threads only cost time
    if config["window"] not in (None, config["capacity"]) or config["growth"] or config["global_sink"]:
        raise kvcheck.Refused("invalid_config", "the toy has no window, growth or global sink")
    return ToyPipeline(
        config["batch"], config["heads"], config["head_dim"], config["capacity"], config["sink"],
        config["dtype"], blocks=blocks, masked=masked, bug=bug, seed=config["seed"],
    )


class RecomputedToy(RecomputeSubject):
    """The toy's cache-free path: each chunk recomputed over the kept
    positions under the toy's mask (`ToyPipeline.reads`), no cache."""

    variants = ("dense",)
    dtypes = ("f32", "f16", "bf16")
    features = ()

    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.blocks = blocks
        self.name = "toy pipeline recomputed"
        self.pipeline: ToyPipeline | None = None
        self.keys: list = []

    @classmethod
    def from_args(cls, argv: list) -> "RecomputedToy":
        parser = argparse.ArgumentParser(prog="tapped_toy:RecomputedToy")
        parser.add_argument("--blocks", type=int, default=2)
        return cls(parser.parse_args(argv).blocks)

    def build(self, config: dict) -> None:
        self.pipeline = toy(config, self.blocks)
        for block in self.pipeline.model.blocks:
            self.tap.watch(block.kv, lambda: self.keys)

    def reads(self, position: int, end: int) -> bool:
        return self.pipeline.reads(position, end)

    def recompute(self, start, k, v, keys, k_rows, v_rows, end):
        self.keys = keys
        return self.pipeline.full_forward(start, k, keys, k_rows, v_rows, end)


class RecomparedToy(Recompared):
    """The cached toy (`TappedToy`) checked against `RecomputedToy` in one
    process: rows and outputs (see kvcheck.torch.Recompared)."""

    def __init__(self, bug: str | None = None, masked: bool = False, blocks: int = 2) -> None:
        super().__init__(TappedToy(bug, masked, blocks), RecomputedToy(blocks))

    @classmethod
    def from_args(cls, argv: list) -> "RecomparedToy":
        cached = TappedToy.from_args(argv)
        return cls(cached.bug, cached.masked, cached.blocks)
