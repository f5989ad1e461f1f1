"""sglang: CausalSelfAttentionKVCache.reset_indices() starts a new stream but
keeps the old stream's K/V rows, so the heads that a head-range write
(`cache_head_start`) leaves out still hold the previous stream's rows at the
new stream's positions, and the next all-heads read attends them.

The full sglang package does not import without its GPU stack; the cache's
module needs torch alone, so it is loaded from its file:

    python sglang-reset-keeps-head-rows.py [path/to/causal_attention_cache.py]

(default: the file adapters/sglang/setup.sh extracts from the sglang 0.5.23
wheel, sglang/multimodal_gen/runtime/layers/kvcache/causal_attention_cache.py).
"""

import importlib.util
import os
import sys

import torch

DEFAULT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "adapters", "sglang", ".sglang", "0.5.23",
    "sglang", "multimodal_gen", "runtime", "layers", "kvcache", "causal_attention_cache.py",
)
path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
spec = importlib.util.spec_from_file_location("causal_attention_cache", path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module  # dataclasses look their module up while building the classes
spec.loader.exec_module(module)

# batch 1, 2 slots, 2 heads, head_dim 1: every value says which stream wrote it
k = torch.zeros(1, 2, 2, 1)
cache = module.CausalSelfAttentionKVCache(
    k=k, v=torch.zeros_like(k), global_end_index=torch.zeros(1, dtype=torch.long),
    local_end_index=torch.zeros(1, dtype=torch.long), cache_size=2,
)
first = torch.full((1, 1, 2, 1), 1.0)
cache.update_and_get_attention_kv(key=first, value=first, current_chunk_start=0)
print("stream 1: position 0 written on both heads with 1.0")
cache.reset_indices()
second = torch.full((1, 1, 1, 1), 2.0)
cache.update_and_get_attention_kv(key=second, value=second, current_chunk_start=0, cache_head_start=0)
print("reset_indices(); stream 2: position 0 written on head 0 only (cache_head_start=0) with 2.0")
nxt = torch.full((1, 1, 2, 1), 2.0)
view = cache.update_and_get_attention_kv(key=nxt, value=nxt, current_chunk_start=1)
print("stream 2: position 1 written on both heads; the keys it attends, [position][head]:", view.k[0, :, :, 0].tolist())
print("head 1 at position 0 holds %.1f (stream 2 never wrote it: expected 0.0)" % view.k[0, 0, 1, 0].item())
