"""RotatingKVCache(keep > 0) with a sliding window smaller than max_size: the
one-token mask is rolled as if keep were 0, so once the cache has rotated a
decode step does not read its own key and reads rows outside its window.
Needs only mlx and mlx-lm (pip install mlx-lm "mlx[cpu]")."""

import mlx.core as mx
from mlx_lm.models.cache import KVCache, RotatingKVCache

D = 4  # head_dim


def tagged(start, n):
    """Keys/values of positions start..start+n-1, shape [B=1, H=1, n, D];
    every element of a row holds its position, so a row names itself."""
    pos = mx.arange(start, start + n, dtype=mx.float32).reshape(1, 1, n, 1)
    return mx.broadcast_to(pos, (1, 1, n, D))


def step(cache, start, n, window):
    """One forward pass as a model makes it: make_mask, then update_and_fetch.
    Returns the positions the last query reads and its attention output."""
    mask = cache.make_mask(n, window_size=window, return_array=False)
    keys, values = cache.update_and_fetch(tagged(start, n), tagged(start, n))
    columns = [int(p) for p in keys[0, 0, :, 0].tolist()]
    if mask is None or isinstance(mask, str):  # None / "causal": the last query reads every key
        read = columns
    else:
        read = [p for p, ok in zip(columns, mask.reshape(-1, mask.shape[-1])[-1].tolist()) if ok]
    query = mx.zeros((1, 1, n, D))  # equal scores: the output is the mean of the rows read
    out = mx.fast.scaled_dot_product_attention(query, keys, values, scale=1.0, mask=mask)
    return sorted(read), out[0, 0, -1, 0].item()


WINDOW = 4
for name, cache in (
    ("RotatingKVCache(max_size=6, keep=2)", RotatingKVCache(max_size=6, keep=2)),
    ("RotatingKVCache(max_size=6, keep=0)", RotatingKVCache(max_size=6, keep=0)),
    ("KVCache()", KVCache()),
):
    print("%s, window_size=%d: prompt of 6 tokens, then one token at a time" % (name, WINDOW))
    step(cache, 0, 6, WINDOW)
    for position in range(6, 10):
        read, out = step(cache, position, 1, WINDOW)
        print("  position %d reads %-16s attention output %.4f" % (position, read, out))
