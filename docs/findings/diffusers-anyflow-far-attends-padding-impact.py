"""diffusers AnyFlow-FAR: what attending to the zero padding costs at the
released geometry.

AnyFlowCausalAttnProcessor pads query, key and value with zero rows to a
multiple of 128 tokens and, in the autoregressive forward
(`_forward_inference`, every denoising step with the default
use_kv_cache=True), attends without a mask, so each query's softmax also
covers (-L) mod 128 zero keys (L: the chunk's token count). This script
measures that on AnyFlowFARTransformer3DModel built with the released
1.3B checkpoint's config (AnyFlow-FAR-Wan2.1-1.3B: Wan2.1-T2V-1.3B's
transformer, 12 heads x 128 = 1536 wide, ffn 8960, 30 blocks, plus the FAR
settings chunk_partition (1,3,3,3,3,3,3,2), full_chunk_limit 3,
compressed patch (1,4,4)) and random weights (torch.manual_seed), on the
CPU in float32, at 480x832 (60x104 latents, 1,560 tokens a frame, 390 a
compressed frame).

For each chunk asked for, the model's own forward runs twice on the same
inputs and the same KV cache:
  release: the library as released (the padding attended);
  patched: the processor's attention called on the real rows only, which
           is what the patch (diffusers-anyflow-far-attends-padding.diff,
           padded_length = 0 when attention_mask is None) makes the
           processor do: the same backend call without the padded rows.
The cache of a later chunk is written by the library's cache-prefill
forward (the masked path the pipeline's encode_kv_cache takes) from random
latents of the earlier frames; it is the same for both runs.

Printed per self-attention layer of the release run: the softmax mass the
zero keys take (mean and max over real queries and heads); the relative L2
difference of that layer's attention output against the same call without
the padding; how large the self-attention update (attn1's output times
gate_msa) is against the block's input; then, over the whole forward, the
relative L2 difference of every block's output and of the predicted
velocity (the model's sample) between the release and patched runs.

The other inputs are random too: the chunk's latents (N(0,1), the noise of
a first step), the text embeddings (N(0,1), 512 x 4096, in place of
UMT5's), and the earlier frames the cache is written from. The timestep
pair is the first step of the documented 4-step schedule (t = 1000,
r = 937.5). Batch 1: the default guidance_scale 1.0 runs no
unconditional branch.

    python diffusers-anyflow-far-attends-padding-impact.py [--chunks 0,1] [--layers 30]
        [--save FILE] [--compare FILE]

--save writes the patched run's samples; --compare FILE, run on a library
with the patch applied, compares that library's own output with them.
"""

import argparse
import math
import time
import warnings

import diffusers
import torch
import torch.nn.functional as F
from diffusers import AnyFlowFARTransformer3DModel, FlowMapEulerDiscreteScheduler
from diffusers.models.transformers import transformer_anyflow_far as far

# AnyFlow-FAR-Wan2.1-1.3B: Wan2.1-T2V-1.3B's transformer config with the FAR settings.
CONFIG_1_3B = dict(
    patch_size=(1, 2, 2),
    compressed_patch_size=(1, 4, 4),
    full_chunk_limit=3,
    num_attention_heads=12,
    attention_head_dim=128,
    in_channels=16,
    out_channels=16,
    text_dim=4096,
    freq_dim=256,
    ffn_dim=8960,
    num_layers=30,
    cross_attn_norm=True,
    eps=1e-6,
    gate_value=0.25,
    deltatime_type="r",
    chunk_partition=(1, 3, 3, 3, 3, 3, 3, 2),
)
LATENT_H, LATENT_W = 480 // 8, 832 // 8  # VAE spatial stride 8
TEXT_TOKENS = 512  # max_sequence_length

parser = argparse.ArgumentParser()
parser.add_argument("--chunks", default="0", help="chunk indices to measure (0: the first chunk, empty cache)")
parser.add_argument("--layers", type=int, default=30, help="transformer blocks (the released 1.3B has 30)")
parser.add_argument("--save", help="write the patched run's samples here")
parser.add_argument("--compare", help="compare this library's output with samples --save wrote")
args = parser.parse_args()
chunks = [int(c) for c in args.chunks.split(",")]

torch.set_grad_enabled(False)
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
print("diffusers", diffusers.__version__, "torch", torch.__version__, "threads", torch.get_num_threads())

# ---- the padding, measured where the library calls the attention backend ----
original_dispatch = far.dispatch_attention_fn
mode = "release"
records = []


def trailing_zero_rows(key):
    """How many trailing rows of key (B, L, H, D) are exactly zero: the padding (a real key never is)."""
    nonzero = key.abs().amax(dim=(0, 2, 3)) != 0
    idx = torch.nonzero(nonzero)
    return key.shape[1] - (int(idx[-1]) + 1 if len(idx) else 0)


def dispatch(query, key, value, attn_mask=None, scale=None, backend=None, **kwargs):
    if backend != "flex" or attn_mask is not None:  # cross-attention, or the masked prefill
        return original_dispatch(query, key, value, attn_mask=attn_mask, scale=scale, backend=backend, **kwargs)
    pad = trailing_zero_rows(key)
    lq, lk = query.shape[1] - pad, key.shape[1] - pad  # real queries, real keys
    released = original_dispatch(query, key, value, attn_mask=None, scale=scale, backend=backend, **kwargs)
    real = original_dispatch(
        query[:, :lq], key[:, :lk], value[:, :lk], attn_mask=None, scale=scale, backend=backend, **kwargs
    )
    # softmax mass on the zero keys, per real query and head
    s = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    masses = []
    for h in range(query.shape[2]):
        q = query[:, :lq, h].float()
        k = key[:, :, h].float()
        p = torch.softmax((q @ k.transpose(1, 2)) * s, dim=-1)
        masses.append(p[..., lk:].sum(-1))
    mass = torch.stack(masses, dim=-1)  # (B, lq, H)
    diff = (released[:, :lq] - real).flatten().norm() / real.flatten().norm()
    if mode == "release":
        records.append(
            dict(pad=pad, queries=lq, keys=lk, mass_mean=mass.mean().item(), mass_max=mass.max().item(),
                 attn_rel=diff.item())
        )
    if mode == "patched":
        return F.pad(real, (0, 0, 0, 0, 0, query.shape[1] - lq))  # the processor trims the rows again
    return released


far.dispatch_attention_fn = dispatch

# ---- the model ----
cfg = dict(CONFIG_1_3B, num_layers=args.layers)
torch.manual_seed(0)
t0 = time.time()
model = AnyFlowFARTransformer3DModel(**cfg).eval()
print("model: %d blocks, %d heads x %d, ffn %d, %.2fG parameters, random (seed 0), built in %.0f s" % (
    cfg["num_layers"], cfg["num_attention_heads"], cfg["attention_head_dim"], cfg["ffn_dim"],
    sum(p.numel() for p in model.parameters()) / 1e9, time.time() - t0))

# every block's output, and how large the self-attention update (attn1 output x gate_msa) is against the
# block's input hidden states (with random weights the gate is small: see the printed column)
block_outputs, attn_share = [], []
pending = {}


def block_pre(mod, inp):
    hidden, temb = inp[0], inp[2]
    pending["hidden"] = hidden.float().flatten().norm()
    pending["gate"] = (mod.scale_shift_table + temb.float()).chunk(6, dim=2)[2].squeeze(2)


def attn1_out(mod, inp, out):
    attn_share.append(((out * pending["gate"]).flatten().norm() / pending["hidden"]).item())


for block in model.blocks:
    block.register_forward_pre_hook(block_pre)
    block.attn1.register_forward_hook(attn1_out)
    block.register_forward_hook(lambda mod, inp, out: block_outputs.append(out.detach().clone()))

partition = list(cfg["chunk_partition"])
per_frame = (LATENT_H // 2) * (LATENT_W // 2)
per_compressed = (LATENT_H // 4) * (LATENT_W // 4)
scheduler = FlowMapEulerDiscreteScheduler(num_train_timesteps=1000, shift=5.0)  # as the converter builds it
scheduler.set_timesteps(4)  # the documented example's num_inference_steps
t_first = scheduler.timesteps[0].float()
r_first = (scheduler.sigmas[1] * scheduler.config.num_train_timesteps).float()

g = torch.Generator().manual_seed(1)
frames = torch.randn(1, sum(partition), 16, LATENT_H, LATENT_W, generator=g)  # (B, F, C, H, W)
prompt_embeds = torch.randn(1, TEXT_TOKENS, 4096, generator=g)


def new_cache(c):
    # the pipeline's layout (use_kv_cache=True, batch 1: guidance_scale 1.0), sized to the rows chunk c reads
    # (the pipeline allocates room for the longest chunk; the rows past those read do not take part)
    compressed_chunks = max(0, c + 1 - cfg["full_chunk_limit"])
    full = sum(partition[compressed_chunks:c]) * per_frame
    comp = sum(partition[:compressed_chunks]) * per_compressed
    return {
        i: {
            "full_cache": torch.zeros(2, 1, cfg["num_attention_heads"], full, cfg["attention_head_dim"]),
            "compressed_cache": torch.zeros(2, 1, cfg["num_attention_heads"], comp, cfg["attention_head_dim"]),
        }
        for i in range(cfg["num_layers"])
    }


def rel(a, b):
    return ((a - b).flatten().norm() / b.flatten().norm()).item()


saved = {}
reference = torch.load(args.compare) if args.compare else None
for c in chunks:
    t0 = time.time()
    kv_cache = new_cache(c)
    kv_flag = {"num_cached_chunks": 0, "is_cache_step": False}
    if c > 0:
        # what the pipeline's encode_kv_cache runs after chunk c-1: the masked prefill of all earlier frames
        done = sum(partition[:c])
        latents = frames[:, :done]
        zeros = torch.zeros(1, done)
        mask = model.build_attention_mask(chunk_partition=partition[:c], height=LATENT_H, width=LATENT_W, mode="cache",
                                          device=latents.device)
        flag = dict(kv_flag, is_cache_step=True)
        model(hidden_states=latents, timestep=zeros, r_timestep=zeros, encoder_hidden_states=prompt_embeds,
              chunk_partition=partition[:c], kv_cache=kv_cache, kv_cache_flag=flag, attention_mask=mask,
              return_dict=False)
        kv_flag["num_cached_chunks"] = c
    start = sum(partition[:c])
    chunk = frames[:, start:start + partition[c]]
    t = t_first.expand(1, partition[c]).clone()
    r = r_first.expand(1, partition[c]).clone()
    prefill_s = time.time() - t0

    outs = {}
    for m in ("release", "patched"):
        mode = m
        block_outputs.clear()
        attn_share.clear()
        sample, _ = model(hidden_states=chunk, timestep=t, r_timestep=r, encoder_hidden_states=prompt_embeds,
                          chunk_partition=partition[: c + 1], kv_cache=kv_cache,
                          kv_cache_flag=dict(kv_flag), return_dict=False)
        outs[m] = (sample, list(block_outputs))
        if m == "release":
            layer_records = records[-cfg["num_layers"]:]
            layer_share = list(attn_share)
    mode = "release"
    tokens = partition[c] * per_frame
    rec0 = layer_records[0]
    print("\nchunk %d (%d frames): %d query tokens, %d real keys (%d cached), %d zero keys attended; "
          "prefill %.0f s, 2 forwards %.0f s" % (
              c, partition[c], tokens, rec0["keys"], rec0["keys"] - tokens, rec0["pad"], prefill_s,
              time.time() - t0 - prefill_s))
    print("  layer  zero-key mass: mean    max   attention output   |attn update| /   block output rel. diff")
    print("                                       rel. diff          |block input|     (cumulative)")
    for i, rec in enumerate(layer_records):
        print("  %5d  %17.4f  %6.4f  %16.3g  %15.3g  %22.3g" % (
            i, rec["mass_mean"], rec["mass_max"], rec["attn_rel"], layer_share[i],
            rel(outs["release"][1][i], outs["patched"][1][i])))
    means = [rec["mass_mean"] for rec in layer_records]
    print("  all layers: zero-key mass mean %.4f (layers %.4f..%.4f), max %.4f; attention output rel. diff %.3g..%.3g"
          % (sum(means) / len(means), min(means), max(means), max(rec["mass_max"] for rec in layer_records),
             min(rec["attn_rel"] for rec in layer_records), max(rec["attn_rel"] for rec in layer_records)))
    rs, ps = outs["release"][0], outs["patched"][0]
    print("  predicted velocity (model sample %s): rel. L2 release vs patched %.3g, max |diff| %.3g (max |sample| %.3g)"
          % (tuple(ps.shape), rel(rs, ps), (rs - ps).abs().max(), ps.abs().max()))
    saved[c] = ps
    if reference is not None:
        ref = reference[c]
        print("  this library's own output (release run above) vs the saved patched run: max |diff| %.3g, rel. L2 %.3g"
              % ((rs - ref).abs().max(), rel(rs, ref)))

if args.save:
    torch.save(saved, args.save)
