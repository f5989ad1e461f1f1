"""The toy pipeline (toy_pipeline.py) as a kvcheck subject, read through the
attention tap: a write is one `generate_chunk` (an AR step at the global
end, a denoising step when it rewrites), a rewind is `regenerate_from`, an
evict is `drop_oldest`, a reset is the next video, and the
visible positions and the K/V view are what the chunk's last attention call
read, identified by bytes.

    python -m kvcheck.serve tapped_toy:TappedToy [--masked] [--bug NAME]

`--bug NAME` plants one of toy_pipeline.BUGS; `--masked` makes attention
read the whole buffer under a mask.
"""

from __future__ import annotations

import argparse

import torch

import kvcheck
from kvcheck.torch import TappedSubject

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
        torch.set_num_threads(1)  # tiny tensors: threads only cost time
        if config["window"] not in (None, config["capacity"]) or config["growth"] or config["global_sink"]:
            raise kvcheck.Refused("invalid_config", "the toy has no window, growth or global sink")
        self.pipeline = ToyPipeline(
            config["batch"], config["heads"], config["head_dim"], config["capacity"], config["sink"],
            config["dtype"], blocks=self.blocks, masked=self.masked, bug=self.bug, seed=config["seed"],
        )
        self.tap.forget()
        # The rows each block's K/V projection produces, registered at the chunk's start.
        for block in self.pipeline.model.blocks:
            self.tap.watch(block.kv, lambda: self.chunk_start)

    def forward(self, start: int, length: int, k, v) -> None:
        if k is None or v is None:
            raise ValueError("write %d+%d came without a payload" % (start, length))
        self.chunk_start = start
        self.pipeline.generate_chunk(start, k, v)

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
