"""diffusers: the SANA-WM stage-2 refiner (SanaWMLTX2Refiner) stops
trimming its KV history when kv_max_frames <= sink_size.

`kv_max_frames` is documented as the "maximum context+active frames
retained in the sliding window (canonical: 11 = 1 sink + 10 recent)", and
the history is trimmed "so the sliding window stays bounded". The trim runs
only `if max_history_frames > 0 and ...`, with max_history_frames =
kv_max_frames - sink_size: at kv_max_frames == sink_size (no recent frame)
or below it, the history is never trimmed and every block attends to every
earlier block.

A tiny randomly initialised refiner transformer (no weights downloaded,
CPU); the prompt encoding is replaced by fixed random embeddings. A forward
pre-hook prints, for every denoising forward (kv_cache_mode="inject"), how
many sink frames, history frames and active frames its attention reads;
the first of each block's three is printed.

    pip install torch diffusers==0.42.1 transformers && python diffusers-sana-wm-window-kept-at-sink-size.py
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

windows = []
STEPS = 3  # denoising forwards per block with the default 3-step distilled sigmas


def record(module, args, kwargs):
    if kwargs.get("kv_cache_mode") == "inject":
        layer = kwargs["kv_cache"].get(0)
        sink = 0 if layer.get_sink() is None else layer.get_sink()[0].shape[1]
        history = 0 if layer.get_history() is None else layer.get_history()[0].shape[1]
        windows.append((sink, history, kwargs["hidden_states"].shape[1]))


transformer.register_forward_pre_hook(record, with_kwargs=True)
latent = torch.randn(1, 4, 16, 1, 1)  # (B, C, F, H, W): 16 stage-1 latent frames, 5 blocks of 3
for kv_max_frames in (3, 2, 1, 0):
    windows.clear()
    try:
        pipe(latent, "a prompt", fps=24.0, sink_size=1, block_size=3, kv_max_frames=kv_max_frames, output_type="latent")
    except Exception as error:
        print("sink_size=1 kv_max_frames=%d: %s: %s" % (kv_max_frames, type(error).__name__, error))
        continue
    print(
        "sink_size=1 kv_max_frames=%d: attended (sink, history, active) frames per block: %s"
        % (kv_max_frames, " ".join("%d+%d+%d" % w for w in windows[::STEPS]))
    )
