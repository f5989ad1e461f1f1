"""vLLM's v1 KV cache manager driven the way its scheduler drives it.

`VllmManager` builds vLLM's own `Scheduler` (its `KVCacheManager`: one
full-attention KV cache group, or with `window` sliding-window groups,
prefix caching on, vLLM's default block hash) and the block array a model
runner would write, and makes, for each step of a request's life, the
calls `Scheduler.schedule()` and `update_from_output()` make (vLLM
0.33.0), with the arguments they pass by default; preemption, finishing
and resets are the scheduler's own methods:

| step | what the scheduler does | here |
|---|---|---|
| a waiting request is admitted | `get_computed_blocks(request)` (the hit, capped at `num_tokens - 1`), then `allocate_slots(request, num_new, hit, blocks, full_sequence_must_fit=True)` for the rest of the prompt (its first chunk with chunked prefill); `None` leaves it waiting | `start`, `resume` |
| a prefill's next chunk | the running loop's `allocate_slots(request, num_new)` | `compute` (between chunks; right after a chunk with `eager`) |
| the forward pass | `_update_after_schedule` adds the scheduled tokens to `num_computed_tokens`; the model runner writes their KV into the slots of the request's block table | `compute` |
| output of a step | `update_from_output`: `num_computed_tokens -= rejected drafts`, the accepted drafts and the sampled token appended (`append_output_token_ids`), then, with speculative decoding configured, `cache_blocks(request, num_computed_tokens)`; the drafter's proposals become `spec_token_ids` | `rollback` (the rejection, right after the step's `compute`); `settle` (the acceptance, before any later step) |
| the next decode step is scheduled | `allocate_slots(request, num_tokens_with_spec - num_computed_tokens)`, then `spec_token_ids = []` (they are the step's scheduled drafts) | `extend` |
| preemption | `Scheduler._preempt_request` | `preempt` |
| a request finishes | `Scheduler._free_request` | `finish` |
| `LLM.reset_prefix_cache()` | `Scheduler.reset_prefix_cache()`: `False` while blocks are in use | `clear` |

The drafter is n-gram style: no KV of its own, no lookahead slots, no
EAGLE block drop. Needs vLLM and numpy; nothing here loads CUDA.

With `window = W` the KV cache config is the one vLLM's hybrid allocator
builds (`disable_hybrid_kv_cache_manager` off) for a model whose windowed
layers have `sliding_window = W`: every layer windowed is one
`SlidingWindowSpec` group (`UnitaryKVCacheCoordinator` over a
`SlidingWindowManager`); windowed and full layers are a `FullAttentionSpec`
group and a `SlidingWindowSpec` group over one pool
(`HybridKVCacheCoordinator`). Each group has its own block table; vLLM's
groups alias one page per block (`kv_cache_planning`: "Groups alias from
byte 0"), so the block array holds, per block, the layers of one group,
and a block two groups held at once would be overwritten. The window is
vLLM's own: `allocate_slots` frees the blocks wholly below
`get_num_skipped_tokens(c) = c - W + 1` (`remove_skipped_blocks`, on the
request's computed count when the step is scheduled) and the hit is
`SlidingWindowManager.find_longest_cache_hit`'s.
"""

import os

# vLLM logs to standard output by default; kvcheck's protocol owns it.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import atexit  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

# Far above any request a pool of this size can hold, so that only blocks
# limit a request (vLLM refuses a longer prompt before it reaches the
# scheduler, and stops a request at max_model_len).
MAX_MODEL_LEN = 1 << 20

_CONFIGS = {}


def vllm_config(policy, block_size):
    """An engine's VllmConfig for the scheduler (built once per policy and
    block size): a model of one layer described by a config.json written
    here (its weights are never loaded), on the CPU, prefix caching on,
    chunked prefill on, synchronous scheduling."""
    key = (policy, block_size)
    if key not in _CONFIGS:
        if "model" not in _CONFIGS:
            folder = tempfile.mkdtemp(prefix="kvcheck-vllm-")
            atexit.register(shutil.rmtree, folder, True)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                           "num_hidden_layers": 1, "vocab_size": 256, "max_position_embeddings": MAX_MODEL_LEN,
                           "rms_norm_eps": 1e-5, "torch_dtype": "float32"}, f)
            _CONFIGS["model"] = ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float32",
                                            max_model_len=MAX_MODEL_LEN)
        _CONFIGS[key] = VllmConfig(
            device_config=DeviceConfig(device="cpu"),
            model_config=_CONFIGS["model"],
            cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=True),
            scheduler_config=SchedulerConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=8192,
                                             enable_chunked_prefill=True, policy=policy,
                                             async_scheduling=False, is_encoder_decoder=False))
    return _CONFIGS[key]


def _version():
    from importlib.metadata import version

    return version("vllm")


VERSION = _version()


class NoRoomError(Exception):
    """`allocate_slots` answered None: the request is not scheduled."""


class FreedOnNoRoomError(Exception):
    """`allocate_slots` answered None after `remove_skipped_blocks` freed
    blocks of the request that left its window: vLLM frees them first "even
    if we cannot schedule this request due to insufficient free blocks"
    (kv_cache_manager.py, allocate_slots), so the refused step changed the
    pool."""


class SameStepHitError(Exception):
    """A hit on blocks whose writer has not computed them yet: in vLLM a
    request admitted in the same step reads them in the same forward pass
    that writes them."""


class VllmManager:
    """One KVCacheManager over `blocks` usable blocks of `block_size` tokens
    (vLLM's pool has one more: block 0 is its null block), and the block
    array `[blocks + 1, block_size, slots, row_width]` of u32 bits a model
    runner would fill (`slots`: the layers of the largest group).

    Requests are named by strings. `spec` is whether the engine is
    configured with speculative decoding (`num_speculative_tokens > 0`),
    which makes `update_from_output` cache the blocks of accepted drafts.
    `window` is the sliding window W of the layers in `windowed` (default:
    every layer); None: every layer full attention.
    """

    def __init__(self, blocks, block_size, layers=1, row_width=1, spec=True,
                 hash_algo=None, chunk=None, eager=False, policy="fcfs",
                 window=None, windowed=None):
        self.blocks = blocks
        self.block_size = block_size
        self.spec = spec
        # Chunked prefill: at most `chunk` prompt tokens per step (None: a
        # prompt is scheduled whole). With `eager`, a prefill's next chunk
        # is scheduled right after the forward pass of the one before (the
        # next step's running loop), so that something may happen between
        # its allocation and its forward pass.
        self.chunk = chunk
        self.eager = eager
        self.hash_algo = hash_algo or CacheConfig().prefix_caching_hash_algo
        # As EngineCore.__init__ does with prefix caching on.
        hash_fn = get_hash_fn_by_name(self.hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(block_size, hash_fn)
        # The KV cache groups, full attention first (group 0), as
        # kv_cache_planning orders a model whose layer 0 is full attention;
        # `self.groups[g]` lists group g's layers and whether it is windowed.
        self.window = window
        windowed = sorted(range(layers) if windowed is None else windowed) if window else []
        full = [layer for layer in range(layers) if layer not in windowed]
        self.groups = []
        specs = []
        if full:
            self.groups.append((full, False))
            specs.append(KVCacheGroupSpec(
                ["model.layers.%d.self_attn.attn" % layer for layer in full],
                FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=row_width,
                                  dtype=torch.float32)))
        if windowed:
            self.groups.append((windowed, True))
            specs.append(KVCacheGroupSpec(
                ["model.layers.%d.self_attn.attn" % layer for layer in windowed],
                SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=row_width,
                                  dtype=torch.float32, sliding_window=window)))
        config = KVCacheConfig(num_blocks=blocks + 1, kv_cache_tensors=[], kv_cache_groups=specs)
        # vLLM's own Scheduler: its KVCacheManager is the subject, and its
        # _preempt_request, _free_request and reset_prefix_cache are called
        # as they are; schedule() is one loop over every request, so its
        # admissions and allocations are made here as it makes them.
        engine = vllm_config(policy, block_size)
        engine.cache_config.num_gpu_blocks = blocks + 1
        self.scheduler = Scheduler(engine, config, StructuredOutputManager(engine), block_size=block_size)
        self.manager = self.scheduler.kv_cache_manager
        self.pool = self.manager.block_pool
        # One page per block, shared by the groups (vLLM's groups alias
        # their pages): group g's k-th layer is slot k of the blocks its
        # table names.
        slots = max(len(group_layers) for group_layers, _ in self.groups)
        # np.zeros is calloc'd: pages never written cost nothing.
        self.kv = np.zeros((blocks + 1, block_size, slots, row_width), dtype=np.uint32)
        # request id -> Request; and the drafts of its last step not yet
        # accepted or rejected (computed, not in all_token_ids).
        self.requests = {}
        self.drafts = {}
        # request id -> tokens allocated for the step being scheduled and
        # not computed yet, and which loop of `schedule` allocated them:
        # "waiting" (an admission) or "running" (a chunk or a decode step).
        self.scheduled = {}
        self.loop = {}

    # -- the scheduler's steps ---------------------------------------------

    def _admit(self, request, same_step=False):
        """A waiting request's admission (new or preempted): the hit, then
        the slots of every token beyond it, as `Scheduler.schedule` does for
        the waiting queue without a KV connector. Returns the hit. With
        `same_step`, a hit on a block another running request has not
        computed yet raises SameStepHitError before anything changes."""
        blocks, hit, _ = self.manager.get_computed_blocks(request)
        if same_step:
            pending = self.pending_blocks()
            shared = sorted({b.block_id for group in blocks.blocks for b in group
                             if not b.is_null and b.block_id in pending})
            if shared:
                raise SameStepHitError("the hit of %d tokens takes blocks %s, which the step being "
                                       "scheduled writes" % (hit, shared))
        new = request.num_tokens - hit
        if self.chunk:
            new = min(new, self.chunk)
        new_blocks = self.manager.allocate_slots(
            request, new, num_new_computed_tokens=hit,
            new_computed_blocks=blocks, num_lookahead_tokens=0,
            full_sequence_must_fit=True, has_scheduled_reqs=bool(self.running()))
        if new_blocks is None:
            raise NoRoomError("allocate_slots found no room for %d tokens past a hit of %d"
                              % (request.num_tokens - hit, hit))
        if request.status == RequestStatus.PREEMPTED:
            self.scheduler.waiting.remove_request(request)
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = hit
        self.scheduled[request.request_id] = new
        self.loop[request.request_id] = "waiting"
        return hit

    def _schedule_chunk(self, request):
        """The running loop's allocation of a prefill's next chunk
        (`allocate_slots(request, num_new_tokens)`); False when it finds no
        room (vLLM would preempt a request)."""
        rid = request.request_id
        new = min(request.num_tokens - request.num_computed_tokens, self.chunk or request.num_tokens)
        if self.manager.allocate_slots(request, new, num_lookahead_tokens=0) is None:
            return False
        self.scheduled[rid] = new
        self.loop[rid] = "running"
        return True

    def uncomputed(self, rid):
        """Tokens of the request (drafts included) not computed yet,
        scheduled or not."""
        request = self.requests[rid]
        if request.status != RequestStatus.RUNNING:
            return 0
        return request.num_tokens + len(self.drafts[rid]) - request.num_computed_tokens

    def pending_blocks(self):
        """Blocks holding a position some running request has scheduled and not computed."""
        pending = set()
        for rid, request in self.requests.items():
            count = self.scheduled.get(rid, 0)
            if count:
                first = request.num_computed_tokens
                for table in self.manager.get_block_ids(rid):
                    pending.update(table[first // self.block_size:(first + count - 1) // self.block_size + 1])
        return pending

    def running(self):
        return [r for r in self.requests.values() if r.status == RequestStatus.RUNNING]

    def start(self, rid, tokens, same_step=False):
        self.settle()
        request = Request(rid, list(tokens), SamplingParams(max_tokens=1 << 30), None,
                          block_hasher=self.block_hasher)
        hit = self._admit(request, same_step)
        self.requests[rid] = request
        self.scheduler.requests[rid] = request
        self.drafts[rid] = []
        return hit

    def compute(self, rid, first, rows):
        """The forward pass over positions [first, first + len): rows is
        [layer][position][dim] of u32 bits, written into the request's
        slots; then num_computed_tokens advances."""
        request = self.requests[rid]
        rows = np.asarray(rows, dtype=np.uint32)
        count = rows.shape[1]
        assert first == request.num_computed_tokens, (first, request.num_computed_tokens)
        done = 0
        while done < count:
            if not self.scheduled.get(rid) and not self._schedule_chunk(request):
                raise NoRoomError("the next prefill chunk found no room")
            take = min(count - done, self.scheduled[rid])
            positions = np.arange(first + done, first + done + take)
            # Each group's layers through its own table, as the model
            # runner's slot mapping of each KV cache group does.
            for (layers, _), table in zip(self.groups, self.manager.get_block_ids(rid)):
                slots_b = np.asarray(table, dtype=np.int64)[positions // self.block_size]
                self.kv[slots_b, positions % self.block_size, :len(layers)] = \
                    rows[layers, done:done + take].transpose(1, 0, 2)
            request.num_computed_tokens += take
            self.scheduled[rid] -= take
            done += take
        if self.eager and not self.scheduled.get(rid) and request.num_computed_tokens < request.num_tokens:
            self._schedule_chunk(request)

    def settle(self, keep=None):
        """`update_from_output` of the last step, for every request with
        computed drafts (but `keep`, whose drafts a rejection is about to
        cut): the remaining drafts are accepted, appended to the request's
        tokens (`append_output_token_ids`) and, with speculative decoding,
        the blocks of its computed tokens cached. Every step of another
        request, and every later step of this one, comes after it."""
        for rid, drafts in self.drafts.items():
            request = self.requests[rid]
            if rid == keep or not drafts:
                continue
            if request.num_computed_tokens < request.num_tokens + len(drafts):
                continue  # not computed yet: still the current step's
            self.drafts[rid] = []
            request.append_output_token_ids(list(drafts))
            if self.spec:
                self.manager.cache_blocks(request, request.num_computed_tokens
                                          - request.num_in_flight_tokens)

    def extend(self, rid, tokens):
        """One decode step scheduled: tokens[0] is the token sampled by the
        last step (appended by its `update_from_output`), tokens[1:] the
        drafts proposed for this one."""
        self.settle()
        request = self.requests[rid]
        request.append_output_token_ids(list(tokens[:1]))
        request.spec_token_ids = list(tokens[1:])
        new = request.num_tokens_with_spec - request.num_computed_tokens
        before = self.tables(rid)
        blocks = self.manager.allocate_slots(request, new, num_lookahead_tokens=0)
        if blocks is None:
            # Not scheduled: the sampled token goes back (the request is as
            # it was before the step; vLLM would preempt to make room).
            request.spec_token_ids = []
            self._drop_last_output(request, len(tokens[:1]))
            freed = sum(a != b for old, now in zip(before, self.tables(rid)) for a, b in zip(old, now))
            if freed:
                raise FreedOnNoRoomError("allocate_slots found no room for %d new tokens, after freeing "
                                         "%d blocks of the request that left its window" % (new, freed))
            raise NoRoomError("allocate_slots found no room for %d new tokens" % new)
        self.drafts[rid] = list(request.spec_token_ids)
        request.spec_token_ids = []
        self.scheduled[rid] = new
        self.loop[rid] = "running"

    def _drop_last_output(self, request, count):
        """Takes back the last `count` output tokens and the block hashes
        they completed (as `Scheduler._update_request_as_session` trims a
        session's tokens)."""
        if count:
            del request._all_token_ids[-count:]
            del request._output_token_ids[-count:]
            del request.block_hashes[request.num_tokens // self.block_size:]

    def pending(self, rid):
        """The drafts of the request's last step that a rejection may still cut."""
        return len(self.drafts[rid])

    def rollback(self, rid, count):
        """`update_from_output`'s rejection of the last `count` drafts of
        the request's last step: num_computed_tokens goes back, the drafts
        never enter the request's tokens."""
        self.settle(keep=rid)
        drafts = self.drafts[rid]
        assert count <= len(drafts)
        if count:
            del drafts[len(drafts) - count:]
            self.requests[rid].num_computed_tokens -= count

    def preempt(self, rid):
        self.settle()
        # Its own: free the blocks, num_computed_tokens = 0, status
        # PREEMPTED, back to the front of the waiting queue.
        self.scheduler._preempt_request(self.requests[rid], time.monotonic())
        self.scheduled[rid] = 0

    def resume(self, rid, same_step=False):
        self.settle()
        return self._admit(self.requests[rid], same_step)

    def finish(self, rid):
        self.settle()
        request = self.requests[rid]
        if request.status == RequestStatus.PREEMPTED:
            self.scheduler.waiting.remove_request(request)
        # update_from_output's stop, then Scheduler._free_request.
        request.status = RequestStatus.FINISHED_STOPPED
        self.scheduler._free_request(request)
        del self.requests[rid]
        del self.drafts[rid]
        self.scheduled.pop(rid, None)
        self.loop.pop(rid, None)

    def clear(self):
        """`Scheduler.reset_prefix_cache()`: False (and nothing changed)
        while a request holds blocks."""
        self.settle()
        return self.scheduler.reset_prefix_cache()

    # -- what a reader sees ------------------------------------------------

    def read(self, rid, start=0):
        """The rows a reader sees, as the little-endian u32 bytes of
        `[layer][position][dim]`: a full-attention layer's positions
        `[0, num_computed_tokens)` gathered through the full group's table,
        a windowed layer's `[start, num_computed_tokens)` through its
        sliding-window group's (the positions below lie in blocks vLLM
        may have freed and nulled)."""
        count = self.requests[rid].num_computed_tokens
        per_layer = {}
        for (layers, windowed), table in zip(self.groups, self.manager.get_block_ids(rid)):
            positions = np.arange(min(start, count) if windowed else 0, count)
            table = np.asarray(table, dtype=np.int64)
            rows = self.kv[table[positions // self.block_size], positions % self.block_size]
            for slot, layer in enumerate(layers):
                per_layer[layer] = rows[:, slot]
        return b"".join(per_layer[layer].astype("<u4").tobytes() for layer in sorted(per_layer))

    def tables(self, rid):
        """The request's block table of each group (`get_block_ids`; 0 is
        the null block)."""
        return [list(table) for table in self.manager.get_block_ids(rid)]

    def counts(self):
        """(in_use, cached, free) from the block pool's own state: blocks a
        request references (ref_cnt > 0), blocks in the free queue that
        still hold a prefix-cache hash, and the rest of the free queue. The
        null block is none of them."""
        in_use = cached = 0
        for block in self.pool.blocks:
            if block.is_null:
                continue
            if block.ref_cnt > 0:
                in_use += 1
            elif block.block_hash is not None:
                cached += 1
        free = self.pool.get_num_free_blocks() - cached
        return in_use, cached, free

