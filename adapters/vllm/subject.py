#!/usr/bin/env python3
"""vLLM's v1 prefix-caching KV cache manager as a kvcheck prefix subject.

The subject is `vllm.v1.core.kv_cache_manager.KVCacheManager`, unmodified,
inside vLLM's own `Scheduler`, with one full-attention KV cache group of
`blocks + 1` blocks (block 0 is vLLM's null block) of `block_size` tokens
and prefix caching on, driven the way `Scheduler.schedule()` drives it
(manager.py: `VllmManager`), on the CPU. The payload rows a model runner
would write go into a numpy block array at the slots of the request's
block table, and `read` gathers them back through the table: what kvcheck
judges is which blocks vLLM hands each request (docs/vllm.md).

| kvcheck op (contract §15) | vLLM |
|---|---|
| `start r t` | a new request of prompt `t` admitted: `get_computed_blocks`, then `allocate_slots` for the prompt past the hit (its first chunk with `--chunk`); the hit is what `get_computed_blocks` found; `None` from `allocate_slots` is `no_room` |
| `compute r k` | the forward pass: the payload written at the request's slots, `num_computed_tokens += k` (chunk by chunk with `--chunk`, each next chunk allocated in turn) |
| `extend r u` | one decode step: `u[0]` is the token the last step sampled, `u[1:]` the drafts proposed for this one; `allocate_slots` for all of them (`None`: `no_room`, the step not scheduled) |
| `rollback r k` | the rejection of the last `k` drafts of `r`'s last step, right after its `compute` (`num_computed_tokens -= k`); anything else is outside: vLLM never drops a token it accepted |
| `finish r` | `Scheduler._free_request` (`kv_cache_manager.free`) |
| `preempt r` | `Scheduler._preempt_request`: `free`, `num_computed_tokens = 0` |
| `resume r` | the preempted request admitted again: `start`'s calls over its prompt and output tokens |
| `clear` | `Scheduler.reset_prefix_cache()`; vLLM refuses (returns False, changes nothing) while a request holds blocks: outside |
| `read r` | the rows of positions `[0, num_computed_tokens)` gathered through `get_block_ids` (a windowed layer's from the window's start, through its group's table) |

`counts()` are the block pool's own: blocks with `ref_cnt > 0` (in use),
blocks in the free queue that keep a prefix-cache hash (cached), and the
rest of the free queue (free), the null block left out.

    adapters/vllm/.venv/bin/python adapters/vllm/subject.py [--no-spec] [--max-drafts K]
        [--chunk C] [--block-size B] [--blocks LO-HI] [--ops OP,...] [--priority]
        [--window W[,W...] [--hybrid]]

`--no-spec`: an engine without speculative decoding: a step schedules one
token, so an `extend` of more than one token is outside and `rollback` is
not declared. `--max-drafts K`: `num_speculative_tokens = K`, an `extend`
of more than `K + 1` tokens is outside (default: any number). `--chunk C`:
chunked prefill, at most C prompt tokens per step. `--block-size B` opens
block size B only; `--blocks LO-HI` answers outside to a pool of fewer
than LO or more than HI blocks; `--ops` declares only the ops named
(kvcheck draws no other): campaign rows.

`--priority`: the scheduler's `--scheduling-policy priority`, where the
preemption victim is the lowest-priority running request, which may be one
the same `schedule()` call already allocated for (FCFS preempts only
requests not scheduled yet). The subject then declares `steps: free`, so
that kvcheck may `preempt` a request between its allocating op and its
`compute`, and allocates a prefill's next chunk right after the forward
pass of the one before; every order vLLM never produces is outside: a
`compute` of other than the tokens scheduled for the request (a forward
pass computes them all), an `extend`, `finish` or `rollback` of a request
with tokens not computed (a request is scheduled once per step; finishing
and rejections follow the forward pass), a `preempt` of a request admitted
in the step being scheduled (the waiting queue is scheduled after the
running requests, and only in a step that preempted none) or whose step
carries drafts (vLLM drops them, the contract keeps them), and a `start`
or `resume` whose hit takes blocks a running request has scheduled and
not computed (in vLLM such a request is admitted in the same step and
reads them in the forward pass that writes them).

`--window W`: sliding-window attention of `sliding_window = W` (a query at
position p attends keys [p - W + 1, p], the contract's W, §19) on every
layer: one `SlidingWindowSpec` KV cache group, so vLLM's
`SlidingWindowManager` frees the blocks that leave the window and finds
windowed hits. With `--hybrid`, layer 0 is full attention and layer 1
windowed: a `FullAttentionSpec` group and a `SlidingWindowSpec` group
over one pool (`HybridKVCacheCoordinator`), each with its own block
table; configs of other than 2 layers are outside. The subject declares
the capabilities `window` (sizes W..., layers all or [1]) and `groups`
({"full": 0, "window": 1} or {"full": 1, "window": 1}); a read returns a
windowed layer's rows of positions [s, c) only (`window_start`).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from kvcheck import Outside  # noqa: E402
from kvcheck.prefix import NoRoom, PrefixSubject  # noqa: E402

import manager as vllm_manager  # noqa: E402


class VllmManagerSubject(PrefixSubject):
    name = "vllm %s KVCacheManager" % vllm_manager.VERSION
    ops = ("start", "compute", "extend", "rollback", "finish", "preempt", "resume", "read", "clear")
    hit = ("leave_one",)
    block_sizes = None
    policy = "own"
    steps = "whole"

    def __init__(self, spec=True, max_drafts=None, block_size=None, blocks=None, ops=None,
                 priority=False, chunk=None, windows=None, hybrid=False):
        self.spec = spec
        self.chunk = chunk
        self.max_drafts = max_drafts if spec else 0
        self.blocks = blocks
        self.priority = priority
        notes = []
        declared = tuple(ops) if ops else type(self).ops
        if not spec:
            declared = tuple(op for op in declared if op != "rollback")
            notes.append("no speculative decoding")
        elif max_drafts is not None:
            notes.append("%d speculative tokens" % max_drafts)
        if chunk:
            notes.append("prefill chunks of %d" % chunk)
        if priority:
            self.steps = "free"
            notes.append("priority scheduling")
        if hybrid and not windows:
            raise ValueError("--hybrid needs --window W: the size of its sliding-window layer")
        self.hybrid = hybrid
        if windows:
            # The hello's `window` and `groups` (docs/contract.md §19): the
            # hybrid's layer 1 is windowed, its layer 0 full attention.
            self.window = {"sizes": sorted(set(windows)), "layers": [1] if hybrid else None}
            self.groups = {"full": 1 if hybrid else 0, "window": 1}
            sizes = "/".join(str(w) for w in sorted(set(windows)))
            notes.append("full layer 0 + sliding window %s on layer 1" % sizes if hybrid
                         else "sliding window %s" % sizes)
        self.ops = declared
        if block_size is not None:
            self.block_sizes = (block_size,)
        if notes:
            self.name = "%s (%s)" % (type(self).name, ", ".join(notes))
        self.vllm = None

    @classmethod
    def from_args(cls, argv):
        parser = argparse.ArgumentParser(prog="adapters/vllm/subject.py")
        parser.add_argument("--no-spec", action="store_true",
                            help="no speculative decoding: one token per decode step")
        parser.add_argument("--max-drafts", type=int, default=None,
                            help="num_speculative_tokens (default: any number of drafts)")
        parser.add_argument("--block-size", type=int, default=None, help="open this block size only")
        parser.add_argument("--blocks", default=None, metavar="LO-HI",
                            help="answer outside to pools of other sizes")
        parser.add_argument("--ops", default=None, help="declare only these ops (comma-separated)")
        parser.add_argument("--chunk", type=int, default=None,
                            help="chunked prefill: at most this many prompt tokens per step")
        parser.add_argument("--priority", action="store_true",
                            help="the priority scheduling policy: preemption after allocation (steps: free)")
        parser.add_argument("--window", default=None, metavar="W[,W...]",
                            help="sliding-window attention of these sizes (every layer; with --hybrid, layer 1)")
        parser.add_argument("--hybrid", action="store_true",
                            help="with --window: layer 0 full attention, layer 1 windowed (two KV cache groups)")
        args = parser.parse_args(argv)
        if args.hybrid and not args.window:
            parser.error("--hybrid needs --window W")
        windows = [int(w) for w in args.window.split(",")] if args.window else None
        if windows and min(windows) < 1:
            parser.error("a sliding window holds at least one key (the query's own)")
        blocks = None
        if args.blocks:
            lo, _, hi = args.blocks.partition("-")
            blocks = (int(lo), int(hi or lo))
        ops = tuple(args.ops.split(",")) if args.ops else None
        return cls(spec=not args.no_spec, max_drafts=args.max_drafts, block_size=args.block_size,
                   blocks=blocks, ops=ops, priority=args.priority, chunk=args.chunk,
                   windows=windows, hybrid=args.hybrid)

    @staticmethod
    def _id(request):
        return str(request)

    def _scheduled(self, request):
        """Tokens allocated for the request's step and not computed yet (priority mode)."""
        return self.vllm.scheduled.get(self._id(request), 0) if self.priority else 0

    def _not_in_flight(self, request, what):
        if self.priority and self.vllm.uncomputed(self._id(request)):
            raise Outside("%s of a request whose scheduled tokens are not computed yet: vLLM %s"
                          % (what.split(":")[0], what.split(":")[1]))

    def open(self, config):
        if config["hit"] != "leave_one":
            raise Outside("vLLM leaves the last prompt token to compute (max_cache_hit_length = num_tokens - 1)")
        if self.blocks and not self.blocks[0] <= config["blocks"] <= self.blocks[1]:
            raise Outside("this row opens pools of %d to %d blocks" % self.blocks)
        window = config.get("window")
        if self.hybrid and config["layers"] != 2:
            # vLLM's hybrid allocator groups layers into groups of one size
            # (one page per block for each group): 1 full + 1 windowed layer
            # is one group of each, the `groups` declared; other counts
            # would make more groups.
            raise Outside("the hybrid row models layer 0 full and layer 1 windowed: 2 layers, not %d"
                          % config["layers"])
        self.vllm = vllm_manager.VllmManager(config["blocks"], config["block_size"],
                                             config["layers"], config["row_width"], spec=self.spec,
                                             chunk=self.chunk, eager=self.priority,
                                             policy="priority" if self.priority else "fcfs",
                                             window=window["size"] if window else None,
                                             windowed=window["layers"] if window else None)

    def counts(self):
        return self.vllm.counts()

    def _admitted(self, call):
        try:
            return call()
        except vllm_manager.NoRoomError as error:
            raise NoRoom(str(error))
        except vllm_manager.SameStepHitError as error:
            raise Outside("%s: in vLLM that request is admitted in the same step and reads them "
                          "in the forward pass that writes them" % error)

    def start(self, request, tokens):
        return self._admitted(lambda: self.vllm.start(self._id(request), tokens, same_step=self.priority))

    def compute(self, request, first, rows):
        if self.priority:
            scheduled = self._scheduled(request)
            if not scheduled:
                raise Outside("the request's next prefill chunk found no room: vLLM preempts a request")
            if len(rows[0]) != scheduled:
                raise Outside("a forward pass computes all %d tokens scheduled for the request, not %d"
                              % (scheduled, len(rows[0])))
        try:
            self.vllm.compute(self._id(request), first, rows)
        except vllm_manager.NoRoomError as error:
            raise Outside("%s: vLLM preempts a request" % error)

    def extend(self, request, tokens):
        self._not_in_flight(request, "an extend:schedules a request once per step")
        if self.max_drafts is not None and len(tokens) - 1 > self.max_drafts:
            raise Outside("a decode step schedules the sampled token and at most %d drafts, not %d tokens"
                          % (self.max_drafts, len(tokens)))
        try:
            self.vllm.extend(self._id(request), list(tokens))
        except vllm_manager.NoRoomError as error:
            raise NoRoom(str(error))
        except vllm_manager.FreedOnNoRoomError as error:
            # Not a no_room: the contract's refusal changes nothing (P7),
            # and vLLM's freed what left the window before it found no room
            # (docs/vllm.md, differences by design).
            raise Outside("%s: vLLM frees a request's blocks that left the window before it checks "
                          "for room, so its refusal changes the pool" % error)

    def rollback(self, request, count):
        self._not_in_flight(request, "a rollback:rejects drafts after the forward pass")
        pending = self.vllm.pending(self._id(request))
        if count > pending:
            raise Outside("vLLM rejects only drafts of the request's last step, right after it "
                          "(%d still rejectable), never an accepted token: not %d" % (pending, count))
        self.vllm.rollback(self._id(request), count)

    def finish(self, request):
        self._not_in_flight(request, "a finish:finishes a request after the forward pass")
        self.vllm.finish(self._id(request))

    def preempt(self, request):
        if self._scheduled(request):
            if self.vllm.loop[self._id(request)] == "waiting":
                raise Outside("a preemption of a request admitted in the step being scheduled: vLLM "
                              "admits waiting requests after the running ones, and only in a step "
                              "that preempted none")
            if self.vllm.pending(self._id(request)):
                raise Outside("a preemption of a request whose scheduled step carries drafts: "
                              "vLLM drops the drafts, the contract keeps them")
        self.vllm.preempt(self._id(request))

    def resume(self, request):
        return self._admitted(lambda: self.vllm.resume(self._id(request), same_step=self.priority))

    def read(self, request):
        # The window's start is the contract's (§19): vLLM keeps at least
        # that much (it frees only blocks wholly below c - W + 1 for a
        # computed count c the request had when a step was scheduled).
        return self.vllm.read(self._id(request), self.window_start(request))

    def clear(self):
        if not self.vllm.clear():
            in_use, _, _ = self.vllm.counts()
            raise Outside("vLLM resets its prefix cache only when no request holds a block "
                          "(reset_prefix_cache() returned False with %d blocks in use)" % in_use)


if __name__ == "__main__":
    # kvcheck.serve_prefix: the protocol on the real stdout, anything else
    # written there (vLLM's logs) on stderr.
    from kvcheck.serve_prefix import main

    sys.exit(main(["%s:VllmManagerSubject" % os.path.abspath(__file__)] + sys.argv[1:]))
