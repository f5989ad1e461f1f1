"""Rolling Forcing: the clean re-run of a block attends without the anchor.

    python docs/findings/rollingforcing-rerun-drops-anchor.py /path/to/RollingForcing

Uses only the checkout's `wan/modules/causal_model.py` (and torch, with
diffusers and einops, which the module imports). One self-attention module
with the release's block of 3 frames and one token per frame, an attention
window (`max_attention_size`) of 6 frames and a cache of 9 (the release:
21 and 24 frames of 1560 tokens). Each block is run as the pipeline runs
it with a one-block window: a denoising forward, then the clean re-run
with `updating_cache=True`. The frames each attention call reads are
recognised by their V rows (RoPE leaves V alone). Exits 1 when a clean
re-run reads without the anchor (frames 0..2) while the denoising forward
of the same block reads it.
"""

import os
import sys
import types

import torch


def load(checkout):
    sys.path.insert(0, checkout)
    # The `wan` package __init__ imports the T5 encoder and the VAE; the
    # cache code needs neither.
    for name, path in (("wan", "wan"), ("wan.modules", os.path.join("wan", "modules"))):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(checkout, path)]
        sys.modules[name] = module
    from wan.modules import causal_model

    return causal_model


def main(checkout):
    cm = load(checkout)
    torch.manual_seed(0)
    reads = []
    real = cm.attention

    def attention(q, k, v, **kw):
        reads.append(v.clone())
        return real(q, k, v, **dict(kw, dtype=q.dtype))  # the CPU fallback, in the rows' dtype

    cm.attention = attention
    dim, block, window, size = 12, 3, 6, 9
    attn = cm.CausalWanSelfAttention(dim, num_heads=1).eval()
    attn.frame_length, attn.block_length, attn.max_attention_size = 1, block, window
    d = dim  # one head
    freqs = torch.cat([cm.rope_params(1024, d - 4 * (d // 6)), cm.rope_params(1024, 2 * (d // 6)),
                       cm.rope_params(1024, 2 * (d // 6))], dim=1)
    grid = torch.tensor([[block, 1, 1]])
    cache = {"k": torch.zeros(1, size, 1, d), "v": torch.zeros(1, size, 1, d),
             "global_end_index": torch.tensor([0]), "local_end_index": torch.tensor([0])}
    rows = {}  # frame -> its V row
    bad = False
    with torch.no_grad():
        for b in range(4):
            start = b * block
            x = torch.randn(1, block, dim)
            v = attn.v(x)
            for i in range(block):
                rows[start + i] = v[0, i]
            seen = []
            for rerun in (False, True):
                reads.clear()
                attn(x, torch.tensor([block]), grid, freqs, None, kv_cache=cache,
                     current_start=start, updating_cache=rerun)
                read = reads[-1][0, :, 0]
                frames = [f for row in read for f, r in rows.items() if torch.equal(row, r)]
                seen.append(frames)
            print("block %d: denoising reads frames %s, clean re-run reads %s" % (b, seen[0], seen[1]))
            if 0 in seen[0] and 0 not in seen[1]:
                bad = True
    if bad:
        print("FAIL: the clean re-run attends without the anchor block (frames 0..2)")
        return 1
    print("ok: every read that includes the anchor in the denoising step includes it in the clean re-run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ROLLINGFORCING_SRC", ".")))
