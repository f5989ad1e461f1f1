"""diffusers: AnyFlow-FAR's autoregressive forward attends to the zero rows
it pads its keys with.

AnyFlowCausalAttnProcessor pads query, key and value with zero rows to a
multiple of 128 tokens for flex_attention's BlockMask, then calls
dispatch_attention_fn(..., attn_mask=attention_mask). The prefill and
training forwards pass a BlockMask that hides the padded keys
(`is_padding = ... | (kv_idx >= real_seq_len)`); the autoregressive
forward (`_forward_inference`, every denoising step of
AnyFlowFARPipeline with the default use_kv_cache=True) passes
attention_mask=None, so every query also attends to the padded keys: each
adds exp(0) to the softmax denominator and a zero value to the sum.

The processor on one layer (random weights, CPU), reading 6 cached tokens
and a 5-token chunk, against the same attention computed without padding
(scaled_dot_product_attention over the cached and current K/V), and
against that attention with the 123 zero keys added.

    pip install torch diffusers==0.42.1 && python diffusers-anyflow-far-attends-padding.py
"""

import math

import diffusers
import torch
import torch.nn.functional as F
from diffusers.models.transformers.transformer_anyflow_far import AnyFlowAttention

print("diffusers", diffusers.__version__, "torch", torch.__version__)
torch.manual_seed(0)
heads, head_dim, batch, cached = 2, 16, 1, 6
attn = AnyFlowAttention(dim=heads * head_dim, heads=heads, dim_head=head_dim)
kv_cache = {
    "full_cache": torch.randn(2, batch, heads, 8, head_dim),
    "compressed_cache": torch.zeros(2, batch, heads, 0, head_dim),
}
flag = {"is_cache_step": False, "num_cached_full_tokens": cached, "num_cached_compressed_tokens": 0}


def split(x):
    return x.unflatten(2, (heads, -1)).transpose(1, 2)


with torch.no_grad():
    for tokens in (5, 128):
        x = torch.randn(batch, tokens, heads * head_dim)
        out = attn(x, kv_cache=kv_cache, kv_cache_flag=flag)  # what _forward_inference runs
        q = split(attn.norm_q(attn.to_q(x)))
        k = torch.cat([kv_cache["full_cache"][0, :, :, :cached], split(attn.norm_k(attn.to_k(x)))], dim=2)
        v = torch.cat([kv_cache["full_cache"][1, :, :, :cached], split(attn.to_v(x))], dim=2)
        exact = attn.to_out[0](F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2, 3))
        pad = int(math.ceil(tokens / 128.0) * 128 - tokens)
        zeros = torch.zeros(batch, heads, pad, head_dim)
        padded = F.scaled_dot_product_attention(q, torch.cat([k, zeros], 2), torch.cat([v, zeros], 2))
        padded = attn.to_out[0](padded.transpose(1, 2).flatten(2, 3))
        print(
            "%3d-token chunk, %d cached: max |processor - attention without padding| = %.3g, "
            "max |processor - attention with %d zero keys| = %.3g (max |output| %.3g)"
            % (tokens, cached, (out - exact).abs().max(), pad, (out - padded).abs().max(), exact.abs().max())
        )

# The released checkpoints' geometry: 480x832 video -> 60x104 latents, patch (1, 2, 2).
per_frame = (60 // 2) * (104 // 2)
for frames in (1, 2, 3):
    tokens = frames * per_frame
    print("a %d-frame chunk at 480x832: %d query tokens, %d zero keys attended" % (frames, tokens, -tokens % 128))
