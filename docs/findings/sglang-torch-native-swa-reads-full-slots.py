#!/usr/bin/env python3
"""sglang 0.5.23: `TorchNativeAttnBackend` reads a sliding-window layer's K/V
from the SWA pool at full-pool slots (docs/findings/sglang-torch-native-swa-reads-full-slots.md).

sglang alone, on the CPU: a hybrid SWA pool (`SWAKVPool`, layer 0 full
attention, layer 1 sliding window) and its allocator
(`SWATokenToKVPoolAllocator`), as sglang builds them for a hybrid SWA model
(both sub-pools of 12 tokens here; sglang's default SWA pool is 0.8 of the
full one). Request A takes 10 slots; the 6 that left its window are freed
from the SWA pool first (what `free_swa_out_of_window_slots` does while A
decodes), then A finishes. Request B's 7 slots then differ between the
pools (full `[11, 12, 7, 8, 9, 10, 1]`, SWA `[11, 12, 1, 2, 3, 4, 5]`).
B's prefill writes its keys and values through the backend
(`forward_extend`, which writes the SWA layer at the translated slots),
then one decode step (`forward_decode`). Both are compared with attention
over the keys and values written.

    adapters/sglang-radix/.venv/bin/python docs/findings/sglang-torch-native-swa-reads-full-slots.py

Exit status 1 when the backend attends other rows than it wrote (the bug),
0 when both paths agree with the reference.
"""

import sys
import types

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

D, SIZE, WINDOW = 4, 12, 2  # head dim, tokens per sub-pool, sliding_window_size

req_to_token_pool = ReqToTokenPool(size=4, max_context_len=32, device="cpu", enable_memory_saver=False)
kv_pool = SWAKVPool(size=SIZE, size_swa=SIZE, page_size=1, dtype=torch.float32, head_num=1, head_dim=D,
                    swa_attention_layer_ids=[1], full_attention_layer_ids=[0], device="cpu")
allocator = SWATokenToKVPoolAllocator(SIZE, SIZE, page_size=1, dtype=torch.float32, device="cpu",
                                      kvcache=kv_pool, need_sort=False)

# Request A: 10 tokens; its first 6 leave the window and their SWA slots
# are freed first, then A finishes.
a = allocator.alloc(10)
allocator.free_swa(a[:6])
allocator.free(a[6:])
allocator.free_full(a[:6])

# Request B: a prompt of 7 tokens, then one decode step.
n = 7
b = allocator.alloc(n + 1)
req_pool_idx = 0  # B's row of req_to_token, as alloc_for_extend writes it
req_to_token_pool.write((req_pool_idx, slice(0, n + 1)), b.to(torch.int32))
print("B's full slots:", b.tolist())
print("B's SWA slots: ", allocator.translate_loc_from_full_to_swa(b).tolist())

runner = types.SimpleNamespace(device="cpu", req_to_token_pool=req_to_token_pool, token_to_kv_pool=kv_pool)
backend = TorchNativeAttnBackend(runner)
layer = types.SimpleNamespace(
    layer_id=1, qk_head_dim=D, v_head_dim=D, tp_q_head_num=1, tp_k_head_num=1, tp_v_head_num=1,
    is_cross_attention=False, attn_type=AttentionType.DECODER, scaling=1.0, sliding_window_size=WINDOW,
    logit_cap=0,
)
# The key and value of position p: all p + 1; queries all ones.
kv = (torch.arange(n + 1, dtype=torch.float32) + 1)[:, None, None].expand(n + 1, 1, D).contiguous()
q = torch.ones(n + 1, D)


def reference(positions, upto):
    """Attention of the queries at `positions` over keys [0, upto), each
    query p masked to keys [p - WINDOW, p]."""
    mask = torch.tensor([[p - WINDOW <= k <= p for k in range(upto)] for p in positions])
    keys = kv[:upto, 0]
    return torch.nn.functional.scaled_dot_product_attention(
        q[positions][None], keys[None], keys[None], attn_mask=mask[None], scale=1.0)[0]


def batch(loc, seq_len, extend):
    fields = dict(out_cache_loc=loc, req_pool_indices=torch.tensor([req_pool_idx]),
                  seq_lens=torch.tensor([seq_len]), encoder_lens=None, encoder_out_cache_loc=None)
    if extend:
        fields.update(extend_prefix_lens=torch.tensor([0]), extend_seq_lens=torch.tensor([seq_len]))
    return types.SimpleNamespace(**fields)


# The prefill: positions [0, n).
prefill = batch(b[:n], n, True)
backend.init_forward_metadata(prefill)
out_extend = backend.forward_extend(q[:n], kv[:n], kv[:n].clone(), layer, prefill).view(n, D)
want_extend = reference(list(range(n)), n)
# One decode step: position n.
step = batch(b[n:], n + 1, False)
backend.init_forward_metadata(step)
out_decode = backend.forward_decode(q[n:], kv[n:], kv[n:].clone(), layer, step).view(1, D)
want_decode = reference([n], n + 1)

swa = kv_pool.get_key_buffer(1)[:, 0, 0]
print("SWA buffer at the full slots (what the backend reads):", swa[b].tolist())
print("SWA buffer at the SWA slots (what it wrote):          ",
      swa[allocator.translate_loc_from_full_to_swa(b)].tolist())
print("forward_extend, dim 0:", [round(x, 4) for x in out_extend[:, 0].tolist()])
print("expected,       dim 0:", [round(x, 4) for x in want_extend[:, 0].tolist()])
print("forward_decode, dim 0:", [round(x, 4) for x in out_decode[:, 0].tolist()])
print("expected,       dim 0:", [round(x, 4) for x in want_decode[:, 0].tolist()])
ok = torch.allclose(out_extend, want_extend, atol=1e-4) and torch.allclose(out_decode, want_decode, atol=1e-4)
if ok:
    print("ok: both paths read the rows the backend wrote")
    sys.exit(0)
print("BUG: TorchNativeAttnBackend read a sliding-window layer's K/V at full-pool slots")
sys.exit(1)
