"""fastvideo's causal Wan overwrites attention-sink frames when a chunk does
not fit beside the sink (num_frames_per_block > local_attn_size - sink_size).

`sink_size` is documented as "we keep the first `sink_size` frames unchanged
when rolling the KV cache" (WanVideoConfig). When the new chunk needs more
room than the slots after the sink, `CausalWanSelfAttention.forward`
computes a negative `num_rolled_tokens`, rolls nothing, and writes the chunk
at `local_end_index - num_new_tokens`, inside the sink: later chunks attend
to fewer sink frames than configured, with no error.

Runs fastvideo's own code on the CPU without weights: the causal stage's
`_initialize_kv_cache` and `CausalWanSelfAttention.forward` for 3-frame
chunks with local_attn_size=4, sink_size=2, every frame's K/V rows filled
with its frame number; attention (fastvideo has no CPU backend) is
scaled_dot_product_attention, which records the frames it reads.

    python docs/findings/fastvideo-chunk-overwrites-sink.py
"""

import types

import torch

from fastvideo.models.dits.causal_wanvideo import CausalWanSelfAttention
from fastvideo.pipelines.stages.causal_denoising import CausalDMDDenosingStage

HEADS, HEAD_DIM, FRAME_TOKENS = 1, 4, 4
LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK = 4, 2, 3


def main():
    from importlib.metadata import version

    print("fastvideo", version("fastvideo"), "torch", torch.__version__)
    stage = types.SimpleNamespace(
        transformer=types.SimpleNamespace(num_attention_heads=HEADS, attention_head_dim=HEAD_DIM),
        local_attn_size=LOCAL_ATTN_SIZE, frame_seq_length=FRAME_TOKENS, sliding_window_num_frames=21,
        num_transformer_blocks=1)
    kv_cache = CausalDMDDenosingStage._initialize_kv_cache(stage, batch_size=1, dtype=torch.float32, device="cpu")[0]

    # The module as its __init__ sets it up, less the attention backend (none on the CPU).
    attn = object.__new__(CausalWanSelfAttention)
    torch.nn.Module.__init__(attn)
    attn.local_attn_size, attn.sink_size, attn.rope_cache_policy = LOCAL_ATTN_SIZE, SINK_SIZE, "absolute"
    read = []

    def sdpa(q, k, v):
        read.append(k.clone())
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)

    attn.attn = sdpa
    n = FRAMES_PER_BLOCK * FRAME_TOKENS
    identity = (torch.ones(n, HEAD_DIM // 2, dtype=torch.float64), torch.zeros(n, HEAD_DIM // 2, dtype=torch.float64))
    print("local_attn_size=%d sink_size=%d num_frames_per_block=%d" % (LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK))
    for start_index in range(0, 4 * FRAMES_PER_BLOCK, FRAMES_PER_BLOCK):
        frames = torch.arange(start_index, start_index + FRAMES_PER_BLOCK, dtype=torch.float32)
        k = frames.repeat_interleave(FRAME_TOKENS).reshape(1, n, 1, 1).expand(1, n, HEADS, HEAD_DIM).contiguous()
        attn.forward(k, k, k.clone(), identity, None, kv_cache=kv_cache,
                     current_start=start_index * FRAME_TOKENS, frame_seqlen=FRAME_TOKENS)
        keys = read[-1][0, ::FRAME_TOKENS, 0, 0].long().tolist()
        print("chunk of frames %d..%d reads frames %s (sink frames kept: %s)"
              % (start_index, start_index + FRAMES_PER_BLOCK - 1, keys,
                 [f for f in range(SINK_SIZE) if f in keys]))


if __name__ == "__main__":
    main()
