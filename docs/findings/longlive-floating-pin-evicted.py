"""LongLive 2.0: the multi-shot sink (a pinned chunk) is evicted by the KV
cache roll whenever the roll step does not land it exactly on the global
sink.

On a scene cut `CausalDiffusionInferencePipeline._pin_current_chunk` marks
the chunk just generated as the shot's sink ("The pinned region REPLACES the
original sink on the next rolling event"). Until the pin sits right after
the global sink, `CausalWanSelfAttention.forward` treats it as "floating":
the roll evicts the oldest non-sink tokens and moves `pinned_start` left by
the number evicted ("the pinned anchor must follow that shift to keep
tracking the same data"). Nothing keeps the evicted range from covering the
pinned tokens: when the distance from the pin to the global sink is not a
multiple of the roll step, a roll evicts the pinned frames and
`pinned_start` drops below the global sink, where it is ignored.

Here: `local_attn_size = 30` frames, `sink_size = 8` (`multi_shot_sink`, so
the global sink is 8 frames), chunks of 8 frames, one token per frame, a
scene cut at chunk 2 (frames 16..23). The keys of frame f are all f, so the
cache's rows say which frames attention reads (the window is the whole
cache, `max_attention_size = local_attn_size` frames). The shot's frames
16..23 should stay; they are gone after chunk 5. With `local_attn_size = 32`
(the release configs: 32 - 8 is a multiple of 8) they stay.

Needs a LongLive checkout (github.com/NVlabs/LongLive, main) and torch,
diffusers, einops:

    python longlive-floating-pin-evicted.py /path/to/LongLive

The pipeline module imports the text encoder, the VAE and video I/O at
module level, so `_pin_current_chunk` is compiled out of its file,
unmodified. `causal_model.py` imports `x_clip_loss` from transformers<5 and
never calls it; with another transformers a stand-in is registered.
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


def run(local_attn_size, sink_size=8, chunk=8, chunks=8, cut=2):
    torch.manual_seed(0)
    heads, width = 1, 2
    model = cm.CausalWanModel(model_type="t2v", patch_size=(1, 2, 2), text_len=2, in_dim=2, dim=heads * width,
                              ffn_dim=8, freq_dim=8, text_dim=4, out_dim=2, num_heads=heads, num_layers=1,
                              local_attn_size=local_attn_size, sink_size=sink_size).eval()
    model.freqs = torch.ones_like(model.freqs)  # identity RoPE: cached keys stay readable
    frames = {}
    for block in model.blocks:
        block.cross_attn.forward = lambda x, *a, **k: torch.zeros_like(x)
        # the keys of frame f are all f (one token per frame)
        block.self_attn.norm_k.register_forward_hook(
            lambda m, i, o: frames["ids"].view(1, -1, 1).expand_as(o).to(o.dtype).contiguous())
    for module in model.modules():  # what the pipeline's _set_all_modules_* do
        if hasattr(module, "max_attention_size"):
            module.max_attention_size = local_attn_size
        module.global_sink_size = sink_size  # multi_shot_sink: global sink = sink_size
    cache = [{
        "k": torch.zeros(1, local_attn_size, heads, width), "v": torch.zeros(1, local_attn_size, heads, width),
        "global_end_index": torch.tensor([0]), "local_end_index": torch.tensor([0]),
        "pinned_start": torch.tensor([-1]), "pinned_len": torch.tensor([0]),
    }]
    pipe = types.SimpleNamespace(frame_seq_length=1, sink_size=sink_size)
    pin = types.MethodType(pipeline_method("_pin_current_chunk"), pipe)
    lines = []
    for index in range(chunks):
        start = index * chunk
        frames["ids"] = torch.arange(start, start + chunk, dtype=torch.float32)
        with torch.no_grad():
            model(torch.randn(1, 2, chunk, 2, 2), t=torch.full((1, chunk), 500.0),
                  context=torch.randn(1, 2, 4), seq_len=chunk, kv_cache=cache,
                  crossattn_cache=[{"is_init": False}], current_start=start, cache_start=start)
        if index == cut:
            pin(cache, chunk)  # the scene cut: the chunk just generated becomes the shot sink
        held = cache[0]["k"][0, :int(cache[0]["local_end_index"]), 0, 0].int().tolist()
        lines.append("  chunk %d (frames %d..%d): pinned_start %d, held %s"
                     % (index, start, start + chunk - 1, int(cache[0]["pinned_start"]), held))
    shot = set(range(cut * chunk, cut * chunk + min(sink_size, chunk)))
    return shot <= set(held), lines


print("torch", torch.__version__, "LongLive", src)
for size in (32, 30):
    kept, lines = run(size)
    print("local_attn_size=%d sink_size=8 chunks of 8, scene cut at chunk 2 (frames 16..23):" % size)
    print("\n".join(lines))
    print("  shot sink frames 16..23 %s" % ("still attended" if kept else "EVICTED"))
