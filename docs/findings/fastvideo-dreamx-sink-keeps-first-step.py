"""fastvideo's DreamX-World autoregressive model leaves the sink frames of
any chunk after the first with the K/V of that chunk's first denoising step
(the noisiest), when `sink_size > num_frames_per_block`.

`CausalWanSelfAttention.forward` (models/dits/dreamx_world_ar.py) treats a
write that ends at or before the global end and starts after 0 as a
"recompute" and writes it from `max(local_start_index, sink_tokens)`. In
DreamX's stage every denoising step after a chunk's first, and the
clean-context rerun (`_update_context_cache`), is such a write: the first
chunk (start 0) is exempt and its sink frames end with the clean rerun's
rows, while sink frames that fall in a later chunk keep the rows of its
first step.

Runs fastvideo's own code on the CPU without weights: the stage's
`_initialize_kv_cache`, `CausalWanSelfAttention.forward` with its
block-relativistic RoPE, the model's `_apply_cache_updates`, for three
3-frame chunks, each through the stage's four denoising steps and the
clean-context rerun, with local_attn_size=12 and sink_size=6 (the preset is
12 and 3). The q/k/v projections are replaced by rows that say which step
and frame wrote them; the cache is then read back.

    python docs/findings/fastvideo-dreamx-sink-keeps-first-step.py
"""

import types

import torch

from fastvideo.models.dits.dreamx_world_ar import (CausalWanSelfAttention, DreamXWorldARTransformer3DModel,
                                                   rope_params)
from fastvideo.pipelines.basic.dreamx_world.ar_denoising import DreamXWorldARCausalDenoisingStage

HEADS, HEAD_DIM = 1, 12
LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK = 12, 6, 3
STEPS = {1: "step t=1000", 2: "step t=750", 3: "step t=500", 4: "step t=250", 9: "clean rerun"}


def main():
    from importlib.metadata import version

    print("fastvideo", version("fastvideo"), "torch", torch.__version__)
    stage = types.SimpleNamespace(
        transformer=types.SimpleNamespace(num_attention_heads=HEADS, attention_head_dim=HEAD_DIM, blocks=[]),
        local_attn_size=LOCAL_ATTN_SIZE, num_transformer_blocks=1)
    frame_seq_length = 1  # tokens per latent frame (a 2x2 latent through the (1, 2, 2) patch)
    kv_cache = DreamXWorldARCausalDenoisingStage._initialize_kv_cache(stage, 1, torch.float32, "cpu",
                                                                     frame_seq_length)

    # The module as its __init__ sets it up, with projections that return the rows below.
    attn = object.__new__(CausalWanSelfAttention)
    torch.nn.Module.__init__(attn)
    attn.num_heads, attn.head_dim = HEADS, HEAD_DIM
    attn.local_attn_size, attn.sink_size = LOCAL_ATTN_SIZE, SINK_SIZE
    attn.max_attention_size = LOCAL_ATTN_SIZE * 880  # as __init__ computes it
    attn.norm_q = attn.norm_k = torch.nn.Identity()
    rows = {}
    attn.q = attn.k = lambda x: (x, None)
    attn.v = lambda x: (rows["v"], None)
    attn.o = lambda x: (x, None)
    d = HEAD_DIM
    freqs = torch.cat([rope_params(1024, d - 4 * (d // 6)), rope_params(1024, 2 * (d // 6)),
                       rope_params(1024, 2 * (d // 6))], dim=1)  # as the model builds them

    print("local_attn_size=%d sink_size=%d num_frames_per_block=%d" % (LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK))
    for start in range(0, 3 * FRAMES_PER_BLOCK, FRAMES_PER_BLOCK):
        for step in STEPS:
            # every row says which step and which frame wrote it: 100 * step + frame
            marks = torch.tensor([100.0 * step + f for f in range(start, start + FRAMES_PER_BLOCK)])
            x = marks.reshape(1, FRAMES_PER_BLOCK, 1).expand(1, FRAMES_PER_BLOCK, HEADS * HEAD_DIM).contiguous()
            rows["v"] = x
            grid = torch.tensor([[FRAMES_PER_BLOCK, 1, 1]])
            _, update = attn.forward(x, torch.tensor([FRAMES_PER_BLOCK]), grid, freqs, kv_cache[0],
                                     current_start=start * frame_seq_length)
            DreamXWorldARTransformer3DModel._apply_cache_updates(None, kv_cache, [(0, update)])
    held = kv_cache[0]["v"][0, :3 * FRAMES_PER_BLOCK, 0, 0].tolist()
    for frame, value in enumerate(held):
        where = "sink" if frame < SINK_SIZE else "window"
        print("frame %d (%s, chunk %d) holds the rows of the %s"
              % (frame, where, frame // FRAMES_PER_BLOCK, STEPS[int(value) // 100]))


if __name__ == "__main__":
    main()
