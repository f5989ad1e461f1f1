"""fastvideo's causal Wan attends to KV cache slots no frame wrote when a
latent side is odd (e.g. 360x640 video, latent 45x80).

The causal denoising stages size the cache and place each chunk with
`self.frame_seq_length = latent_seq_length // patch_ratio`
((45 * 80) // 4 = 900 tokens per frame), while the model's patch embedding
makes `(45 // 2) * (80 // 2) = 880` tokens per frame: every chunk lands 20
tokens per frame past the previous one, and attention reads the gap.

Runs fastvideo's own code on the CPU without weights: the stage's
`forward` up to its frame size (stopped right after it), its
`_initialize_kv_cache`, the model's `PatchEmbed`, and
`CausalWanSelfAttention.forward` for 3-frame chunks (a 6-frame rolling
window, then WanVideoConfig's default `local_attn_size=-1` over 21 latent
frames, the default 81-frame video), with the
attention backend (fastvideo has none for the CPU) replaced by
scaled_dot_product_attention, which records the keys it reads.

    python docs/findings/fastvideo-odd-latent-reads-unwritten-slots.py [--latent 45x80]
"""

import argparse
import types

import torch

from fastvideo.layers.visual_embedding import PatchEmbed
from fastvideo.models.dits.causal_wanvideo import CausalWanSelfAttention
from fastvideo.pipelines.stages.causal_denoising import CausalDMDDenosingStage

HEADS, HEAD_DIM = 2, 8
PATCH = (1, 2, 2)  # WanVideoConfig's patch_size
SINK_SIZE, FRAMES_PER_BLOCK = 0, 3


class Stop(Exception):
    pass


def stage_frame_seq_length(latents, local_attn_size):
    """`CausalDMDDenosingStage.forward`, run until it has set `self.frame_seq_length`."""
    stage = object.__new__(CausalDMDDenosingStage)
    arch = types.SimpleNamespace(patch_size=PATCH, num_frames_per_block=FRAMES_PER_BLOCK)
    stage.transformer = types.SimpleNamespace(config=types.SimpleNamespace(arch_config=arch),
                                              num_attention_heads=HEADS, attention_head_dim=HEAD_DIM)
    stage.num_transformer_blocks = 1
    stage.local_attn_size, stage.sink_size = local_attn_size, SINK_SIZE
    stage.sliding_window_num_frames = 21  # WanVideoConfig's default

    class Args:
        disable_autocast = True

        @property
        def pipeline_config(self):  # the first thing the stage reads after the frame size
            raise Stop

    try:
        CausalDMDDenosingStage.forward(stage, types.SimpleNamespace(latents=latents), Args())
    except Stop:
        pass
    return stage


def run(h, w, local_attn_size, chunks):
    """`chunks` 3-frame chunks through the stage's cache and the model's attention."""
    latents = torch.zeros(1, 16, chunks * FRAMES_PER_BLOCK, h, w)
    stage = stage_frame_seq_length(latents, local_attn_size)
    embed = PatchEmbed(in_chans=16, embed_dim=HEADS * HEAD_DIM, patch_size=PATCH, flatten=False)
    tokens = embed(latents[:, :, :1]).flatten(2).shape[-1]
    print("local_attn_size=%d, latent %dx%d: stage frame_seq_length %d, tokens per frame from the patch embedding %d"
          % (local_attn_size, h, w, stage.frame_seq_length, tokens))

    kv_cache = stage._initialize_kv_cache(batch_size=1, dtype=torch.float32, device="cpu")[0]
    # The module as its __init__ sets it up, less the attention backend (none on the CPU).
    attn = object.__new__(CausalWanSelfAttention)
    torch.nn.Module.__init__(attn)
    attn.local_attn_size, attn.sink_size, attn.rope_cache_policy = local_attn_size, SINK_SIZE, "absolute"
    read = []

    def sdpa(q, k, v):
        read.append(k.clone())
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)

    attn.attn = sdpa
    n = FRAMES_PER_BLOCK * tokens  # one chunk's tokens, as the model makes them
    cos = torch.ones(n, HEAD_DIM // 2, dtype=torch.float64)
    sin = torch.zeros(n, HEAD_DIM // 2, dtype=torch.float64)
    for block in range(chunks):
        start_index = block * FRAMES_PER_BLOCK
        k = torch.randn(1, n, HEADS, HEAD_DIM) + 3.0  # no written row is all zeros
        v = torch.randn(1, n, HEADS, HEAD_DIM)
        # the stage's current_start=(pos_start_base + start_index) * self.frame_seq_length
        current_start = (0 + start_index) * stage.frame_seq_length
        try:
            attn.forward(k, k, v, (cos, sin), None, kv_cache=kv_cache, current_start=current_start,
                         frame_seqlen=tokens)
        except ValueError as error:
            print("chunk %d (frames %d..%d, current_start %d): ValueError: %s"
                  % (block, start_index, start_index + FRAMES_PER_BLOCK - 1, current_start, str(error)[:160]))
            return
        keys = read[-1]
        unwritten = int((keys == 0).all(dim=-1).all(dim=-1).sum())
        print("chunk %d (frames %d..%d, current_start %d): attention read %d keys, %d of them never written"
              % (block, start_index, start_index + FRAMES_PER_BLOCK - 1, current_start, keys.shape[1], unwritten))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--latent", default="45x80", help="latent HxW (default 45x80: 360x640 video)")
    h, w = (int(x) for x in parser.parse_args().latent.split("x"))
    torch.manual_seed(0)
    from importlib.metadata import version

    print("fastvideo", version("fastvideo"), "torch", torch.__version__)
    run(h, w, local_attn_size=6, chunks=2)  # a rolling window of 6 latent frames
    run(h, w, local_attn_size=-1, chunks=7)  # WanVideoConfig's default: 21 latent frames (81 video frames)


if __name__ == "__main__":
    main()
