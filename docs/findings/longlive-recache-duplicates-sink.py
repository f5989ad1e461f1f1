"""LongLive 2.0: the clean re-cache of a scene cut (`shot_clean_recache`)
duplicates frames when the new shot's first chunk starts inside the global
sink.

On a scene cut with `shot_clean_recache`, `_inference_inner` calls
`CausalDiffusionInferencePipeline._zero_kv_data` ("Reset KV cache for clean
recache, preserving global sink"), which sets every block's
`local_end_index` to the global sink's length and `global_end_index` to the
chunk's start, then re-runs the chunk at timestep 0. The re-run writes the
chunk's rows after the first `global_sink_size` frames of the buffer. When
the chunk starts before the global sink is complete (frame index below
`global_sink_size`: `sink_size` larger than the chunks, or a 1-frame first
chunk with `independent_first_frame`), those first buffer slots already
hold the chunk's own frames from its last denoising step: attention then
reads them twice, once with the noisy rows of the last denoising step and
once with the clean rows of the re-run.

Here: `local_attn_size = 32`, `sink_size = 8` with `multi_shot_sink`
(global sink 8 frames), `independent_first_frame` chunks of 1, 8, 8 frames,
one token per frame, a scene cut at chunk 1 (frames 1..8). The keys of
frame f are f during denoising and f + 0.5 in the clean re-run, so the
cache's rows say which frames attention reads, and from which pass.

Needs a LongLive checkout (github.com/NVlabs/LongLive, main) and torch,
diffusers, einops:

    python longlive-recache-duplicates-sink.py /path/to/LongLive

The pipeline module imports the text encoder, the VAE and video I/O at
module level, so `_zero_kv_data` and `_pin_current_chunk` are compiled out
of its file, unmodified. `causal_model.py` imports `x_clip_loss` from
transformers<5 and never calls it; with another transformers a stand-in is
registered.
"""

import ast
import os
import sys
import types

import torch

src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "LongLive")
sys.path.insert(0, src)
os.environ.setdefault("LLV2_TRITON_ROPE", "0")  # the Triton kernels need CUDA
os.environ.setdefault("LLV2_TRITON_ADALN", "0")
for name, path in (("wan_5b", "wan_5b"), ("wan_5b.modules", "wan_5b/modules"), ("utils", "utils")):
    package = types.ModuleType(name)  # skip the package __init__s (T5 tokenizer, VAEs)
    package.__path__ = [os.path.join(src, path)]
    sys.modules.setdefault(name, package)
try:
    from transformers.models.x_clip.modeling_x_clip import x_clip_loss  # noqa: F401
except ImportError:
    sys.modules["transformers.models.x_clip.modeling_x_clip"] = types.SimpleNamespace(x_clip_loss=None)
from wan_5b.modules import causal_model as cm  # noqa: E402


def pipeline_method(name):
    path = os.path.join(src, "pipeline", "causal_diffusion_inference.py")
    tree = ast.parse(open(path).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CausalDiffusionInferencePipeline")
    node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
    return namespace[name]


# CausalWanSelfAttention calls flash_attention for cross-attention (CUDA only)
# and casts to bf16 in the SDPA fallback; neither touches the self-attention cache.
real_attention = cm.attention
cm.attention = lambda q, k, v, **kw: real_attention(q, k, v, **dict(kw, dtype=q.dtype))


def run():
    torch.manual_seed(0)
    heads, width, size, sink = 1, 2, 32, 8
    model = cm.CausalWanModel(model_type="t2v", patch_size=(1, 2, 2), text_len=2, in_dim=2, dim=heads * width,
                              ffn_dim=8, freq_dim=8, text_dim=4, out_dim=2, num_heads=heads, num_layers=1,
                              local_attn_size=size, sink_size=sink).eval()
    model.freqs = torch.ones_like(model.freqs)  # identity RoPE: cached keys stay readable
    frames = {}
    for block in model.blocks:
        block.cross_attn.forward = lambda x, *a, **k: torch.zeros_like(x)
        block.self_attn.norm_k.register_forward_hook(
            lambda m, i, o: frames["ids"].view(1, -1, 1).expand_as(o).to(o.dtype).contiguous())
    for module in model.modules():  # what the pipeline's _set_all_modules_* do
        if hasattr(module, "max_attention_size"):
            module.max_attention_size = size
        module.global_sink_size = sink  # multi_shot_sink: global sink = sink_size
    cache = [{
        "k": torch.zeros(1, size, heads, width), "v": torch.zeros(1, size, heads, width),
        "global_end_index": torch.tensor([0]), "local_end_index": torch.tensor([0]),
        "pinned_start": torch.tensor([-1]), "pinned_len": torch.tensor([0]),
    }]
    pipe = types.SimpleNamespace(frame_seq_length=1, sink_size=sink, global_sink_size=sink)
    zero = types.MethodType(pipeline_method("_zero_kv_data"), pipe)
    pin = types.MethodType(pipeline_method("_pin_current_chunk"), pipe)

    def forward(start, n, ids):
        frames["ids"] = ids
        with torch.no_grad():
            model(torch.randn(1, 2, n, 2, 2), t=torch.full((1, n), 500.0), context=torch.randn(1, 2, 4),
                  seq_len=n, kv_cache=cache, crossattn_cache=[{"is_init": False}],
                  current_start=start, cache_start=start)

    start = 0
    for index, n in enumerate((1, 8, 8)):
        ids = torch.arange(start, start + n, dtype=torch.float32)
        for _step in range(4):  # the denoising steps
            forward(start, n, ids)
        cut = index == 1
        if cut:  # is_scene_cut and shot_clean_recache
            zero(cache, start)
        forward(start, n, ids + 0.5)  # the clean re-run at timestep 0
        if cut:
            pin(cache, n)
        held = cache[0]["k"][0, :int(cache[0]["local_end_index"]), 0, 0].tolist()
        print("  chunk %d (frames %d..%d)%s: held %s" % (index, start, start + n - 1, ", scene cut" if cut else "",
                                                        " ".join("%g" % f for f in held)))
        start += n
    return held


print("torch", torch.__version__, "LongLive", src)
print("local_attn_size=32 sink_size=8 (multi_shot_sink, shot_clean_recache), chunks of 1, 8, 8 frames:")
held = run()
twice = sorted({int(f) for f in held if sum(int(g) == int(f) for g in held) > 1})
print("  frames attended twice: %s" % (twice or "none"))
