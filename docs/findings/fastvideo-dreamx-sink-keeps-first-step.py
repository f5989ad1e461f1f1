"""fastvideo's DreamX-World autoregressive model leaves the sink frames of
any chunk after the first with the K/V of that chunk's first denoising step
(the noisiest), when `sink_size > num_frames_per_block`, in both of its
caches: the self-attention's and the camera (PRoPE) attention's.

`CausalWanSelfAttention.forward` and `CausalPropeSelfAttention.forward`
(models/dits/dreamx_world_ar.py) treat a write that ends at or before the
global end and starts after 0 as a "recompute" and write it from
`max(local_start_index, sink_tokens)`. In DreamX's stage every denoising
step after a chunk's first, and the clean-context rerun
(`_update_context_cache`), is such a write: the first chunk (start 0) is
exempt and its sink frames end with the clean rerun's rows, while sink
frames that fall in a later chunk keep the rows of its first step.

Runs fastvideo's own code on the CPU without weights: the stage's
`DreamXWorldARCausalDenoisingStage.forward` (its four denoising steps per
chunk, then the clean-context rerun) with the pipeline's config
(`DreamXWorld5BARPipelineConfig`) and scheduler, on a randomly initialised
one-block `DreamXWorldARTransformer3DModel` built from
`DreamXWorldARArchConfig` (camera attention on, as by default; the
stage's attributes set as its `__init__` sets them, since `DenoisingStage`'s
asks for a GPU attention backend the loop never uses) with
local_attn_size=12 and sink_size=6 (the preset is 12 and 3), over nine
latent frames of 2x2 (one token per frame), identity cameras. Two forward
hooks replace what the value projections return (`self_attn.v` and
`cam_self_attn.v_proj`) with rows that say which call of the chunk and
which frame wrote them; both caches are then read back.

    python docs/findings/fastvideo-dreamx-sink-keeps-first-step.py
"""

import os
import types
from importlib.metadata import version

os.environ.setdefault("TQDM_DISABLE", "1")  # the stage's progress bar

import torch

from fastvideo.configs.models.dits.dreamx_world import DreamXWorldARArchConfig, DreamXWorldARConfig
from fastvideo.configs.pipelines.dreamx_world import DreamXWorld5BARPipelineConfig
from fastvideo.models.dits.dreamx_world_ar import DreamXWorldARTransformer3DModel
from fastvideo.models.schedulers.scheduling_flow_match_euler_discrete import FlowMatchEulerDiscreteScheduler
from fastvideo.pipelines.basic.dreamx_world.ar_denoising import DreamXWorldARCausalDenoisingStage
from fastvideo.pipelines.basic.dreamx_world.stages import DREAMX_Y_CAMERA_KEY

LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK, CHUNKS = 12, 6, 3, 3
FRAMES = FRAMES_PER_BLOCK * CHUNKS
CALLS = {1: "denoising step 1 (t=1000, the noisiest)", 2: "denoising step 2", 3: "denoising step 3",
         4: "denoising step 4", 5: "clean-context rerun"}


def main():
    print("fastvideo", version("fastvideo"), "torch", torch.__version__)
    arch = DreamXWorldARArchConfig(num_attention_heads=1, attention_head_dim=64, in_channels=4, out_channels=4,
                                   text_dim=8, text_len=4, freq_dim=16, ffn_dim=8, num_layers=1,
                                   local_attn_size=LOCAL_ATTN_SIZE, sink_size=SINK_SIZE,
                                   num_frames_per_block=FRAMES_PER_BLOCK)
    model = DreamXWorldARTransformer3DModel(DreamXWorldARConfig(arch_config=arch), hf_config={})
    model = model.to(torch.bfloat16).eval()  # the stage feeds bf16 (autocast is CUDA only)
    block = model.blocks[0]
    print("local_attn_size=%d sink_size=%d num_frames_per_block=%d cam_method=%s camera attention: %s"
          % (LOCAL_ATTN_SIZE, SINK_SIZE, FRAMES_PER_BLOCK, arch.cam_method, type(block.cam_self_attn).__name__))

    # Which transformer call of the chunk this is (1..4 the denoising steps, 5 the
    # clean-context rerun), and the stage's cache, seen from the model's forward.
    seen = {"start": None, "call": 0, "frame_seq_length": 1}

    def before_model(module, args, kwargs):
        if kwargs["current_start"] != seen["start"]:
            seen["start"], seen["call"] = kwargs["current_start"], 0
        seen["call"] += 1
        seen["kv_cache"] = kwargs["kv_cache"]

    def marked_values(module, args, output):
        # every row says which call and which frame wrote it: 10 * call + frame (exact in bf16)
        out, bias = output
        first = seen["start"] // seen["frame_seq_length"]
        marks = torch.tensor([10.0 * seen["call"] + first + i for i in range(out.shape[1])], dtype=out.dtype)
        return marks.reshape(1, -1, 1).expand_as(out).contiguous(), bias

    model.register_forward_pre_hook(before_model, with_kwargs=True)
    block.self_attn.v.register_forward_hook(marked_values)
    block.cam_self_attn.v_proj.register_forward_hook(marked_values)

    scheduler = FlowMatchEulerDiscreteScheduler(shift=5.0)  # as DreamXWorldARPipeline builds it
    scheduler.set_timesteps(1000)
    # The stage's own __init__ (DenoisingStage's picks an attention backend, and the CPU
    # has none; the DreamX loop never uses it): the attributes it sets.
    stage = object.__new__(DreamXWorldARCausalDenoisingStage)
    stage.transformer, stage.scheduler = model, scheduler
    stage.num_transformer_blocks = len(model.blocks)
    stage.num_frame_per_block = int(getattr(model, "num_frame_per_block", 3))
    stage.local_attn_size = int(getattr(model, "local_attn_size", 12))
    args = types.SimpleNamespace(pipeline_config=DreamXWorld5BARPipelineConfig(), disable_autocast=False)
    cameras = {"viewmats": torch.eye(4).expand(1, FRAMES, 4, 4).clone(),
               "K": torch.eye(3).expand(1, FRAMES, 3, 3).clone()}
    batch = types.SimpleNamespace(latents=torch.randn(1, 4, FRAMES, 2, 2), prompt_embeds=[torch.randn(1, 4, 8)],
                                  extra={DREAMX_Y_CAMERA_KEY: cameras}, image_latent=None, generator=None)
    with torch.no_grad():
        stage.forward(batch, args)

    cache = seen["kv_cache"][0]
    for name, key in (("self-attention", "v"), ("camera attention", "prope_v")):
        print("%s cache (%s):" % (name, key))
        for frame, value in enumerate(cache[key][0, :FRAMES, 0, 0].float().tolist()):
            call, wrote = divmod(int(value), 10)
            assert wrote == frame, (frame, value)
            print("  frame %d (%s, chunk %d) holds the rows of the %s"
                  % (frame, "sink" if frame < SINK_SIZE else "window", frame // FRAMES_PER_BLOCK, CALLS[call]))


if __name__ == "__main__":
    main()
