"""sglang's `RadixCache` driven the way sglang's scheduler drives it.

`RadixDriver` owns one `sglang.srt.mem_cache.radix_cache.RadixCache` over
sglang's own pools, `ReqToTokenPool` and `TokenToKVPoolAllocator` (page
size 1) or `PagedTokenToKVPoolAllocator` (page size > 1), all unmodified
and on the CPU, and the KV array a model runner would write (a numpy array
of u32 payload bits, one row per token slot and layer). For each step of a
request's life it makes the calls sglang 0.5.23's scheduler makes
(`sglang/srt/managers/scheduler.py`, `schedule_policy.py`,
`schedule_batch.py`, `scheduler_components/batch_result_processor.py`,
`sglang/srt/mem_cache/common.py`, `allocation.py`), with sglang's own
`Req` and `ScheduleBatch` objects:

| step | what the scheduler does | here |
|---|---|---|
| a request is admitted | `req.init_next_round_input(tree_cache)` (`match_kv_cache`: the hit, capped at `input_len - 1` by `_compute_max_prefix_len`, page-aligned), `PrefillAdder._commit_prefill_admission` (`req.extend_end`, `req.lock = tree_cache.lock(req.last_node)`), `ScheduleBatch.init_new([...]).prepare_for_extend()` (`alloc_for_extend`: `alloc_req_slots`, `alloc_token_slots` / `alloc_paged_token_slots_extend`, which evict from the tree when the allocator runs short, and the row of `req_to_token` written) | `start`, `resume` |
| the prefill's forward pass | the model writes the KV of positions `[prefix_len, extend_end)` at `out_cache_loc`; `process_batch_result_prefill` then calls `checkpoint_kv_cache(req, tree_cache)` (`RadixCache.checkpoint`: the prompt inserted, duplicates freed, the row re-pointed at the tree's slots, the lock moved to the new node) | `compute` after `start`/`resume` |
| a decode step | the sampled token appended to `req.output_ids`; `ScheduleBatch.prepare_for_decode()` (`alloc_for_decode`, evicting when short); the forward writes the token's KV | `extend` (one decode step per token) then `compute` |
| retraction | `ScheduleBatch.retract_decode` → `release_req` (`release_kv_cache(req, tree_cache, checkpoint=False)`, then `evict_from_tree_cache(tree_cache, remaining * SGLANG_RETRACT_DECODE_STEPS)`, `req.reset_for_retract()`) | `preempt` |
| the retracted request scheduled again | a new admission over `origin_input_ids + output_ids` | `resume` |
| a request finishes | `release_kv_cache(req, tree_cache, checkpoint=True)`: the whole sequence inserted, the rest of the row freed, the lock released | `finish` |
| eviction | `RadixCache.evict(EvictParams(num_tokens))`: least recently used leaves first, whole nodes | `evict`, `clear` (everything evictable) |

The one thing the scheduler decides that is not the cache's: admission.
sglang's `PrefillAdder` admits a request when its tokens plus a reserve
for the tokens it may still decode fit in `available + evictable`; here a
request is admitted when its tokens fit (`NoRoomError` otherwise, before
anything is allocated, as the scheduler leaves a request it cannot admit
waiting), so what is judged is the cache and allocator, not the reserve
policy. Likewise a decode step that cannot be allocated raises
`NoRoomError` before allocating (the scheduler would retract a request:
kvcheck's `preempt`).

`SWARadixDriver` is the same scheduler over what sglang builds for a hybrid
sliding-window model: `SWAKVPool`, `SWATokenToKVPoolAllocator` and
`UnifiedRadixCache` with the FULL and SWA components, the payload written
into and read from the two sub-pools (docs/sglang-radix.md, "The
sliding-window component").

sglang is imported at module import (about 15 s on a loaded 2-core
machine); nothing here loads CUDA.
"""

import logging
import os
import sys
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
# A config.json of a tiny Llama (no weights): the ServerArgs sglang's
# runtime context is published from need a model path.
MODEL_DIR = os.path.join(HERE, "tiny-llama")

# sglang logs on the root logger's stream; kvcheck's protocol owns stdout.
# Publishing the CPU config warns each time (CUDA graphs off, a deprecated
# environment variable): only errors are shown.
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
logging.getLogger("sglang").setLevel(logging.ERROR)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, ScheduleBatch, release_req  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import KVWriteLoc, ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


def _version():
    from importlib.metadata import version

    return version("sglang")


VERSION = _version()

# A request decodes until kvcheck finishes it: no length limit of its own.
MAX_NEW_TOKENS = 1 << 30

_published = {}


def publish(page_size, eviction_policy=None, eviction_policy_config=None, chunked_prefill_size=None):
    """Publishes sglang's runtime context (`runtime_context.publish`, as the
    scheduler process does at start) for `--device cpu --attention-backend
    torch_native --page-size page_size [--radix-eviction-policy P]`, every
    other server argument at its default (the radix cache on, LRU
    eviction). Returns the model config. Published again only when the
    arguments change."""
    key = (page_size, eviction_policy, repr(eviction_policy_config), chunked_prefill_size)
    if _published.get("key") != key:
        extra = {} if eviction_policy is None else {"radix_eviction_policy": eviction_policy}
        if eviction_policy_config is not None:
            extra["radix_eviction_policy_config"] = eviction_policy_config
        if chunked_prefill_size is not None:
            extra["chunked_prefill_size"] = chunked_prefill_size
        args = ServerArgs(
            model_path=MODEL_DIR,
            device="cpu",
            attention_backend="torch_native",
            skip_tokenizer_init=True,
            page_size=page_size,
            **extra,
        )
        runtime_context.publish(args, role="scheduler")
        _published["key"] = key
        _published["model_config"] = runtime_context.process_model_config()
    return _published["model_config"]


class NoRoomError(Exception):
    """The op's tokens do not fit in the free and evictable slots; nothing was changed."""


class RadixDriver:
    """One radix tree (`RadixCache`, or `UnifiedRadixCache` with `tree="unified"`)
    over `blocks` pages of `page_size` token slots (sglang's
    allocators keep one more page, page 0, for padded batches), and the KV
    array `[(blocks + 1) * page_size, layers, row_width]` of u32 bits.

    Requests are kvcheck's ids; each running one has its sglang `Req` and
    the one-request `ScheduleBatch` it was prefilled in, which carries its
    decode steps."""

    def __init__(self, blocks, page_size, layers=1, row_width=1, tree="radix", eviction_policy=None,
                 eviction_policy_config=None, chunked_prefill_size=None):
        memory, need_sort = self._scheduler(blocks, page_size, eviction_policy, eviction_policy_config,
                                            chunked_prefill_size)
        if page_size == 1:
            self.allocator = TokenToKVPoolAllocator(
                size=blocks, dtype=torch.float32, device="cpu", kvcache=None, need_sort=need_sort
            )
        else:
            self.allocator = PagedTokenToKVPoolAllocator(
                size=blocks * page_size,
                page_size=page_size,
                dtype=torch.float32,
                device="cpu",
                kvcache=None,
                need_sort=need_sort,
            )
        params = CacheInitParams(
            disable=memory.disable_radix_cache,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=page_size,
            eviction_policy=memory.radix_eviction_policy,
            eviction_policy_config=memory.radix_eviction_policy_config,
        )
        if tree == "radix":
            # mem_cache/registry.py refuses T-LRU on any tree but the unified one.
            if memory.radix_eviction_policy == "tlru":
                raise ValueError("--radix-eviction-policy tlru requires UnifiedRadixCache")
            self.tree = RadixCache(params)
        elif tree == "unified":
            # What the scheduler builds by default for a full-attention model
            # (mem_cache/registry.py: create_unified_radix_cache).
            from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

            params.tree_components = (ComponentType.FULL,)
            self.tree = UnifiedRadixCache(params)
        else:
            raise ValueError("tree must be radix or unified, not %r" % (tree,))
        self.kv = np.zeros(((blocks + 1) * page_size, layers, row_width), dtype=np.uint32)
        self.reqs = {}  # id -> Req (running and retracted)
        self.batches = {}  # id -> its ScheduleBatch, while running
        self.prefilling = set()  # ids whose prefill forward has not run yet

    # -- accounting ------------------------------------------------------

    def _scheduler(self, blocks, page_size, eviction_policy, eviction_policy_config, chunked_prefill_size):
        """What both drivers set up as the scheduler does: the published
        config, the chunk, the request-to-token pool; returns sglang's
        memory context and the allocators' `need_sort`."""
        self.blocks = blocks
        self.page_size = page_size
        self.model_config = publish(page_size, eviction_policy, eviction_policy_config, chunked_prefill_size)
        # The scheduler's chunk (--chunked-prefill-size; 4096 on the CPU by
        # default; -1 or None: no chunking).
        chunk = runtime_context.get_schedule().chunked_prefill_size
        self.chunk = chunk if chunk is not None and chunk > 0 else 1 << 62
        # A row per running request (its max_running_requests): requests
        # whose tokens are all in the tree hold no page of their own, so the
        # pool does not bound them; 256 more rows than pages never run out
        # under kvcheck's few request ids. A row spans the whole pool.
        self.req_to_token_pool = ReqToTokenPool(
            size=blocks + 256,
            max_context_len=blocks * page_size + 1,
            device="cpu",
            enable_memory_saver=False,
        )
        # need_sort as the scheduler sets it outside disaggregation
        # (kv_cache_configurator.py); the dtype is the KV pool's, unused here.
        need_sort = runtime_context.get_disagg().disaggregation_mode in ("decode", "prefill")
        return runtime_context.get_memory(), need_sort

    def counts(self):
        """(in_use, cached, free) in pages: the pages the running requests'
        rows point at (`req_to_token[idx, :kv_allocated_len]`, each page
        once), the tree's `evictable_size()` and the allocator's
        `available_size()`."""
        b = self.page_size
        held = set()
        for rid in self.batches:
            req = self.reqs[rid]
            row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : req.kv.kv_allocated_len]
            held.update((row // b).tolist())
        return len(held), self.tree.evictable_size() // b, self.allocator.available_size() // b

    def _pages(self, tokens):
        return -(-tokens // self.page_size)

    def _room(self):
        """Pages an allocation can take now: free ones and evictable ones."""
        return (self.allocator.available_size() + self.tree.evictable_size()) // self.page_size

    # -- admission and prefill ---------------------------------------------

    def _new_req(self, rid, tokens):
        return Req(
            rid=str(rid),
            origin_input_text="",
            origin_input_ids=array("q", tokens),
            sampling_params=SamplingParams(max_new_tokens=MAX_NEW_TOKENS),
            vocab_size=self.model_config.vocab_size,
        )

    def _admit(self, rid, req):
        """Match, lock, allocate: Scheduler.get_new_batch_prefill for one
        request. Returns the hit."""
        req.init_next_round_input(self.tree)
        n = len(req.full_untruncated_fill_ids)
        hit = req.prefix_len
        # PrefillAdder: the matched path is locked while admission is decided.
        lock = self.tree.lock(req.last_node)
        need = self._pages(n) - hit // self.page_size
        if need > self._room():
            self.tree.unlock(lock)
            raise NoRoomError(
                "%d tokens (hit %d) need %d pages; %d free, %d evictable"
                % (n, hit, need, self.allocator.available_size() // self.page_size,
                   self.tree.evictable_size() // self.page_size)
            )
        # PrefillAdder._select_prefill_admission: a prompt longer than the
        # chunk is cut at the chunk, on a page boundary; then
        # _commit_prefill_admission.
        extend = n - hit
        if extend > self.chunk:
            extend = (hit + self.chunk // self.page_size * self.page_size) // self.page_size * self.page_size - hit
        req.extend_end = hit + extend
        req.lock = lock
        self.reqs[rid] = req
        self.prefilling.add(rid)
        self._prefill_batch(rid)
        return hit

    def _prefill_batch(self, rid):
        """ScheduleBatch.init_new of the request, then prepare_for_extend():
        alloc_for_extend allocates `[prefix_len, extend_end)`."""
        batch = ScheduleBatch.init_new(
            [self.reqs[rid]],
            self.req_to_token_pool,
            self.allocator,
            self.tree,
            self.model_config,
            False,
            SpeculativeAlgorithm.NONE,
        )
        batch.prepare_for_extend()
        self.batches[rid] = batch

    def _next_chunk(self, rid):
        """The next round of a chunked prefill: Scheduler.get_new_batch_prefill
        stashes the chunked request (`checkpoint_kv_cache`: what its chunks
        computed goes into the tree), `init_next_round_input()` without the
        tree, `PrefillAdder.add_chunked_req` (the next chunk: at most the
        chunk size, and at most what the memory budget has left), and a new
        batch allocates it."""
        req = self.reqs[rid]
        checkpoint_kv_cache(req, self.tree)
        req.init_next_round_input()
        remaining_total = self.allocator.available_size() + self.tree.evictable_size()
        chunk = min(self.chunk, remaining_total) if remaining_total > 0 else self.chunk
        req.extend_end = req.prefix_len + min(len(req.full_untruncated_fill_ids) - req.prefix_len, chunk)
        self._prefill_batch(rid)

    def start(self, rid, tokens):
        return self._admit(rid, self._new_req(rid, tokens))

    def resume(self, rid):
        return self._admit(rid, self.reqs[rid])

    def compute(self, rid, first, rows):
        """The forward pass: rows `[layer][position][dim]` of positions
        `[first, first + k)` written at the request's slots; after a
        prefill, `checkpoint_kv_cache` as process_batch_result_prefill does.
        A chunked prefill runs its rounds here, one chunk each."""
        req = self.reqs[rid]
        rows = np.asarray(rows, dtype=np.uint32).transpose(1, 0, 2)  # [position][layer][dim]
        end = first + len(rows)
        at = first
        while at < end:
            if rid in self.prefilling and at == req.extend_end:
                self._next_chunk(rid)
            upto = min(end, req.kv.kv_allocated_len)
            if upto <= at:
                raise AssertionError(
                    "compute of positions [%d, %d) past the %d slots allocated" % (first, end, req.kv.kv_allocated_len)
                )
            slots = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, at:upto]
            self._write(slots, rows[at - first : upto - first])
            at = upto
        n = len(req.full_untruncated_fill_ids)
        if rid in self.prefilling and req.extend_end == n and end >= n:
            # process_batch_result_prefill: the prefill is done.
            self.prefilling.discard(rid)
            checkpoint_kv_cache(req, self.tree)

    def _write(self, slots, rows):
        """What the model runner's forward writes: rows `[position][layer][dim]`
        at the token slots `slots` (a tensor of `req_to_token`)."""
        self.kv[slots.numpy()] = rows

    # -- decoding -----------------------------------------------------------

    def extend(self, rid, tokens):
        """One decode step per token: the token appended to `output_ids`
        (what the previous step sampled), `prepare_for_decode` allocates
        its slot."""
        req = self.reqs[rid]
        n = req.kv.kv_allocated_len
        need = self._pages(n + len(tokens)) - self._pages(n)
        if need > self._room():
            raise NoRoomError("%d more tokens after %d need %d pages; %s" % (len(tokens), n, need, self._room_text()))
        batch = self.batches[rid]
        for i, token in enumerate(tokens):
            req.output_ids.append(token)
            # process_batch_result_decode: the sampled ids become the next
            # step's input ids.
            batch.output_ids = torch.tensor([token], dtype=torch.int64)
            self._decode_step(rid, req, batch, i)

    def _room_text(self):
        return "%d free, %d evictable" % (
            self.allocator.available_size() // self.page_size, self.tree.evictable_size() // self.page_size)

    def _decode_step(self, rid, req, batch, i):
        """Step `i` of an extend: `prepare_for_decode` allocates its slot."""
        batch.prepare_for_decode()

    # -- release --------------------------------------------------------

    def finish(self, rid):
        req = self.reqs.pop(rid)
        if self.batches.pop(rid, None) is None:
            return  # retracted: it holds nothing
        self.prefilling.discard(rid)
        # update_finish_state on a length stop; then the release
        # process_batch_result_decode makes for a finished request.
        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        release_kv_cache(req, self.tree, checkpoint=True)

    def preempt(self, rid):
        req = self.reqs[rid]
        del self.batches[rid]
        self.prefilling.discard(rid)
        # retract_decode pops the request and calls release_req with the
        # number of requests left in the batch.
        release_req(
            req=req,
            remaing_req_count=len(self.batches),
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            tree_cache=self.tree,
            hisparse_coordinator=None,
        )

    # -- reads and eviction -----------------------------------------------

    def read(self, rid, count):
        """Rows `[layer][position][dim]` of positions `[0, count)` gathered
        through the request's row of `req_to_token`."""
        req = self.reqs[rid]
        slots = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :count].numpy()
        return self.kv[slots].transpose(1, 0, 2)

    def evict(self, pages):
        self.tree.evict(EvictParams(num_tokens=pages * self.page_size))

    def clear(self):
        self.tree.evict(EvictParams(num_tokens=self.tree.evictable_size()))


_INTERVAL = "SGLANG_SWA_EVICTION_INTERVAL"
_INTERVAL_AT_START = os.environ.get(_INTERVAL)


def _no_frees():
    """maybe_evict_swa of a decode step whose frees are deferred."""


class _Layer:
    """The one field of a `RadixAttention` layer `SWAKVPool.set_kv_buffer`
    reads: which model layer it is (the pool maps it to its sub-pool)."""

    def __init__(self, layer_id):
        self.layer_id = layer_id


class SWARadixDriver(RadixDriver):
    """sglang's hybrid sliding-window cache: the pools, allocator and tree
    sglang 0.5.23's scheduler builds for a model whose layers are partly
    sliding-window (gemma-2/3, gpt-oss, mimo: `is_hybrid_swa`), on the CPU.

    - `SWAKVPool` (swa_memory_pool.py): a full-attention sub-pool
      (`MHATokenToKVPool` of the full layers) and a sliding-window sub-pool
      (one of the windowed layers), each of `blocks` pages here, float32,
      one head of `row_width` dims. The payload rows are written through
      `SWAKVPool.set_kv_buffer` with the `KVWriteLoc(loc, swa_loc)` an
      attention backend builds: a full layer at the request's full slots,
      a windowed layer at their translation into the SWA sub-pool.
    - `SWATokenToKVPoolAllocator` (allocator/swa.py): one allocator per
      sub-pool and the `full_to_swa_index_mapping` between them (what
      kv_cache_configurator.py builds for `is_hybrid_swa` outside
      `--enable-unified-memory`).
    - `UnifiedRadixCache` with the FULL and SWA components
      (registry.py: `create_unified_radix_cache` for `is_hybrid_swa`),
      `sliding_window_size` sglang's: a query at position p attends keys
      `[p - sliding_window_size, p]` (torch_native_backend.py
      `_make_sliding_window_mask`; gemma2.py/gpt_oss.py
      `get_attention_sliding_window_size` is HF's `sliding_window - 1`),
      so kvcheck's window `W` is `sliding_window_size + 1`.

    The scheduler's out-of-window frees run inside sglang's own calls:
    `prepare_for_decode` -> `alloc_for_decode` -> `ScheduleBatch.maybe_evict_swa`
    -> `UnifiedRadixCache.evict_sliding_windows` ->
    `free_swa_out_of_window_slots`, gated by `SGLANG_SWA_EVICTION_INTERVAL`
    (sglang's default 128 tokens; `eviction_interval` sets it)."""

    def __init__(self, blocks, page_size, layers, row_width, window, window_layers, eviction_policy=None,
                 eviction_policy_config=None, chunked_prefill_size=None, eviction_interval=None):
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        if window < 2:
            # SWAComponent: "requires a positive sliding_window_size".
            raise ValueError("sglang's sliding_window_size = W - 1 must be positive: W >= 2, not %d" % window)
        self.window_layers = sorted(window_layers)
        self.full_layers = [layer for layer in range(layers) if layer not in self.window_layers]
        if not self.full_layers:
            # Every layer windowed: sglang builds PureSWARadixCache over
            # PureSWATokenToKVPoolAllocator instead, not this driver.
            raise ValueError("a hybrid SWA model has at least one full-attention layer")
        # Read by maybe_evict_swa at each decode step (envs.*.get()); None
        # restores what the environment said when the subject started.
        if eviction_interval is not None:
            os.environ[_INTERVAL] = str(eviction_interval)
        elif _INTERVAL_AT_START is None:
            os.environ.pop(_INTERVAL, None)
        else:
            os.environ[_INTERVAL] = _INTERVAL_AT_START
        self.layers = layers
        self.sliding_window_size = window - 1
        memory, need_sort = self._scheduler(blocks, page_size, eviction_policy, eviction_policy_config,
                                            chunked_prefill_size)
        size = blocks * page_size
        # Both sub-pools of `blocks` pages (sglang's --swa-full-tokens-ratio
        # 1.0): the SWA side then never runs short before the full side
        # does (every SWA slot is paired with a full one), so the full pool
        # is the pool kvcheck counts; see counts().
        self.kv_pool = SWAKVPool(
            size=size,
            size_swa=size,
            page_size=page_size,
            dtype=torch.float32,
            head_num=1,
            head_dim=row_width,
            swa_attention_layer_ids=self.window_layers,
            full_attention_layer_ids=self.full_layers,
            device="cpu",
        )
        self.allocator = SWATokenToKVPoolAllocator(
            size,
            size,
            page_size=page_size,
            dtype=torch.float32,
            device="cpu",
            kvcache=self.kv_pool,
            need_sort=need_sort,
            req_to_token_pool=self.req_to_token_pool,
        )
        params = CacheInitParams(
            disable=memory.disable_radix_cache,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=page_size,
            eviction_policy=memory.radix_eviction_policy,
            eviction_policy_config=memory.radix_eviction_policy_config,
            chunked_prefill_size=runtime_context.get_schedule().chunked_prefill_size,
            sliding_window_size=self.sliding_window_size,
            tree_components=(ComponentType.FULL, ComponentType.SWA),
        )
        self.tree = UnifiedRadixCache(params)
        self.reqs = {}
        self.batches = {}
        self.prefilling = set()
        self.deferred = {}  # id -> positions whose decode step's frees wait (see extend)

    # -- accounting ------------------------------------------------------

    def counts(self):
        """(in_use, cached, free) in pages of the full-attention pool: the
        pages the running requests' rows point at, `full_evictable_size()`,
        the full allocator's `available_size()`. The SWA pool is checked
        here, not counted: `swa_check`."""
        self.swa_check()
        b = self.page_size
        held = set()
        for rid in self.batches:
            req = self.reqs[rid]
            row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : req.kv.kv_allocated_len]
            held.update((row // b).tolist())
        return len(held), self.tree.full_evictable_size() // b, self.allocator.full_available_size() // b

    def swa_check(self):
        """The SWA pool's own accounting, which kvcheck's counts do not see:
        every SWA slot is either free in the SWA allocator or the peer of a
        full slot in `full_to_swa_index_mapping` (set at allocation, cleared
        when the SWA slot is freed), never both, never neither. A leak (an
        SWA page neither free nor mapped) or a double life (mapped and free)
        raises AssertionError, which kvcheck reports as the op's exception."""
        b = self.page_size
        mapping = self.allocator.full_to_swa_index_mapping[:-1]
        mapped = mapping[mapping > 0]
        mapped_pages = set((mapped // b).tolist())
        free = _free_page_ids(self.allocator.swa_attn_allocator)
        free_pages = set(free)
        both = mapped_pages & free_pages
        if both or len(free) != len(free_pages) or len(mapped_pages) + len(free_pages) != self.blocks:
            raise AssertionError(
                "SWA pool accounting: %d pages mapped from full slots, %d free (%d listed), %d both, of %d"
                % (len(mapped_pages), len(free_pages), len(free), len(both), self.blocks)
            )

    def _room(self):
        """Pages an allocation can take: free and evictable pages in the
        full pool, and in the SWA pool (never the shorter of the two with
        pools of one size, see counts(); taken into account all the same)."""
        a, t, b = self.allocator, self.tree, self.page_size
        return min((a.full_available_size() + t.full_evictable_size()) // b,
                   (a.swa_available_size() + t.swa_evictable_size()) // b)

    # -- the forward's writes and the attention's reads ------------------

    def _write(self, slots, rows):
        """`SWAKVPool.set_kv_buffer` for every layer, as the attention
        backend calls it: `KVWriteLoc(out_cache_loc, swa_out_cache_loc)`,
        the SWA location the full->SWA translation of the full one
        (torch_native_backend.py `init_forward_metadata`)."""
        loc = slots.to(torch.int64)
        swa_loc = self.allocator.translate_loc_from_full_to_swa(loc)
        values = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.uint32).view(np.float32))
        for layer in range(self.layers):
            data = values[:, layer : layer + 1, :]  # [positions][head][dim]
            self.kv_pool.set_kv_buffer(_Layer(layer), KVWriteLoc(loc, swa_loc), data, data)

    def read(self, rid, count, start=0):
        """The key rows attention reads: a full layer's of positions
        `[0, count)` at the full slots of the request's row of
        `req_to_token`, a windowed layer's of `[start, count)` at their
        translation into the SWA sub-pool. Little-endian f32 bytes, layer
        by layer (the layers' ranges differ)."""
        req = self.reqs[rid]
        row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :count].to(torch.int64)
        out = []
        for layer in range(self.layers):
            if layer in self.window_layers:
                locs = self.allocator.translate_loc_from_full_to_swa(row[start:count])
            else:
                locs = row
            rows = self.kv_pool.get_key_buffer(layer)[locs][:, 0, :]
            out.append(rows.contiguous().numpy().view(np.uint32).astype("<u4").tobytes())
        return b"".join(out)

    # -- decoding -----------------------------------------------------------
    #
    # sglang decodes one token per step, and a step's out-of-window frees
    # (maybe_evict_swa, inside prepare_for_decode) run after the previous
    # step's forward: step q (the token of position q appended) frees what
    # left the window of a request that computed q tokens. kvcheck's
    # `extend r u` allocates all u steps and its `compute` runs their
    # forwards after; run in a row, the frees of steps 2..u would free the
    # window of a request that has computed up to u - 1 more tokens than
    # it has, and a read between the extend and the compute (kvcheck probes
    # every running request after every op) would find them gone. So the
    # extend makes the first step whole and the others without their frees,
    # and compute makes each deferred step's frees right after the forward
    # that precedes it, with sglang's own calls (`_swa_step_frees`).

    def _room_text(self):
        return "%d free, %d evictable (full pool)" % (
            self.allocator.full_available_size() // self.page_size,
            self.tree.full_evictable_size() // self.page_size)

    def _decode_step(self, rid, req, batch, i):
        if i == 0:
            batch.prepare_for_decode()
            return
        # The step's frees wait for the forward of the step before it.
        batch.maybe_evict_swa = _no_frees
        try:
            batch.prepare_for_decode()
        finally:
            del batch.maybe_evict_swa
        self.deferred.setdefault(rid, []).append(len(req.origin_input_ids) + len(req.output_ids) - 1)

    def compute(self, rid, first, rows):
        deferred = self.deferred.get(rid)
        if not deferred:
            return super().compute(rid, first, rows)
        rows = np.asarray(rows, dtype=np.uint32)
        req = self.reqs[rid]
        for i in range(rows.shape[1]):
            position = first + i
            super().compute(rid, position, rows[:, i : i + 1])
            if deferred and deferred[0] == position + 1:
                self._swa_step_frees(req, deferred.pop(0))

    def _swa_step_frees(self, req, position):
        """The frees `ScheduleBatch.maybe_evict_swa` makes at the decode
        step of `position` (pre_len = seqlen - 1 = position), its decode
        branch as it runs by default (no auxiliary window, no
        SGLANG_OPT_RELEASE_PREFILL_SWA): due when `position -
        sliding_window_size >= evicted + SGLANG_SWA_EVICTION_INTERVAL`
        (`_swa_eviction_trigger`); `decode_batch_idx >= 1` holds, the step
        before it was a decode step."""
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        interval = max(1, envs.SGLANG_SWA_EVICTION_INTERVAL.get())
        window = self.tree.swa_retain_window
        if req.kv.holds_kv and position - window >= req.kv.get_evicted_seqlen(ComponentType.SWA) + interval:
            self.allocator.free_group_begin()
            self.tree.evict_sliding_windows(req, position)
            self.allocator.free_group_end()

    def finish(self, rid):
        self.deferred.pop(rid, None)
        super().finish(rid)

    def preempt(self, rid):
        self.deferred.pop(rid, None)
        super().preempt(rid)

    # -- eviction -----------------------------------------------------------

    def evict(self, pages):
        self.tree.evict(EvictParams(num_tokens=pages * self.page_size))

    def clear(self):
        # Every unlocked node, whole: its full and SWA values.
        self.tree.evict(EvictParams(num_tokens=self.tree.full_evictable_size()))


def _free_page_ids(allocator):
    """The ids of the free pages (slots at page size 1) of a sglang
    token-to-KV allocator, its free list and its release list, as a list
    (a page listed twice was freed twice)."""
    ids = []
    for tensor in (allocator.free_pages, allocator.release_pages):
        if tensor is not None:
            ids.extend(tensor.tolist())
    return ids


def check():
    """setup.sh's check: two prompts of a common prefix, on both allocators."""
    for page_size in (1, 2):
        d = RadixDriver(blocks=8, page_size=page_size)
        first = d.start(0, [1, 2, 3, 4, 5])
        d.compute(0, 0, [[[7]] * 5])
        d.finish(0)
        second = d.start(1, [1, 2, 3, 4, 6])
        want = (0, 4, (5, 1, 2)) if page_size == 1 else (0, 4, (3, 0, 5))
        got = (first, second, d.counts())
        if got != want:
            sys.exit("check: page size %d: hits and counts %r, expected %r" % (page_size, got, want))
    print("check: sglang %s RadixCache answers on the CPU (page sizes 1 and 2)" % VERSION)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        check()
    else:
        sys.exit("usage: driver.py --check")
