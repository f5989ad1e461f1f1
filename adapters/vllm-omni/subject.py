#!/usr/bin/env python3
"""vllm-omni's LingBot-World attention cache as a kvcheck-subject/1 process.

Drives `LingBotAttentionCache` and `LingBotSelfAttention._update_cache` of
`vllm_omni/diffusion/models/lingbot_world/transformer.py`, unmodified (taken
out of the file by loader.py), the way LingBot-World's direct attention
path calls them for every chunk of every denoise step:

| kvtrace op | vllm-omni calls |
|---|---|
| open | `LingBotAttentionCache(key, value)` over zeroed `[B, capacity, H, D]` buffers, as `allocate_lingbot_cache(max_tokens=capacity)` builds them |
| write s, n | `visible_key, visible_value = _update_cache(cache, key, value, current_start=s, sink_tokens=sink, update_cache=True)` with `[B, n, H, D]` tensors |
| write G, 0 (the read-only probe) | the same call with a zero-length chunk at the global end and `update_cache=False` (the path that "sees history + current K/V" without mutating the cache) |

Visible means what attention reads: the direct path attends the chunk's
queries to every row `_update_cache` returns (`causal=False`, no mask), so
the visible positions are all returned rows, in their order. K/V bytes are
the library's returned tensors.

Positions. `_update_cache` returns tensors, not positions. Every cache is
paired with a *twin*: another `LingBotAttentionCache`, batch 1, one head,
head_dim 1, float64, that receives the same calls with each row tagged
`position + 1`. Row j of the twin's returned keys is the position row j of
the real cache's returned keys holds.

What it cannot express is left out of its capabilities: `rewind`, `evict`,
`pin` and `reset` (no such calls: a request allocates a new cache), head
ranges, recent windows, windows below the capacity, growth, the global
sink and the packed variant. A write with a negative start or length, and a
zero-length write past the global end, are answered as outside the
adapter's domain (`kvcheck.Outside`: kvcheck cuts the case there).

    adapters/vllm-omni/.venv/bin/python adapters/vllm-omni/subject.py [--version 0.30.0]
"""

import os
import sys

import kvcheck
from kvcheck import adapter as kit

import loader


def _load_lingbot(version):
    """torch and the LingBot definitions of `version` (run by kit.Background)."""
    import types

    import torch

    torch.set_num_threads(1)
    return types.SimpleNamespace(torch=torch, lingbot=loader.load(version))


class LingBotCache(kvcheck.Subject):
    """vllm-omni's LingBot-World cache behind kvcheck.Subject."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    ops = ("write",)

    def __init__(self, version=loader.DEFAULT_VERSION, masks=()):
        self.version = version
        self.masks = list(masks)
        self.name = " ".join(["vllm-omni", version, "LingBotAttentionCache"] + ["--mask " + m for m in self.masks])
        self.runtime = kit.Background(lambda: _load_lingbot(version))

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__)
        parser.add_argument(
            "--version",
            default=os.environ.get("VLLM_OMNI_VERSION", loader.DEFAULT_VERSION),
            help="vllm-omni release set up by setup.sh (default $VLLM_OMNI_VERSION or %s)" % loader.DEFAULT_VERSION,
        )
        kit.add_mask_option(parser, MASKS)
        args = parser.parse_args(argv)
        if not loader.is_ready(args.version):
            raise SystemExit(
                "vllm-omni %s is not set up: run VLLM_OMNI_VERSION=%s adapters/vllm-omni/setup.sh"
                % (args.version, args.version)
            )
        return cls(args.version, args.mask)

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch = rt.torch
        dtype = kit.dtype(torch, config["dtype"])
        self.config = config
        self.dtype = dtype
        shape = (config["batch"], config["capacity"], config["heads"], config["head_dim"])
        self.real = rt.lingbot.AttentionCache(key=torch.zeros(shape, dtype=dtype), value=torch.zeros(shape, dtype=dtype))
        tag_shape = (1, config["capacity"], 1, 1)
        self.twin = rt.lingbot.AttentionCache(
            key=torch.zeros(tag_shape, dtype=torch.float64), value=torch.zeros(tag_shape, dtype=torch.float64)
        )

    @property
    def global_end(self):
        return self.real.absolute_end

    def write(self, start, length, heads, recent_window, k, v):
        torch = self.rt.torch
        kit.hold_back(MASKS, self.masks, self, start, length)
        if k is None or start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no tensor has a negative length or start" % (start, length))
        persist = True
        if length == 0:
            if start > self.global_end:
                raise kvcheck.Outside("zero-length write at %d past the global end %d" % (start, self.global_end))
            # Every zero-length write is the probe: a read at the global end.
            start, persist = self.global_end, False
        tags = kit.tags(torch, start, length, torch.float64).reshape(1, length, 1, 1)
        update = self.rt.lingbot.update_cache
        sink = self.config["sink"]

        def call(cache):
            key, value = (tags, tags) if cache is self.twin else (k, v)
            return update(None, cache, key, value, start, sink_tokens=sink, update_cache=persist)

        (twin_keys, _), (keys, values) = kit.both(call, self.twin, self.real)
        visible = [int(t) - kit.TAG for t in twin_keys[0, :, 0, 0].tolist()]
        return visible, keys, values


def _first_chunk_offset(subject, start, length):
    if subject.real.last_start is None and start > 0 and length > 0:
        return "first chunk at %d, not at 0" % start


# name -> (what it holds back, the contract kind it answers, test)
MASKS = {
    "first-chunk-offset": ("first chunks that start past 0", "non_sequential", _first_chunk_offset),
}


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "LingBotCache"))
