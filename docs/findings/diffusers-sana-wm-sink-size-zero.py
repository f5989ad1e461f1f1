"""diffusers: the SANA-WM stage-2 refiner (SanaWMLTX2Refiner) raises
RuntimeError with sink_size=0.

`__call__` accepts any sink_size below the frame count and
SanaWMRefinerKVLayerCache.get_sink() returns None for an empty sink, but
the sink capture always runs: `_capture_block_kv(clean_block=z[:, :, :0])`
packs a zero-frame latent, whose reshape fails before the transformer runs.

A tiny randomly initialised refiner transformer (no weights downloaded,
CPU); the prompt encoding is replaced by fixed random embeddings (the text
encoder plays no part in the cache).

    pip install torch diffusers==0.42.1 transformers && python diffusers-sana-wm-sink-size-zero.py
"""

import diffusers
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.models.transformers.transformer_sana_wm_refiner import SanaWMLTX2RefinerTransformer3DModel
from diffusers.pipelines.sana_wm.refiner import SanaWMLTX2Refiner

print("diffusers", diffusers.__version__, "torch", torch.__version__)
torch.manual_seed(0)
transformer = SanaWMLTX2RefinerTransformer3DModel(
    in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=12, cross_attention_dim=24,
    audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=1, audio_attention_head_dim=4,
    audio_cross_attention_dim=4, num_layers=1, caption_channels=8,
)
pipe = SanaWMLTX2Refiner(
    transformer=transformer, connectors=None, tokenizer=None, text_encoder=None,
    scheduler=FlowMatchEulerDiscreteScheduler(shift=1.0),
)
pipe.set_progress_bar_config(disable=True)
pipe._encode_prompt = lambda prompt, device, dtype: (torch.randn(1, 2, 8), torch.ones(1, 2))

latent = torch.randn(1, 4, 10, 1, 1)  # (B, C, F, H, W): 10 stage-1 latent frames
for sink_size in (1, 0):
    try:
        out = pipe(latent, "a prompt", fps=24.0, sink_size=sink_size, block_size=3, kv_max_frames=11, output_type="latent")
        print("sink_size=%d -> ok, refined latents %s" % (sink_size, tuple(out.shape)))
    except Exception as error:
        print("sink_size=%d -> %s: %s" % (sink_size, type(error).__name__, error))
