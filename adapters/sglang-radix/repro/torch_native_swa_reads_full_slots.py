#!/usr/bin/env python3
"""sglang 0.5.23's `TorchNativeAttnBackend` reads a sliding-window layer's
keys and values at the request's full-pool slots instead of their SWA-pool
slots: a wrong-row read for hybrid SWA models (`SWAKVPool`) on the
torch_native backend.

The backend writes an SWA layer's KV at the translated slots
(`KVWriteLoc(cache_loc, self.swa_out_cache_loc)`, torch_native_backend.py
lines 300 and 368; `swa_out_cache_loc` = `translate_loc_from_full_to_swa`,
line 54), but both SDPA paths read `k_cache[req_to_token[req, :seq_len]]`
(lines 139-141 and 240-242) with `k_cache = get_key_buffer(layer_id)`, the
SWA sub-pool's buffer for an SWA layer (lines 315, 379): full-pool indices
into the SWA buffer, never translated. `IntelAMXAttnBackend._swa_kv_indices`
(intel_amx_backend.py) translates the same table ("Feeding it full indices
reads out of bounds ..."); the torch_native backend does not. While the two
pools hand out the same slot numbers (a fresh server) nothing shows; once
SWA slots were freed out of window and reused in another order, the rows
read are other positions' (or never-written) KV.

Setup, with sglang's own classes as its scheduler drives them (the
adapter's driver): a hybrid pool (layer 0 full attention, layer 1 sliding
window, W = 3: sliding_window_size 2), one request decodes past its window
(SGLANG_SWA_EVICTION_INTERVAL=1: the decode steps free what left the
window), finishes, the tree is cleared; a second request's slots then differ
between the pools. Its prefill's layer-1 attention runs through
`TorchNativeAttnBackend.forward_extend`.

    adapters/sglang-radix/.venv/bin/python adapters/sglang-radix/repro/torch_native_swa_reads_full_slots.py

Exit status 1 when the backend's output differs from attention over the
keys it wrote (the bug), 0 when they agree.
"""

import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import driver  # noqa: E402  (publishes sglang's runtime context: cpu, torch_native)
import torch  # noqa: E402
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend  # noqa: E402
from sglang.srt.layers.radix_attention import AttentionType  # noqa: E402

D = 4
d = driver.SWARadixDriver(16, 1, 2, D, 3, [1], eviction_interval=1)
zeros = lambda n: [[[0] * D] * n] * 2  # noqa: E731
d.start(0, [1, 2, 3, 4, 5])
d.compute(0, 0, zeros(5))
for position in range(5, 11):
    d.extend(0, [position])
    d.compute(0, position, zeros(1))
d.finish(0)
d.clear()  # every slot free again; the SWA free list in another order

prompt = [9, 8, 7, 6, 5, 4, 3]
d.start(1, prompt)
req = d.reqs[1]
n = len(prompt)
row = d.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :n].long()
swa_row = d.allocator.translate_loc_from_full_to_swa(row)
print("full slots:", row.tolist())
print("SWA slots: ", swa_row.tolist())

runner = types.SimpleNamespace(device="cpu", req_to_token_pool=d.req_to_token_pool, token_to_kv_pool=d.kv_pool)
backend = TorchNativeAttnBackend(runner)
layer = types.SimpleNamespace(
    layer_id=1, qk_head_dim=D, v_head_dim=D, tp_q_head_num=1, tp_k_head_num=1, tp_v_head_num=1,
    is_cross_attention=False, attn_type=AttentionType.DECODER, scaling=1.0, sliding_window_size=2, logit_cap=0,
)
batch = types.SimpleNamespace(
    out_cache_loc=row, req_pool_indices=torch.tensor([req.kv.req_pool_idx]), seq_lens=torch.tensor([n]),
    extend_prefix_lens=torch.tensor([0]), extend_seq_lens=torch.tensor([n]), encoder_lens=None,
    encoder_out_cache_loc=None,
)
# Keys and values of position p: all p + 1.
kv = (torch.arange(n, dtype=torch.float32) + 1)[:, None, None].expand(n, 1, D).contiguous()
q = torch.ones(n, D)
backend.init_forward_metadata(batch)
out = backend.forward_extend(q, kv, kv.clone(), layer, batch).view(n, D)

# What the layer should compute: each query p attends keys [p - 2, p].
mask = torch.tensor([[p - 2 <= k <= p for k in range(n)] for p in range(n)])
want = torch.nn.functional.scaled_dot_product_attention(
    q[None], kv[:, 0][None], kv[:, 0][None], attn_mask=mask[None], scale=1.0
)[0]
buffer = d.kv_pool.get_key_buffer(1)[:, 0, 0]
print("SWA buffer at the full slots (what the backend reads):", buffer[row].tolist())
print("SWA buffer at the SWA slots (what it wrote):          ", buffer[swa_row].tolist())
print("backend output, dim 0:", [round(x, 4) for x in out[:, 0].tolist()])
print("expected,       dim 0:", [round(x, 4) for x in want[:, 0].tolist()])
if torch.allclose(out, want, atol=1e-4):
    print("ok: the backend read the rows it wrote")
    sys.exit(0)
print("BUG: TorchNativeAttnBackend read an SWA layer's KV at full-pool slots")
sys.exit(1)
