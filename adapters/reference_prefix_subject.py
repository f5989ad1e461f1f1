#!/usr/bin/env python3
"""The prefix cache of docs/contract.md Part II, plainly, as a kvcheck-subject/1 process.

A block pool as a serving engine keeps one, in the Python standard library
alone: `N` physical blocks of `B` slots, each slot holding the `L` payload
rows of one position; a block table per running request; a reference count
per block; the sealed blocks indexed by their block prefix (the tuple of
tokens up to the block's end), at most one block per prefix; the cached
ones stamped with the index of the op that released them; a free set. Every
count it reports is counted from that pool, and every row it reads is
gathered through the request's block table from the slots `compute` wrote:
nothing is derived from the requests' tokens but the prefixes that name
sealed blocks. It keeps §12-§15 exactly (policy "contract"), every op, both
hit rules, any block size, and agrees op by op with the model
(crates/kvmodel/src/prefix, `PrefixModel`).

    python3 adapters/reference_prefix_subject.py [--window [SIZE,...]] [--window-layers L,...]
    kvcheck prefix run --subject exec:'python3 adapters/reference_prefix_subject.py'

`--window` opens only windowed configs (docs/contract.md §19): of the
sizes listed (any size without a list), over the layers of
`--window-layers` (every layer by default). The pool keeps every row, as
the model does; a read of a windowed layer returns the window's rows.

`kvcheck.prefix.PrefixSubject` (python/kvcheck/prefix.py) makes the §15
argument checks and keeps the requests' tokens and computed counts
(`self.requests`); this file is the pool: hits, allocation and eviction,
merges, copy on write, releases. Each op changes the pool only once its
one refusal (no room) has been ruled out, so a refused op changes nothing.
"""

import os
import sys

try:
    import kvcheck  # noqa: F401
except ImportError:
    # Runs from a bare checkout with nothing but python3 (CI, the
    # command above): the package is beside it.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kvcheck.prefix import NoRoom, Outside, PrefixSubject


def blocks_for(tokens, b):
    """ceil(tokens / B): the blocks a request of `tokens` tokens holds."""
    return -(-tokens // b)


class Pool:
    """N blocks of B slots, and the bookkeeping of docs/contract.md §12."""

    def __init__(self, blocks, block_size):
        self.n, self.b = blocks, block_size
        # slots[blk][i]: the L rows of the position at slot i, or None.
        self.slots = [[None] * block_size for _ in range(blocks)]
        # Running requests holding each block (forks share blocks).
        self.refs = [0] * blocks
        # The block prefix of a sealed block (tuple of tokens), else None.
        self.prefix = [None] * blocks
        # Every sealed block, held or cached, by its prefix: one per prefix.
        self.sealed = {}
        # Sealed blocks no running request holds: prefix -> last use.
        self.cached = {}
        self.free = set(range(blocks))

    def counts(self):
        in_use = sum(1 for refs in self.refs if refs > 0)
        # A self-check: a block is in use, cached or free, exactly one.
        if in_use + len(self.cached) + len(self.free) != self.n:
            raise AssertionError("pool accounting broken: %d in use, %d cached, %d free of %d"
                                 % (in_use, len(self.cached), len(self.free), self.n))
        return in_use, len(self.cached), len(self.free)

    def eviction_order(self):
        """Cached prefixes in the order of docs/contract.md §14: smallest last
        use, then the longest prefix, then the smaller token sequence."""
        return sorted(self.cached, key=lambda p: (self.cached[p], -len(p), p))

    def evict(self, count):
        for prefix in self.eviction_order()[:count]:
            blk = self.sealed.pop(prefix)
            del self.cached[prefix]
            self.prefix[blk] = None
            self.slots[blk] = [None] * self.b
            self.free.add(blk)

    def allocate(self, count):
        """`count` blocks for one request: free ones first, then cached ones
        evicted in §14's order. The caller has checked there is room."""
        if count > len(self.free):
            self.evict(count - len(self.free))
        taken = sorted(self.free)[:count]
        for blk in taken:
            self.free.remove(blk)
            self.refs[blk] = 1
        return taken

    def hold(self, blk):
        """One more running request holds `blk` (a hit, a fork, a merge)."""
        if self.refs[blk] == 0:
            del self.cached[self.prefix[blk]]  # a cached block is in use again
        self.refs[blk] += 1

    def release(self, blk, index):
        """A request gives `blk` up: once no running request holds it, a
        sealed block is cached with last use `index`, any other is free."""
        self.refs[blk] -= 1
        if self.refs[blk] > 0:
            return
        if self.prefix[blk] is not None:
            self.cached[self.prefix[blk]] = index
        else:
            self.slots[blk] = [None] * self.b
            self.free.add(blk)


class ReferencePrefix(PrefixSubject):
    """docs/contract.md Part II over a real pool: the CI subject of the prefix family."""

    name = "kvcheck reference prefix cache (Python)"
    hit = ("leave_one", "whole")
    policy = "contract"
    steps = "free"

    @classmethod
    def from_args(cls, argv):
        import argparse

        def ints(text):
            return [int(x) for x in text.split(",") if x]

        parser = argparse.ArgumentParser(prog="reference_prefix_subject.py")
        parser.add_argument("--window", nargs="?", const="", type=str, default=None,
                            help="open only windowed configs, of these sizes (default any)")
        parser.add_argument("--window-layers", type=ints, default=None,
                            help="the windowed layers (default every layer)")
        parser.add_argument("--free-behind-window", action="store_true",
                            help="give up the blocks behind the window as compute passes them (policy own)")
        parser.add_argument("--drop-behind-window", action="store_true",
                            help="as --free-behind-window, and free (not cache) what no one else holds")
        parser.add_argument("--fault", choices=sorted(WindowFreeing.FAULTS), default=None,
                            help="plant a fault (implies --free-behind-window)")
        args = parser.parse_args(argv)
        if args.free_behind_window or args.drop_behind_window or args.fault:
            if args.window is None or args.window_layers is not None:
                parser.error("--free-behind-window, --drop-behind-window and --fault need --window over every layer")
            subject = WindowFreeing(args.fault, drop=args.drop_behind_window)
        else:
            subject = cls()
        if args.window is not None:
            sizes = ints(args.window) or None
            subject.window = {"sizes": sizes, "layers": args.window_layers}
        elif args.window_layers is not None:
            parser.error("--window-layers needs --window")
        return subject

    def open(self, config):
        self.pool = Pool(config["blocks"], config["block_size"])
        self.tables = {}  # running request -> its block table (block ids)

    def counts(self):
        return self.pool.counts()

    # The hit and the admission of start and resume (§13, §15 step 3).

    def hit_for(self, tokens):
        """The longest block-aligned prefix of `tokens` within the hit rule's
        cap whose every block prefix is stored (held sealed or cached)."""
        b, n = self.pool.b, len(tokens)
        cap = n if self.config["hit"] == "whole" else max(n - 1, 0)
        hit = 0
        while hit + b <= cap and tuple(tokens[: hit + b]) in self.pool.sealed:
            hit += b
        return hit

    def admit(self, op, request, tokens):
        pool = self.pool
        hit = self.hit_for(tokens)
        reused = [pool.sealed[tuple(tokens[: (i + 1) * pool.b])] for i in range(hit // pool.b)]
        needed = blocks_for(len(tokens), pool.b) - len(reused)
        # The hit is held before the allocation: a block of the hit is not
        # evictable room for the request that reuses it.
        evictable = len(pool.cached) - sum(1 for blk in reused if pool.refs[blk] == 0)
        if needed > len(pool.free) + evictable:
            raise NoRoom("%s of request %d needs %d new blocks but only %d are free and %d cached"
                         % (op, request, needed, len(pool.free), evictable))
        for blk in reused:
            pool.hold(blk)
        self.tables[request] = reused + pool.allocate(needed)
        return hit

    def start(self, request, tokens):
        return self.admit("start", request, tokens)

    def resume(self, request):
        return self.admit("resume", request, self.requests[request].tokens)

    # compute: write the payload, then seal and merge (§12, §15).

    def compute(self, request, first, rows):
        pool, table = self.pool, self.tables[request]
        tokens, b = self.requests[request].tokens, pool.b
        for i in range(len(rows[0])):
            p = first + i
            blk = table[p // b]
            if pool.prefix[blk] is not None:
                raise AssertionError("compute writes position %d into sealed block %d" % (p, blk))
            pool.slots[blk][p % b] = [layer[i] for layer in rows]
        # Every block now full and computed is sealed, or merged onto the
        # block that already holds its prefix.
        for j in range((first + len(rows[0])) // b):
            blk = table[j]
            if blk is None or pool.prefix[blk] is not None:
                continue  # given up behind a window, or sealed
            prefix = tuple(tokens[: (j + 1) * b])
            stored = pool.sealed.get(prefix)
            if stored is None:
                pool.prefix[blk] = prefix
                pool.sealed[prefix] = blk
                continue
            # Forks share only fully computed partial blocks, which an
            # extend copies before anything can fill them.
            if pool.refs[blk] != 1:
                raise AssertionError("block %d is sealed while %d requests hold it" % (blk, pool.refs[blk]))
            pool.hold(stored)
            table[j] = stored
            pool.release(blk, self.index)  # unsealed: free

    # extend: room for the new tokens, and copy on write (§15).

    def extend(self, request, tokens):
        pool, table, b = self.pool, self.tables[request], self.pool.b
        n = len(self.requests[request].tokens)
        last = table[-1] if table else None
        # The new tokens land in the last block only if it is partial, not
        # sealed and this request's alone; otherwise it is copied first.
        # A block given up behind a window (None) is replaced the same
        # way, with nothing to copy: its positions are behind the window.
        copy = n % b != 0 and (last is None or pool.prefix[last] is not None or pool.refs[last] > 1)
        needed = blocks_for(n + len(tokens), b) - blocks_for(n, b) + int(copy)
        if needed > len(pool.free) + len(pool.cached):
            raise NoRoom("extend of request %d needs %d new blocks but only %d are free and %d cached"
                         % (request, needed, len(pool.free), len(pool.cached)))
        fresh = pool.allocate(needed)
        if copy:
            new = fresh.pop(0)
            # The copy holds this request's positions of the block; the
            # old block (sealed or shared) is never written again.
            if last is not None:
                pool.slots[new] = [row if i < n % b else None for i, row in enumerate(pool.slots[last])]
                pool.release(last, self.index)
            table[-1] = new
        table.extend(fresh)

    def fork(self, request, into):
        self.tables[into] = list(self.tables[request])
        for blk in self.tables[into]:
            if blk is not None:
                self.pool.hold(blk)

    def rollback(self, request, count):
        table = self.tables[request]
        kept = len(self.requests[request].tokens) - count
        # The last kept block stays as it is, sealed or not; the next
        # extend copies a sealed one.
        dropped = table[blocks_for(kept, self.pool.b):]
        del table[blocks_for(kept, self.pool.b):]
        for blk in dropped:
            if blk is not None:
                self.pool.release(blk, self.index)

    def release_all(self, request):
        for blk in self.tables.pop(request, []):
            if blk is not None:
                self.pool.release(blk, self.index)

    def finish(self, request):
        self.release_all(request)  # a preempted request holds nothing

    def preempt(self, request):
        self.release_all(request)

    def read(self, request):
        """The rows of the computed positions, gathered through the block
        table; a windowed layer's from the window's start (§19)."""
        pool, table, b = self.pool, self.tables[request], self.pool.b
        computed = self.requests[request].computed
        window = self.config["window"]
        windowed = set(window["layers"]) if window else set()
        start = self.window_start(request)
        rows = [[] for _ in range(self.config["layers"])]
        for p in range(computed):
            if p < start and not (set(range(self.config["layers"])) - windowed):
                continue  # behind the window of every layer: maybe given up
            blk = table[p // b]
            # A block given up behind the window reads as vLLM's null
            # block does: zeros.
            slot = pool.slots[blk][p % b] if blk is not None else [[0] * self.config["row_width"]] * self.config["layers"]
            if slot is None:
                raise AssertionError("position %d of request %d was never written" % (p, request))
            for layer, (kept, row) in enumerate(zip(rows, slot)):
                if p >= start or layer not in windowed:
                    kept.append(row)
        return rows

    def evict(self, count):
        self.pool.evict(count)

    def clear(self):
        self.pool.evict(len(self.pool.cached))


class WindowFreeing(ReferencePrefix):
    """The reference pool with a sliding window over every layer that gives
    up the blocks wholly behind a request's window (docs/contract.md §19)
    when its next step is scheduled, as vLLM's sliding-window manager does
    in `allocate_slots`: at `extend`, behind the window of the tokens
    computed so far, once the step's blocks are allocated. A sealed block given up is cached, any other freed,
    and the table keeps a hole (None) where it was. With `drop`, a sealed
    one no other request holds is freed too, as sglang frees its
    sliding-window slots: hits through it are lost. Its counts are no
    longer the model's (the model keeps every block), so it declares
    policy "own" and is judged by the invariants.

    A rollback that would bring back a query whose keys were given up
    (below the computed count of the last step that gave blocks up) is
    outside: such a cache rejects only the drafts of its last step, and
    vLLM never drops a token it accepted.

    FAULTS: `frees-window-start` gives up one block too many, the one that
    holds the window's first position once it is full (the off-by-one of
    counting the window from the query itself); a read of that position
    then finds the hole, read as zeros (vLLM's null block)."""

    FAULTS = {"frees-window-start"}
    policy = "own"

    def __init__(self, fault=None, drop=False):
        self.fault, self.drop = fault, drop
        if fault:
            self.name = "%s, fault %s" % (self.name, fault)

    def open(self, config):
        super().open(config)
        self.floor = {}  # request -> computed count when it last gave blocks up

    def extend(self, request, tokens):
        # After the allocation, so that a refused step changes nothing (vLLM
        # gives up first, and its refused steps free blocks: its subject
        # answers those outside).
        super().extend(request, tokens)
        self.give_up_behind_window(request)

    def give_up_behind_window(self, request):
        pool, b, table = self.pool, self.pool.b, self.tables[request]
        computed = self.requests[request].computed
        start = self.window_start(request)
        limit = min(start + 1 if self.fault == "frees-window-start" else start, computed)
        if limit // b:
            self.floor[request] = max(self.floor.get(request, 0), computed)
        for j in range(limit // b):
            blk = table[j]
            if blk is None:
                continue
            pool.release(blk, self.index)
            table[j] = None
            prefix = pool.prefix[blk]
            if self.drop and prefix in pool.cached:
                del pool.cached[prefix]
                del pool.sealed[prefix]
                pool.prefix[blk] = None
                pool.slots[blk] = [None] * b
                pool.free.add(blk)

    def fork(self, request, into):
        super().fork(request, into)
        if request in self.floor:
            self.floor[into] = self.floor[request]

    def rollback(self, request, count):
        kept = len(self.requests[request].tokens) - count
        floor = self.floor.get(request, 0)
        if min(kept, self.requests[request].computed) < floor:
            raise Outside("rollback of request %d to %d tokens, below the %d it had computed when it gave up "
                          "the blocks behind its window" % (request, kept, floor))
        super().rollback(request, count)

    def release_all(self, request):
        self.floor.pop(request, None)
        super().release_all(request)


if __name__ == "__main__":
    from kvcheck.serve_prefix import main

    sys.exit(main([os.path.abspath(__file__) + ":ReferencePrefix"] + sys.argv[1:]))
