"""Rolling Forcing, through its own inference entry point: from the 8th block on,
the clean re-run of a block attends without the anchor.

    python docs/findings/rollingforcing-rerun-drops-anchor-entrypoint.py /path/to/RollingForcing

Runs `CausalInferencePipeline.inference_rolling_forcing`
(`pipeline/rolling_forcing_inference.py`, the function the README's
`inference.py` calls) unmodified, on the README example's configuration
(`configs/default_config.yaml` merged with `configs/rolling_forcing_dmd.yaml`,
as `inference.py` merges them) and its 126 latent frames, with a tiny randomly
initialised generator that the pipeline itself builds (`WanDiffusionWrapper`
loads `wan_models/Wan2.1-T2V-1.3B/` with `CausalWanModel.from_pretrained`;
the script saves the tiny model there, in a temporary directory, and runs
from it). The frame geometry is the release's: blocks of 3 frames, a window
of 5 blocks (5 denoising steps), an attention size of 21 frames, a cache of
24 frames; only the frame is smaller (a 4x4 latent, 4 tokens instead of 1560).

What is not the release's, exactly:

- the generator: `CausalWanModel` with dim 48, 4 heads, 2 layers, ffn 96,
  random weights (instead of the 1.3B checkpoint);
- the frame size: the pipeline's `frame_seq_length` and each self-attention's
  `frame_length`, `block_length`, `max_attention_size` (set in `__init__` as
  1560, 3 * 1560, 21 * 1560) are set to 4, 3 * 4, 21 * 4;
- the caches: `_initialize_kv_cache` allocates 24 frames of 1560 tokens of 12
  heads of 128 for 30 layers; the script allocates the same dicts at the tiny
  sizes (24 frames of 4 tokens, 4 heads of 12, 2 layers) before the call, and
  the pipeline takes its own reuse path (the one `inference.py` takes from the
  second prompt on: it resets `global_end_index`, `local_end_index` and the
  cross-attention caches);
- the text encoder: a module that returns fixed random `prompt_embeds`
  (8 tokens of 4096) instead of UMT5-XXL;
- the VAE: `decode_to_pixel` returns the latents unchanged;
- `torch.cuda.current_device` returns 0 while the checkout is imported on a
  machine without CUDA (`wan/modules/t5.py` calls it in a default argument
  when the module is imported; the T5 model is never built);
- cross-attention: `wan.modules.model.flash_attention` (flash-attn only, CUDA
  only) is replaced by the checkout's own `wan.modules.attention.attention`,
  which without flash-attn is torch's scaled_dot_product_attention, the
  path the self-attention already takes on its own.

Instrumentation (no behaviour change): a forward hook on each
self-attention's `v` projection records which latent frame each V row
belongs to (from the forward's `current_start`), and the self-attention's
`attention` function is wrapped to map the V rows it reads back to frames
(RoPE leaves V alone, and the cache holds copies of the rows). Prints, per
window, the frames the denoising forward and the clean re-run
(`updating_cache=True`) read in layer 0, and exits 1 when a clean re-run
reads without the anchor (frames 0..2) while the denoising reads have it.
"""

import argparse
import contextlib
import inspect
import io
import os
import sys
import tempfile

import torch

DIM, HEADS, LAYERS, FFN = 48, 4, 2, 96
LATENT_H, LATENT_W = 4, 4  # patch (1, 2, 2): 4 tokens per frame
TEXT_TOKENS, TEXT_DIM = 8, 4096
CACHE_FRAMES = 24  # `kv_cache_size = 1560 * 24` in _initialize_kv_cache


def ranges(frames):
    out, run = [], None
    for f in sorted(frames):
        if run and f == run[1] + 1:
            run[1] = f
        else:
            run = [f, f]
            out.append(run)
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout")
    parser.add_argument("--frames", type=int, default=126,
                        help="latent frames (the README example: --num_output_frames 126)")
    args = parser.parse_args()
    src = os.path.abspath(args.checkout)
    sys.path.insert(0, src)

    if not torch.cuda.is_available():
        torch.cuda.current_device = lambda: 0  # stub: see the docstring
    import safetensors.torch  # noqa: F401  (diffusers' save_pretrained uses it without importing it)
    import diffusers.utils.logging
    diffusers.utils.logging.set_verbosity_error()  # no loading advice on stderr
    from omegaconf import OmegaConf
    from pipeline import CausalInferencePipeline
    from pipeline import rolling_forcing_inference
    import wan.modules.model as wan_model
    import wan.modules.causal_model as causal_model
    from wan.modules.attention import attention as repo_attention

    init_src = inspect.getsource(rolling_forcing_inference.CausalInferencePipeline._initialize_kv_cache)
    if "1560 * 24" not in init_src:
        sys.exit("this checkout's _initialize_kv_cache does not allocate 24 frames; the script assumes it does")
    wan_model.flash_attention = repo_attention  # stub: cross-attention without flash-attn

    config = OmegaConf.merge(OmegaConf.load(os.path.join(src, "configs", "default_config.yaml")),
                             OmegaConf.load(os.path.join(src, "configs", "rolling_forcing_dmd.yaml")))
    torch.manual_seed(0)
    dtype = torch.bfloat16  # inference.py: pipeline.to(dtype=torch.bfloat16)

    class TextEncoder(torch.nn.Module):  # stub for WanTextEncoder
        def __init__(self):
            super().__init__()
            self.embeds = torch.randn(1, TEXT_TOKENS, TEXT_DIM)

        def forward(self, text_prompts):
            return {"prompt_embeds": self.embeds.expand(len(text_prompts), -1, -1).to(dtype)}

    class VAE(torch.nn.Module):  # stub for WanVAEWrapper
        def decode_to_pixel(self, latent, use_cache=False):
            return latent

    home = tempfile.mkdtemp(prefix="rf-entrypoint-")
    tiny = causal_model.CausalWanModel(dim=DIM, ffn_dim=FFN, num_heads=HEADS, num_layers=LAYERS)
    tiny.save_pretrained(os.path.join(home, "wan_models", "Wan2.1-T2V-1.3B"))
    cwd = os.getcwd()
    os.chdir(home)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            pipe = CausalInferencePipeline(config, device=torch.device("cpu"),
                                           text_encoder=TextEncoder(), vae=VAE())
    finally:
        os.chdir(cwd)
    pipe = pipe.to(dtype=dtype)
    model = pipe.generator.model

    fsl = (LATENT_H // 2) * (LATENT_W // 2)
    attns = [blk.self_attn for blk in model.blocks]
    release = attns[0]
    window_frames = release.max_attention_size // release.frame_length  # 21
    block_frames = release.block_length // release.frame_length  # 3
    pipe.num_transformer_blocks = LAYERS
    pipe.frame_seq_length = fsl
    for a in attns:
        a.frame_length, a.block_length, a.max_attention_size = fsl, block_frames * fsl, window_frames * fsl
    head_dim = DIM // HEADS
    pipe.kv_cache_clean = [{
        "k": torch.zeros([1, CACHE_FRAMES * fsl, HEADS, head_dim], dtype=dtype),
        "v": torch.zeros([1, CACHE_FRAMES * fsl, HEADS, head_dim], dtype=dtype),
        "global_end_index": torch.tensor([0], dtype=torch.long),
        "local_end_index": torch.tensor([0], dtype=torch.long),
    } for _ in range(LAYERS)]
    pipe.crossattn_cache = [{"k": None, "v": None, "is_init": False} for _ in range(LAYERS)]

    # instrumentation
    frame_of = [dict() for _ in range(LAYERS)]  # V row bytes -> latent frame
    state = {}
    calls = []  # (layer, updating_cache, current_start_frame, frames read)

    def pre_hook(layer):
        def hook(module, args, kwargs):
            current_start = args[6] if len(args) > 6 else kwargs.get("current_start", 0)
            state.update(layer=layer, start=current_start // fsl,
                         updating=bool(kwargs.get("updating_cache", False)))
        return hook

    def v_hook(module, inputs, output):
        rows = output[0].detach()
        table = frame_of[state["layer"]]
        for i in range(rows.shape[0]):
            table[rows[i].contiguous().view(torch.int16).numpy().tobytes()] = state["start"] + i // fsl

    def attention(q, k, v, **kw):
        table = frame_of[state["layer"]]
        rows = v[0].detach().flatten(1)
        frames = {table.get(rows[i].contiguous().view(torch.int16).numpy().tobytes(), -1)
                  for i in range(rows.shape[0])}
        calls.append((state["layer"], state["updating"], state["start"], frames))
        return repo_attention(q, k, v, **kw)

    for layer, a in enumerate(attns):
        a.register_forward_pre_hook(pre_hook(layer), with_kwargs=True)
        a.v.register_forward_hook(v_hook)
    causal_model.attention = attention

    noise = torch.randn([1, args.frames, 16, LATENT_H, LATENT_W], dtype=dtype)
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        video = pipe.inference_rolling_forcing(noise=noise, text_prompts=["a prompt"])
    assert video.shape[1] == args.frames

    anchor = set(range(block_frames))
    print(f"inference_rolling_forcing: {args.frames} latent frames, blocks of {block_frames}, "
          f"window {len(pipe.denoising_step_list)} blocks, max_attention_size {window_frames} frames, "
          f"cache {CACHE_FRAMES} frames; frames read by layer 0's self-attention")
    print(f"{'window':>6} {'blocks':>7} | {'denoising forward reads':<30} | clean re-run of block: reads")
    layer0 = [c for c in calls if c[0] == 0]
    assert all(-1 not in c[3] for c in calls), "a V row the hook did not see"
    dropped, denoise_missing = [], []
    for w in range(0, len(layer0), 2):
        (_, up0, start0, read0), (_, up1, start1, read1) = layer0[w], layer0[w + 1]
        assert not up0 and up1 and start0 == start1
        blk = start1 // block_frames
        end = max(read0) // block_frames
        if not anchor <= read1:
            dropped.append(blk)
        if not anchor <= read0:
            denoise_missing.append(blk)
        mark = "" if anchor <= read1 else "   <- no anchor"
        print(f"{w // 2:>6} {blk:>3}..{end:<3} | {ranges(read0):<30} | {blk:>3}: {ranges(read1):<17}{mark}".rstrip())
    for layer in range(1, LAYERS):
        assert [c[1:] for c in calls if c[0] == layer] == [c[1:] for c in layer0], "layers differ"
    print(f"clean re-runs without the anchor (frames 0-{block_frames - 1}): "
          f"{len(dropped)} of {len(layer0) // 2}, blocks {ranges(dropped) or 'none'}; "
          f"denoising forwards without it: {ranges(denoise_missing) or 'none'}")
    if dropped:
        print("FAIL: the clean re-run attends without the anchor block")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
