"""vLLM 0.33.0, reproduction with vLLM alone: under `--scheduling-policy
priority`, a request preempted after the same `schedule()` call allocated
its next prefill chunk leaves that chunk's blocks in the prefix cache
although their KV is never written; the request resumes on them.

vLLM's own `Scheduler` (prefix caching on, chunked prefill on, 8 usable
blocks of 4 tokens, a step budget of 12 tokens, `long_prefill_token_threshold`
8) runs two requests: A, a 28-token prompt at priority 10, admitted first
and prefilled in chunks; B, a 4-token prompt at priority 0 (higher), which
arrives while A prefills. A stand-in model runner writes, for every token
a step schedules, the identity of the token's prefix into the slot the
request's block table names, and checks before that that every position
the request attends from the cache holds its own prefix's identity (a
slot never written holds nothing). No GPU, no weights: the model is a
`config.json`.

    python vllm-priority-preemption-caches-unwritten-blocks.py [priority|fcfs]

Exit status 1 when a position read KV never written for it (the bug), 0
when every position read its own prefix's KV (FCFS, or a fixed vLLM).
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK = 4
BLOCKS = 8  # usable; vLLM adds its null block


def engine(policy, folder):
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                   "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                   "num_hidden_layers": 1, "vocab_size": 256, "max_position_embeddings": 256,
                   "rms_norm_eps": 1e-5, "torch_dtype": "float32"}, f)
    config = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        model_config=ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=256),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True),
        scheduler_config=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=12, max_model_len=256,
                                         long_prefill_token_threshold=8, enable_chunked_prefill=True,
                                         policy=policy, async_scheduling=False, is_encoder_decoder=False))
    config.cache_config.num_gpu_blocks = BLOCKS + 1
    kv_cache_config = KVCacheConfig(num_blocks=BLOCKS + 1, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    return Scheduler(config, kv_cache_config, StructuredOutputManager(config), block_size=BLOCK)


def main(policy):
    with tempfile.TemporaryDirectory() as folder:
        scheduler = engine(policy, folder)
    # As EngineCore does with prefix caching on.
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK, hash_fn)
    slots = {}  # (block id, offset) -> the prefix whose KV the model runner wrote there
    wrong = []

    def step(label):
        out = scheduler.schedule()
        req_ids, sampled = [], []
        for rid, count in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            table = scheduler.kv_cache_manager.get_block_ids(rid)[0]
            tokens = list(request.all_token_ids)
            start = request.num_computed_tokens - count  # advanced by schedule()
            for p in range(start):  # attention reads the cached positions
                if slots.get((table[p // BLOCK], p % BLOCK)) != tuple(tokens[:p + 1]):
                    wrong.append((label, rid, p))
            for p in range(start, start + count):  # ... and writes the scheduled ones
                slots[(table[p // BLOCK], p % BLOCK)] = tuple(tokens[:p + 1])
            req_ids.append(rid)
            sampled.append([100 + len(tokens)] if start + count >= request.num_tokens else [])
        print("%s: scheduled %s, preempted %s" % (label, dict(out.num_scheduled_tokens),
                                                sorted(out.preempted_req_ids or [])))
        scheduler.update_from_output(out, ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled))

    def request(rid, prompt, priority):
        return Request(rid, prompt, SamplingParams(max_tokens=2, ignore_eos=True), None,
                       priority=priority, block_hasher=hasher)

    scheduler.add_request(request("A", list(range(1, 29)), priority=10))
    step("step 1")  # A's first chunk, 12 tokens
    scheduler.add_request(request("B", [200, 201, 202, 203], priority=0))
    for i in range(2, 7):
        step("step %d" % i)
    print("policy %s:" % policy)
    if not wrong:
        print("  every position read its own prefix's KV")
        return 0
    for label, rid, p in wrong:
        print("  %s: request %s read position %d from a block whose KV was never written for it" % (label, rid, p))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "priority"))
