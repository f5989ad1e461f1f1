#!/usr/bin/env python3
"""sglang's radix prefix cache (`RadixCache`) as a kvcheck prefix subject.

The subject is `sglang.srt.mem_cache.radix_cache.RadixCache`, unmodified,
over sglang's own `ReqToTokenPool` and token-to-KV allocator
(`TokenToKVPoolAllocator` for page size 1, `PagedTokenToKVPoolAllocator`
above), driven the way sglang's scheduler drives it, with sglang's `Req`
and `ScheduleBatch` (driver.py: `RadixDriver`), on the CPU. The payload
rows a model runner would write go into a numpy KV array at the slots of
the request's row of `req_to_token`, and `read` gathers them back through
that row: what kvcheck judges is which slots sglang hands each request.

| kvcheck op (contract §15) | sglang 0.5.23 |
|---|---|
| `start r t` | admission: `req.init_next_round_input(tree_cache)` (the hit, capped at `len(t) - 1`, page-aligned), the matched node locked, `ScheduleBatch.prepare_for_extend()` allocates the rest (evicting from the tree when the allocator runs short); tokens that do not fit in the free and evictable pages: `no_room` |
| `compute r k` | the forward pass: the payload written at the slots `req_to_token[req_pool_idx, c:c+k]`; after a prefill, `checkpoint_kv_cache` (the prompt inserted into the tree); a prompt longer than `--chunked-prefill-size` prefills here chunk by chunk, each stashed into the tree |
| `extend r u` | one decode step per token: appended to `output_ids`, `prepare_for_decode()` allocates its slot; `no_room` when they do not fit |
| `finish r` | `release_kv_cache(req, tree_cache, checkpoint=True)` (a retracted request holds nothing) |
| `preempt r` | retraction: `schedule_batch.release_req` (`release_kv_cache(checkpoint=False)`, then `evict_from_tree_cache` of 20 tokens per request left running) |
| `resume r` | the retracted request admitted again over its prompt and output tokens |
| `read r` | the rows of positions `[0, c)` gathered through `req_to_token` |
| `evict k` | `RadixCache.evict(EvictParams(num_tokens=k * B))` |
| `clear` | `RadixCache.evict` of `evictable_size()` tokens: every unlocked node |

Left out: `fork` (sglang has no fork: parallel samples share the prompt
through the tree) and `rollback` (only speculative decoding drops tokens,
and its verify path is not this scheduler's plain decode). The hit rule is
`leave_one` (`_compute_max_prefix_len`: `input_len - 1`); `whole` is
outside. Block size `B` is sglang's `--page-size`.

`counts()`: in use, the pages the running requests' rows point at, each
once; cached, `RadixCache.evictable_size()` in pages; free, the allocator's
`available_size()` in pages.

    adapters/sglang-radix/.venv/bin/python adapters/sglang-radix/subject.py \
        [--tree radix|unified] [--page-sizes 1,2,4,16] [--blocks MIN:MAX] [--ops OP,...]
        [--eviction-policy lru|lfu|slru|priority|tlru] [--eviction-policy-config JSON]
        [--chunked-prefill-size C] [--swa W[,W...] [--swa-layers L,...] [--swa-eviction-interval I]]

`--tree unified` drives, through the same calls, `UnifiedRadixCache` with
its full-attention component alone: the tree sglang 0.5.23's scheduler
builds by default for a full-attention model (mem_cache/registry.py,
`create_unified_radix_cache`). `RadixCache` is what the scheduler builds
for a pure sliding-window model (`PureSWARadixCache` derives from it) and
under `--enable-flexkv` (`FlexKVRadixCache`).

`--swa W` drives what the scheduler builds for a hybrid sliding-window
model (`is_hybrid_swa`: some layers full attention, some windowed):
`UnifiedRadixCache` with its FULL and SWA components over `SWAKVPool` and
`SWATokenToKVPoolAllocator` (driver.py: `SWARadixDriver`). The configs it
opens carry kvcheck's window of size W (a query at p reads keys
[p - W + 1, p]: sglang's `sliding_window_size` W - 1) over `--swa-layers`
(default layer 1; layer 0 stays full attention); `read` returns a windowed
layer's rows of [s, c) only (contract §19); `counts()` is the full pool's
(docs/sglang-radix.md "The sliding-window component").
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from kvcheck import Outside  # noqa: E402
from kvcheck.prefix import NoRoom, PrefixSubject  # noqa: E402

import driver  # noqa: E402

TREES = {"radix": "RadixCache", "unified": "UnifiedRadixCache"}


def sizes(text):
    values = tuple(int(v) for v in text.split(","))
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("page sizes are positive integers, got %r" % text)
    return values


def bounds(text):
    low, _, high = text.partition(":")
    low, high = int(low), int(high)
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError("MIN:MAX with 1 <= MIN <= MAX, got %r" % text)
    return low, high


class SglangRadixSubject(PrefixSubject):
    name = "sglang %s RadixCache" % driver.VERSION
    ops = ("start", "compute", "extend", "finish", "preempt", "resume", "read", "evict", "clear")
    hit = ("leave_one",)
    # sglang's --page-size takes any positive size; these are the ones run.
    block_sizes = (1, 2, 4, 16)
    policy = "own"
    steps = "whole"

    def __init__(self, tree="radix", page_sizes=None, blocks=None, ops=None, eviction_policy=None,
                 eviction_policy_config=None, chunked_prefill_size=None, swa=None, swa_layers=(1,),
                 swa_eviction_interval=None, read_through=None):
        self.tree = tree
        # --read-through: read every layer's rows through sglang's
        # TorchNativeAttnBackend (repro/torch_native_read.py), the path
        # "extend" or "decode"; None reads them back from the pools.
        self.read_through = read_through
        self.reader = None
        # The sliding-window mode (driver.SWARadixDriver): the window sizes W
        # opened (kvcheck's W; sglang's sliding_window_size is W - 1), the
        # windowed layers (the others full attention), and sglang's
        # SGLANG_SWA_EVICTION_INTERVAL (None: sglang's default, 128).
        self.swa = None if swa is None else tuple(swa)
        self.swa_layers = tuple(sorted(swa_layers))
        self.swa_eviction_interval = swa_eviction_interval
        if self.swa is not None:
            # What the scheduler builds for a hybrid SWA model.
            tree = self.tree = "unified"
            self.window = {"sizes": list(self.swa), "layers": list(self.swa_layers)}
            # The pool kvcheck counts is sglang's full-attention pool (the SWA
            # pool, of the same size, never runs short first; counts() checks
            # it instead, SWARadixDriver.swa_check). A request holds one table
            # there: its window table lives in the other pool. So groups is
            # {full 1, window 0}, which keeps P8/P9 (an op needs at most
            # groups x blocks) and the blocks a hit takes back exact for the
            # counted pool; {1, 1} would let a refusal with room in it pass.
            # docs/sglang-radix.md "The sliding-window component".
            self.groups = {"full": 1, "window": 0}
        self.chunked_prefill_size = chunked_prefill_size
        self.eviction_policy = eviction_policy
        self.eviction_policy_config = eviction_policy_config
        if ops is not None:
            self.ops = tuple(op for op in type(self).ops if op in ops)
        self.name = "sglang %s %s" % (driver.VERSION, TREES[tree])
        if eviction_policy is not None:
            self.name += " (%s eviction%s)" % (
                eviction_policy, "" if eviction_policy_config is None else " " + json.dumps(eviction_policy_config))
        if page_sizes is not None:
            self.block_sizes = tuple(page_sizes)
        if chunked_prefill_size is not None:
            self.name += " (chunked prefill %d)" % chunked_prefill_size
        if self.swa is not None:
            self.name += " + SWA (W %s, layers %s%s)" % (
                ",".join(map(str, self.swa)), ",".join(map(str, self.swa_layers)),
                "" if swa_eviction_interval is None else ", eviction interval %d" % swa_eviction_interval)
        if read_through is not None:
            self.name += " read through TorchNativeAttnBackend.forward_%s" % read_through
        # (least, most) pool sizes opened; a campaign row's domain.
        self.pool = blocks
        self.radix = None

    @classmethod
    def from_args(cls, argv):
        parser = argparse.ArgumentParser(prog="adapters/sglang-radix/subject.py")
        parser.add_argument("--tree", choices=sorted(TREES), default="radix",
                            help="radix: RadixCache (radix_cache.py, the default); unified: UnifiedRadixCache "
                                 "with the full-attention component, what 0.5.23's scheduler builds by default")
        parser.add_argument("--page-sizes", type=sizes, default=None,
                            help="the page sizes (block sizes) opened, e.g. 1 or 2,4,16 (default %s)"
                                 % ",".join(map(str, cls.block_sizes)))
        parser.add_argument("--blocks", type=bounds, default=None,
                            help="MIN:MAX, the pool sizes opened; others are outside (a campaign row's domain)")
        parser.add_argument("--ops", type=lambda text: tuple(text.split(",")), default=None,
                            help="declare only these of the ops (a campaign row's domain), e.g. "
                                 "start,compute,finish,read,evict,clear")
        parser.add_argument("--eviction-policy", choices=("lru", "lfu", "slru", "priority", "tlru"), default=None,
                            help="sglang's --radix-eviction-policy (default: sglang's, lru); tlru needs --tree unified")
        parser.add_argument("--eviction-policy-config", type=json.loads, default=None,
                            help="sglang's --radix-eviction-policy-config, a JSON object, e.g. "
                                 "'{\"threshold\": 4, \"next_prompt_estimate\": 1}' for tlru")
        parser.add_argument("--chunked-prefill-size", type=int, default=None,
                            help="sglang's --chunked-prefill-size: prompts longer than this prefill in chunks, "
                                 "each stashed into the tree (default: sglang's, 4096 on the CPU)")
        parser.add_argument("--swa", type=sizes, default=None, metavar="W[,W...]",
                            help="sglang's hybrid sliding-window cache (SWAKVPool, SWATokenToKVPoolAllocator, "
                                 "UnifiedRadixCache with the FULL and SWA components) with these windows: a query "
                                 "at p attends [p-W+1, p], sglang's sliding_window_size W-1; W >= 2")
        parser.add_argument("--swa-layers", type=lambda text: tuple(int(v) for v in text.split(",")), default=(1,),
                            help="with --swa: the windowed layers (default 1: layer 0 full attention, layer 1 "
                                 "windowed, as gemma alternates); at least one layer stays full attention")
        parser.add_argument("--swa-eviction-interval", type=int, default=None,
                            help="with --swa: sglang's SGLANG_SWA_EVICTION_INTERVAL, the tokens that must have "
                                 "left the window before a decode step frees them (default: sglang's, 128)")
        parser.add_argument("--read-through", choices=("torch_native", "torch_native-decode"), default=None,
                            help="with --swa: read every layer's rows through sglang's TorchNativeAttnBackend "
                                 "(forward_extend, or forward_decode one position at a time) with a probe layer "
                                 "of sliding_window_size 0, whose output rows are the rows it gathered, instead "
                                 "of from the pools (repro/torch_native_read.py; docs/findings/"
                                 "sglang-torch-native-swa-reads-full-slots.md)")
        args = parser.parse_args(argv)
        if args.read_through is not None and args.swa is None:
            parser.error("--read-through: with --swa only (the backend's SWA reads)")
        if args.swa is not None:
            if args.tree == "radix" and any(arg.startswith("--tree") for arg in argv):
                parser.error("--swa: sglang builds UnifiedRadixCache (FULL + SWA) for a hybrid SWA model, not RadixCache")
            if min(args.swa) < 2:
                parser.error("--swa: W >= 2 (sglang's SWAComponent requires sliding_window_size = W - 1 > 0)")
            if 0 in args.swa_layers or min(args.swa_layers) < 0:
                parser.error("--swa-layers: layer 0 stays full attention (a hybrid model; every layer windowed "
                             "is sglang's PureSWARadixCache, not driven here)")
        if args.eviction_policy == "tlru" and args.tree != "unified":
            parser.error("--eviction-policy tlru: sglang refuses T-LRU on any tree but UnifiedRadixCache")
        if args.ops is not None:
            unknown = [op for op in args.ops if op not in cls.ops]
            if unknown or not {"start", "compute", "finish"} <= set(args.ops):
                parser.error("--ops: a subset of %s with start, compute and finish" % ",".join(cls.ops))
        return cls(tree=args.tree, page_sizes=args.page_sizes, blocks=args.blocks, ops=args.ops,
                   eviction_policy=args.eviction_policy, eviction_policy_config=args.eviction_policy_config,
                   chunked_prefill_size=args.chunked_prefill_size, swa=args.swa, swa_layers=args.swa_layers,
                   swa_eviction_interval=args.swa_eviction_interval,
                   read_through={None: None, "torch_native": "extend", "torch_native-decode": "decode"}[args.read_through])

    def open(self, config):
        if self.pool is not None and not self.pool[0] <= config["blocks"] <= self.pool[1]:
            raise Outside("this run opens pools of %d to %d blocks, not %d" % (self.pool + (config["blocks"],)))
        c = self.chunked_prefill_size
        if c is not None and c > 0 and c % config["block_size"]:
            raise Outside("sglang requires --chunked-prefill-size %d divisible by --page-size %d" % (c, config["block_size"]))
        if config["hit"] != "leave_one":
            raise Outside("sglang's scheduler leaves the last prompt token to compute (max_prefix_len = input_len - 1)")
        if self.swa is not None:
            self.radix = self._open_swa(config)
            self.reader = None
            if self.read_through is not None:
                sys.path.insert(0, os.path.join(HERE, "repro"))
                from torch_native_read import TorchNativeRead

                self.reader = TorchNativeRead(self.radix, self.read_through)
            return
        self.radix = driver.RadixDriver(config["blocks"], config["block_size"], config["layers"], config["row_width"],
                                        tree=self.tree, eviction_policy=self.eviction_policy,
                                        eviction_policy_config=self.eviction_policy_config,
                                        chunked_prefill_size=self.chunked_prefill_size)

    def _open_swa(self, config):
        window = config["window"]  # the base opened only ours: a size of --swa over --swa-layers
        size, b = window["size"], config["block_size"]
        if (size - 1) + b >= config["blocks"] * b:
            # pool_configurator.py validate_swa_pool_size: an SWA pool of at
            # most sliding_window_size + page_size tokens cannot admit one
            # request, and sglang refuses to start with it.
            raise Outside("sglang refuses an SWA pool of %d tokens with sliding_window_size %d and page size %d"
                          % (config["blocks"] * b, size - 1, b))
        return driver.SWARadixDriver(config["blocks"], b, config["layers"], config["row_width"], size,
                                     window["layers"], eviction_policy=self.eviction_policy,
                                     eviction_policy_config=self.eviction_policy_config,
                                     chunked_prefill_size=self.chunked_prefill_size,
                                     eviction_interval=self.swa_eviction_interval)

    def counts(self):
        return self.radix.counts()

    def start(self, request, tokens):
        try:
            return self.radix.start(request, tokens)
        except driver.NoRoomError as error:
            raise NoRoom(str(error))

    def compute(self, request, first, rows):
        self.radix.compute(request, first, rows)

    def extend(self, request, tokens):
        try:
            self.radix.extend(request, tokens)
        except driver.NoRoomError as error:
            raise NoRoom(str(error))

    def finish(self, request):
        self.radix.finish(request)

    def preempt(self, request):
        self.radix.preempt(request)

    def resume(self, request):
        try:
            return self.radix.resume(request)
        except driver.NoRoomError as error:
            raise NoRoom(str(error))

    def read(self, request):
        if self.swa is not None:
            # A windowed layer's rows of [s, c) only (contract §19).
            if self.reader is not None:
                return self.reader.read(request, self.requests[request].computed, self.window_start(request))
            return self.radix.read(request, self.requests[request].computed, self.window_start(request))
        return self.radix.read(request, self.requests[request].computed)

    def evict(self, count):
        self.radix.evict(count)

    def clear(self):
        self.radix.clear()


if __name__ == "__main__":
    # kvcheck.serve_prefix: the protocol on the real stdout, anything else
    # written there (sglang's logs, RadixCache.pretty_print) on stderr.
    from kvcheck.serve_prefix import main

    sys.exit(main(["%s:SglangRadixSubject" % os.path.abspath(__file__)] + sys.argv[1:]))
