"""LongLive 2.0, through its own inference entry point: with `multi_shot_sink`
and a sink that does not align with the roll, the KV-cache roll evicts the
shot sink pinned at a scene cut.

    python docs/findings/longlive-floating-pin-evicted-entrypoint.py /path/to/LongLive

Runs `CausalDiffusionInferencePipeline.inference` (`pipeline/causal_diffusion_inference.py`,
the call of the README's quick start and of `inference.py`) unmodified, on the
release's `configs/inference.yaml` (through `utils.config.normalize_config`, as
the README does): `local_attn_size` 32, chunks of 8 latent frames, 4 sampling
steps, `multi_shot_sink` on, 128 latent frames (`image_or_video_shape`), with
only `inference.sink_size` changed (4, the release's 8, 12). The prompts are
built by the release's own text dataset (`utils.dataset.MultiTextConcatDataset`,
the one `inference.py` uses) from a directory of two shot captions: 16 chunks,
two shots of 8, the second one starting with the scene-cut prefix at chunk 8
(frames 64..71), which the pipeline pins as the second shot's sink
(`_pin_current_chunk`). The generator is a tiny randomly initialised
`CausalWanModel` that the pipeline builds itself (`WanDiffusionWrapper` loads
`wan_models/Wan2.2-TI2V-5B/` with `CausalWanModel.from_pretrained`; the script
saves the tiny model there, in a temporary directory, and runs from it).

What is not the release's, exactly:

- the generator: dim 48, 4 heads, 2 layers, ffn 96, random weights (instead of
  the 5B checkpoint; no LoRA, as in the README's quick start with a merged
  checkpoint);
- the latent's spatial size: `image_or_video_shape` [1, 128, 48, 4, 4] instead
  of [1, 128, 48, 44, 80], so a frame is 4 tokens (the pipeline derives
  `frame_seq_length` and the attention window from it);
- `utils.config.wan_default_config["Wan2.2-TI2V-5B"]`: `num_heads` 4,
  `head_dim` 12, `num_transformer_blocks` 2 (instead of 24, 128, 30), so that
  the pipeline's own `_initialize_kv_cache` allocates caches that fit the tiny
  model;
- the text encoder: a module that returns random `prompt_embeds` (8 tokens of
  4096 per prompt) instead of UMT5-XXL; the VAE: `decode_to_pixel` returns the
  latents unchanged;
- `torch.cuda.current_device` returns 0 while the checkout is imported on a
  machine without CUDA (`wan_5b/modules/t5.py` calls it in a default argument
  at import; the T5 model is never built), and `torchvision.io.write_video`
  (gone from torchvision 0.29, imported by `pipeline/self_forcing_training.py`
  through `pipeline/__init__.py`, never called here) is a function that raises;
- cross-attention: `wan_5b.modules.causal_model.flash_attention` (flash-attn
  only, CUDA only) is replaced by the checkout's own
  `wan_5b.modules.attention.attention`, which without flash-attn is torch's
  scaled_dot_product_attention, the path the self-attention already takes;
- `LLV2_TRITON_ROPE=0` and `LLV2_TRITON_ADALN=0`: the code's own switches to its
  eager RoPE and adaLN (the Triton kernels need CUDA).

Instrumentation (no behaviour change): a forward hook on layer 0's
self-attention `v` projection records which latent frame each V row belongs
to (from the forward's `current_start`), and the self-attention's `attention`
function is wrapped to map the V rows it reads back to frames (RoPE leaves V
alone; the cache holds copies of the rows). Prints, per chunk after the scene
cut, `pinned_start` (in frames) and the frames the chunk's first denoising
step reads, and exits 1 when a sink size loses the pinned frames.
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

os.environ.setdefault("LLV2_TRITON_ROPE", "0")
os.environ.setdefault("LLV2_TRITON_ADALN", "0")

import torch  # noqa: E402

DIM, HEADS, LAYERS, FFN = 48, 4, 2, 96
LATENT_H, LATENT_W = 4, 4  # patch (1, 2, 2): 4 tokens per frame
TEXT_TOKENS, TEXT_DIM = 8, 4096


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
    parser.add_argument("--sink-sizes", default="4,8,12")
    args = parser.parse_args()
    src = os.path.abspath(args.checkout)
    sys.path.insert(0, src)

    if not torch.cuda.is_available():
        torch.cuda.current_device = lambda: 0  # stub: see the docstring
    import torchvision.io
    if not hasattr(torchvision.io, "write_video"):
        def write_video(*a, **k):  # stub: see the docstring
            raise RuntimeError("write_video is not available")
        torchvision.io.write_video = write_video
    import safetensors.torch  # noqa: F401  (diffusers' save_pretrained uses it without importing it)
    import diffusers.utils.logging
    diffusers.utils.logging.set_verbosity_error()  # no loading advice on stderr
    from omegaconf import OmegaConf
    from pipeline import CausalDiffusionInferencePipeline
    from utils.config import normalize_config, wan_default_config
    from utils.dataset import MultiTextConcatDataset, DEFAULT_SCENE_CUT_PREFIX
    import wan_5b.modules.causal_model as causal_model
    from wan_5b.modules.attention import attention as repo_attention

    causal_model.flash_attention = repo_attention  # stub: cross-attention without flash-attn
    release = dict(wan_default_config["Wan2.2-TI2V-5B"])
    wan_default_config["Wan2.2-TI2V-5B"].update(num_heads=HEADS, head_dim=DIM // HEADS,
                                                num_transformer_blocks=LAYERS)
    dtype = torch.bfloat16  # the README: pipe.to(dtype=torch.bfloat16)

    class TextEncoder(torch.nn.Module):  # stub for WanTextEncoder
        def forward(self, text_prompts):
            return {"prompt_embeds": torch.randn(len(text_prompts), TEXT_TOKENS, TEXT_DIM).to(dtype)}

    class VAE(torch.nn.Module):  # stub for the Wan 2.2 VAE
        def decode_to_pixel(self, latent, use_cache=False):
            return latent

    home = tempfile.mkdtemp(prefix="longlive-entrypoint-")
    torch.manual_seed(0)
    tiny = causal_model.CausalWanModel(model_type="ti2v", in_dim=48, out_dim=48, dim=DIM, ffn_dim=FFN,
                                       num_heads=HEADS, num_layers=LAYERS)
    tiny.save_pretrained(os.path.join(home, "wan_models", "Wan2.2-TI2V-5B"))
    shots = os.path.join(home, "prompts", "caption", "sample")
    os.makedirs(shots)
    for i, caption in enumerate(["A robot walks through a lab.", "The robot stands on a beach."]):
        with open(os.path.join(shots, f"{i}.json"), "w") as f:
            json.dump({"caption": caption}, f)

    calls = []  # (current_start_frame, pinned_start_frame, frames read) for layer 0's forwards
    state = {}
    frame_of = {}  # layer 0 V row bytes -> latent frame

    def key(row):
        return row.contiguous().view(torch.int16).numpy().tobytes()

    def run(sink_size):
        config = OmegaConf.load(os.path.join(src, "configs", "inference.yaml"))
        config.inference.sink_size = sink_size
        config.data.image_or_video_shape[3], config.data.image_or_video_shape[4] = LATENT_H, LATENT_W
        config = normalize_config(config)
        frames = int(config.image_or_video_shape[1])
        chunk = int(config.num_frame_per_block)
        dataset = MultiTextConcatDataset(data_path=os.path.join(home, "prompts"), num_blocks=frames // chunk,
                                         scene_cut_prefix=DEFAULT_SCENE_CUT_PREFIX, deterministic=True)
        prompts = [list(dataset[0]["prompts"])]
        cuts = [i for i, p in enumerate(prompts[0]) if p.startswith(DEFAULT_SCENE_CUT_PREFIX)]
        cwd = os.getcwd()
        os.chdir(home)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                pipe = CausalDiffusionInferencePipeline(config, device=torch.device("cpu"),
                                                        text_encoder=TextEncoder(), vae=VAE())
        finally:
            os.chdir(cwd)
        pipe = pipe.to(dtype=dtype)
        pipe.generator.model.eval().requires_grad_(False)
        fsl = pipe.frame_seq_length
        attn0 = pipe.generator.model.blocks[0].self_attn
        calls.clear()
        frame_of.clear()

        def pre_hook(module, a, kw):
            state["start"] = a[6] // fsl
            cache = a[5]
            state["pin"] = int(cache["pinned_start"]) // fsl if int(cache["pinned_len"]) > 0 else None
            state["layer0"] = True

        def post_hook(module, a, kw, out):
            state["layer0"] = False

        def v_hook(module, inputs, output):
            rows = output[0].detach()
            for i in range(rows.shape[0]):
                frame_of[key(rows[i])] = state["start"] + i // fsl

        def attention(q, k, v, **kw):
            if state.get("layer0"):
                rows = v[0].detach().flatten(1)
                calls.append((state["start"], state["pin"],
                              {frame_of.get(key(rows[i]), -1) for i in range(rows.shape[0])}))
            return repo_attention(q, k, v, **kw)

        handles = [attn0.register_forward_pre_hook(pre_hook, with_kwargs=True),
                   attn0.register_forward_hook(post_hook, with_kwargs=True),
                   attn0.v.register_forward_hook(v_hook)]
        causal_model.attention = attention
        noise = torch.randn([1, frames, 48, LATENT_H, LATENT_W], dtype=dtype)
        try:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                video = pipe.inference(noise=noise, text_prompts=prompts)
        finally:
            for h in handles:
                h.remove()
        assert video.shape[1] == frames
        assert all(-1 not in c[2] for c in calls), "a V row the hook did not see"
        return pipe, frames, chunk, cuts, list(calls)

    failed = []
    for sink_size in [int(s) for s in args.sink_sizes.split(",")]:
        pipe, frames, chunk, cuts, seen = run(sink_size)
        steps = pipe.sampling_steps
        per_chunk = steps + 1  # the denoising steps and the clean re-cache
        assert len(seen) == per_chunk * (frames // chunk)
        cut = cuts[0]
        pin_len = min(sink_size, chunk)
        shot = set(range(cut * chunk, cut * chunk + pin_len))
        print(f"sink_size={sink_size} multi_shot_sink local_attn_size={pipe.local_attn_size} chunks of {chunk}, "
              f"{frames} frames, scene cut at chunk {cut} (frames {cut * chunk}..{cut * chunk + chunk - 1}), "
              f"shot sink frames {ranges(shot)}:")
        lost = []
        for c in range(cut + 1, frames // chunk):
            start, pin, read = seen[c * per_chunk]  # the chunk's first denoising step
            assert start == c * chunk
            kept = shot <= read
            if not kept:
                lost.append(c)
            print(f"  chunk {c:>2} (frames {start}..{start + chunk - 1}): pinned_start before the roll "
                  f"{'-' if pin is None else pin:>2}, reads {ranges(read)}"
                  f"{'' if kept else '   <- shot sink not read'}")
        verdict = (f"shot sink EVICTED from chunk {lost[0]} on ({len(lost)} of {frames // chunk - cut - 1} later chunks)"
                   if lost else "shot sink read by every later chunk")
        print(f"  {verdict}")
        if lost:
            failed.append(sink_size)
    print(f"(release model geometry replaced: {release['num_heads']} heads of {release['head_dim']}, "
          f"{release['num_transformer_blocks']} layers -> {HEADS} of {DIM // HEADS}, {LAYERS})")
    if failed:
        print(f"FAIL: the roll evicts the pinned shot sink with sink_size {', '.join(map(str, failed))}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
