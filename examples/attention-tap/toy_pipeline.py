"""A toy chunk-by-chunk video pipeline with a Self-Forcing-style inline KV cache.

A tiny randomly initialised causal transformer (no weights to download, CPU):
every block keeps its cache as a dict

    {"k": tensor[B, C, H, D], "v": tensor[B, C, H, D],
     "global_end_index": int, "local_end_index": int}

and updates it inside its attention forward, the way Self-Forcing's
`CausalWanSelfAttention` does: the first `sink` slots keep the first
positions, the other slots roll left when a chunk needs room, and the new
rows land at `local_end_index`. Attention then reads the slots in use.

Each autoregressive chunk is one `generate_chunk(start, k, v)` at the global
end; each denoising step of that chunk is the same call again at the same
start (a rewrite); `regenerate_from(position)` drops the positions from
there on, `drop_oldest(frames)` the oldest ones after the sink, and
`reset()` starts the next video. The chunk's K/V are
given (`k`, `v`: `[B, n, H, D]`): the block's K/V "projection" is the
identity on them, so what lands in the cache is known exactly.

`bug` plants a bookkeeping bug:

- `sink-rolled-out`: the roll starts at slot 0, so the sink rolls out;
- `evict-one-more`: the roll evicts one position more than the chunk needs;
- `reads-one-past-end`: attention reads one slot past `local_end_index`;
- `query-position-local`: the queries are rotated by their slot in the
  cache instead of their position (the rows read stay right; only the
  outputs show it, once the cache has rolled).

The queries carry their position as a rotation (a RoPE on the query side
only, so the cached K/V stay the given rows). `full_forward` is the
pipeline's cache-free path: the chunk's queries over the kept positions'
K/V at once, under the mask `reads(position, end)` (the sink, and the
latest `capacity - sink` positions before the end), with no cache and no
slots: the recompute that the cached path must agree with.

`masked=True` makes attention read the whole buffer and hide the unused
slots with a boolean mask, as padded-cache implementations do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BUGS = ("sink-rolled-out", "evict-one-more", "reads-one-past-end", "query-position-local")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class PayloadKV(nn.Module):
    """The block's K/V projection: the identity on the given rows."""

    def forward(self, k: torch.Tensor, v: torch.Tensor) -> tuple:
        return k, v


class CausalSelfAttention(nn.Module):
    def __init__(self, heads: int, head_dim: int, sink: int, dtype: torch.dtype, generator: torch.Generator,
                 masked: bool = False, bug: str | None = None) -> None:
        super().__init__()
        hidden = heads * head_dim
        self.heads, self.head_dim, self.sink_size = heads, head_dim, sink
        self.masked, self.bug = masked, bug
        self.q = random_linear(hidden, dtype, generator)
        self.o = random_linear(hidden, dtype, generator)
        self.kv = PayloadKV()

    def forward(self, x: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, kv_cache: dict,
                current_start: int) -> torch.Tensor:
        b, n, _ = x.shape
        k, v = self.kv(k_in, v_in)

        current_end = current_start + n
        sink_tokens = self.sink_size
        kv_cache_size = kv_cache["k"].shape[1]
        global_end = kv_cache["global_end_index"]
        local_end = kv_cache["local_end_index"]
        # Slots [0, sink) hold positions [0, sink); slots [sink, local_end)
        # hold the positions [first_rolled, global_end).
        first_rolled = sink_tokens + global_end - local_end
        if current_start > global_end:
            raise ValueError("chunk %d..%d starts past the end %d" % (current_start, current_end, global_end))
        if any(sink_tokens <= p < first_rolled for p in range(current_start, min(current_end, global_end))):
            raise ValueError("chunk %d..%d rewrites rolled-out positions (oldest kept: %d)"
                             % (current_start, current_end, first_rolled))
        num_new_tokens = max(0, current_end - global_end)
        num_evicted_tokens = max(0, num_new_tokens + local_end - kv_cache_size)
        if num_evicted_tokens and self.bug == "evict-one-more":
            num_evicted_tokens += 1
        if num_evicted_tokens > max(0, current_start - first_rolled):
            raise ValueError("chunk %d..%d does not fit beside the sink (cache of %d)"
                             % (current_start, current_end, kv_cache_size))
        if num_evicted_tokens:
            # Shift the rolling part left over the evicted positions.
            roll_from = 0 if self.bug == "sink-rolled-out" else sink_tokens
            num_rolled_tokens = local_end - num_evicted_tokens - roll_from
            for name in ("k", "v"):
                kv_cache[name][:, roll_from:roll_from + num_rolled_tokens] = kv_cache[name][
                    :, roll_from + num_evicted_tokens:roll_from + num_evicted_tokens + num_rolled_tokens
                ].clone()
        if current_end <= sink_tokens:
            # Sink frames stay in their own slots.
            local_start_index, local_end_index = current_start, current_end
        else:
            local_end_index = local_end + current_end - global_end - num_evicted_tokens
            local_start_index = local_end_index - n
        first_query = local_start_index if self.bug == "query-position-local" else current_start
        q = rotate(self.q(x).view(b, n, self.heads, self.head_dim), torch.arange(first_query, first_query + n))
        kv_cache["k"][:, local_start_index:local_end_index] = k
        kv_cache["v"][:, local_start_index:local_end_index] = v
        kv_cache["global_end_index"] = max(global_end, current_end)
        kv_cache["local_end_index"] = max(local_end - num_evicted_tokens, local_end_index)

        end = kv_cache["local_end_index"] + (1 if self.bug == "reads-one-past-end" else 0)
        end = min(end, kv_cache_size)
        if self.masked:
            keys, values = kv_cache["k"], kv_cache["v"]
            mask = (torch.arange(kv_cache_size) < end).view(1, 1, 1, kv_cache_size)
        else:
            keys, values = kv_cache["k"][:, :end], kv_cache["v"][:, :end]
            mask = None
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask
        )
        return x + self.o(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))

    def full_forward(self, x: torch.Tensor, positions: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor,
                     keys: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The cache-free path: the queries of `x` at `positions` over every
        key of `keys` (positions) with rows `k_in`, `v_in`, where `mask`
        (`[keys]`, True reads; the same for every query of the chunk)
        allows."""
        b, n, _ = x.shape
        q = rotate(self.q(x).view(b, n, self.heads, self.head_dim), positions)
        k, v = self.kv(k_in, v_in)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask.view(1, 1, 1, keys.numel())
        )
        return x + self.o(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


def rotate(q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """`q` (`[B, n, H, D]`) with each pair of channels rotated by its
    position's angle: a rotary position embedding of the queries."""
    half = q.shape[-1] // 2
    if half == 0:
        return q
    frequencies = 1.0 / (100.0 ** (torch.arange(half, dtype=torch.float32) / half))
    angles = positions.to(torch.float32).view(-1, 1) * frequencies.view(1, -1)  # [n, half]
    cos = angles.cos().view(1, -1, 1, half).to(q.dtype)
    sin = angles.sin().view(1, -1, 1, half).to(q.dtype)
    first, second = q[..., :half], q[..., half : 2 * half]
    turned = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return torch.cat((turned, q[..., 2 * half :]), dim=-1)


class ToyTransformer(nn.Module):
    def __init__(self, blocks: int, heads: int, head_dim: int, sink: int, dtype: torch.dtype,
                 generator: torch.Generator, masked: bool = False, bug: str | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            CausalSelfAttention(heads, head_dim, sink, dtype, generator, masked, bug) for _ in range(blocks)
        )

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: list,
                current_start: int) -> torch.Tensor:
        for block, cache in zip(self.blocks, kv_cache):
            x = block(x, k, v, cache, current_start)
        return x

    def full_forward(self, x: torch.Tensor, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     keys: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block.full_forward(x, positions, k, v, keys, mask)
        return x


class ToyPipeline:
    """The model, its per-block cache dicts, and the chunk loop's steps."""

    def __init__(self, batch: int, heads: int, head_dim: int, capacity: int, sink: int, dtype: str = "f32",
                 blocks: int = 2, masked: bool = False, bug: str | None = None, seed: int = 0) -> None:
        if bug is not None and bug not in BUGS:
            raise ValueError("unknown bug %r (one of %s)" % (bug, ", ".join(BUGS)))
        self.batch, self.heads, self.head_dim = batch, heads, head_dim
        self.dtype = DTYPES[dtype]
        self.generator = torch.Generator().manual_seed(seed)
        self.model = ToyTransformer(blocks, heads, head_dim, sink, self.dtype, self.generator, masked, bug)
        self.kv_cache = [
            {
                "k": torch.zeros(batch, capacity, heads, head_dim, dtype=self.dtype),
                "v": torch.zeros(batch, capacity, heads, head_dim, dtype=self.dtype),
                "global_end_index": 0,
                "local_end_index": 0,
            }
            for _ in range(blocks)
        ]

    def generate_chunk(self, start: int, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One forward over the chunk of positions `start, ...` whose K/V
        rows are `k`, `v` (`[B, n, H, D]`): an AR step at the end, or a
        denoising step (rewrite) of a chunk in the cache."""
        with torch.no_grad():
            return self.model(self.hidden(k), k, v, self.kv_cache, start)

    def hidden(self, k: torch.Tensor) -> torch.Tensor:
        """The chunk's hidden state entering the first block: its K rows,
        flattened (the same in the cached and the cache-free path)."""
        return k.reshape(k.shape[0], k.shape[1], self.heads * self.head_dim).to(self.dtype)

    def reads(self, position: int, end: int) -> bool:
        """Whether a chunk whose writes bring the global end to `end` reads
        `position`: the sink, and the latest `capacity - sink` positions."""
        sink = self.model.blocks[0].sink_size
        return position < sink or position >= end - (self.capacity - sink)

    @property
    def capacity(self) -> int:
        return self.kv_cache[0]["k"].shape[1]

    def full_forward(self, start: int, k: torch.Tensor, keys: list, k_rows: torch.Tensor,
                     v_rows: torch.Tensor, end: int) -> torch.Tensor:
        """The cache-free path: the chunk of positions `start, ...` (K rows
        `k`, which are its hidden state too) attends the kept positions
        `keys` (ascending; rows `k_rows`, `v_rows`, `[B, len(keys), H, D]`)
        under `reads(key, end)`, with no cache involved."""
        n = k.shape[1]
        positions = torch.arange(start, start + n)
        # One mask row for every query: it exists for a chunk of no rows too.
        mask = torch.tensor([self.reads(key, end) for key in keys], dtype=torch.bool)
        with torch.no_grad():
            return self.model.full_forward(self.hidden(k), positions, k_rows, v_rows, torch.tensor(keys), mask)

    def regenerate_from(self, position: int) -> None:
        """Drops every position from `position` on (the chunks after it will
        be generated again)."""
        for cache in self.kv_cache:
            global_end, local_end = cache["global_end_index"], cache["local_end_index"]
            if not 0 <= position <= global_end:
                raise ValueError("cannot regenerate from %d: the end is %d" % (position, global_end))
            sink = self.model.blocks[0].sink_size
            first_rolled = sink + global_end - local_end
            if position >= first_rolled:
                cache["local_end_index"] = local_end - (global_end - position)
            else:  # the rolling slots empty; the sink frames before `position` stay
                cache["local_end_index"] = min(position, sink)
            cache["global_end_index"] = position

    def drop_oldest(self, frames: int) -> None:
        """Drops the `frames` oldest positions after the sink (the global end stays)."""
        sink = self.model.blocks[0].sink_size
        for cache in self.kv_cache:
            local_end = cache["local_end_index"]
            if not 0 <= frames <= max(0, local_end - sink):
                raise ValueError("cannot drop %d frames: %d after the sink" % (frames, max(0, local_end - sink)))
            roll_from = 0 if self.model.blocks[0].bug == "sink-rolled-out" else sink
            kept = local_end - frames - roll_from
            for name in ("k", "v"):
                cache[name][:, roll_from:roll_from + kept] = cache[name][
                    :, roll_from + frames:roll_from + frames + kept
                ].clone()
            cache["local_end_index"] = local_end - frames

    def reset(self) -> None:
        """The next video: the indices go back to 0 (the buffers keep their
        old rows, as Self-Forcing's reset leaves them)."""
        for cache in self.kv_cache:
            cache["global_end_index"] = 0
            cache["local_end_index"] = 0


def random_linear(width: int, dtype: torch.dtype, generator: torch.Generator) -> nn.Linear:
    layer = nn.Linear(width, width, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(width, width, generator=generator) / width ** 0.5)
        layer.bias.zero_()
    return layer
