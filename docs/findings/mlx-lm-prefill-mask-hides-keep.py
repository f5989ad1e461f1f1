"""RotatingKVCache(keep > 0): a multi-token step's mask hides the keep tokens
that a one-token step attends, so what a query reads depends on how the
prompt was chunked. Needs only mlx and mlx-lm (pip install mlx-lm "mlx[cpu]")."""

import mlx.core as mx
from mlx_lm.models.cache import RotatingKVCache

D = 4  # head_dim


def tagged(start, n):
    """Keys/values of positions start..start+n-1, shape [B=1, H=1, n, D];
    every element of a row holds its position, so a row names itself."""
    pos = mx.arange(start, start + n, dtype=mx.float32).reshape(1, 1, n, 1)
    return mx.broadcast_to(pos, (1, 1, n, D))


def run(chunks, max_size, keep):
    """Feeds positions 0..sum(chunks)-1 in `chunks` the way a model does
    (make_mask before update_and_fetch) and returns the positions the last
    query reads and the attention output of that query."""
    cache, start = RotatingKVCache(max_size=max_size, keep=keep), 0
    for n in chunks:
        mask = cache.make_mask(n)
        keys, values = cache.update_and_fetch(tagged(start, n), tagged(start, n))
        start += n
    columns = keys[0, 0, :, 0].tolist()
    if mask is None or isinstance(mask, str):  # None / "causal": the last query reads every key
        read = columns
    else:
        read = [p for p, ok in zip(columns, mask[-1].tolist()) if ok]
    query = mx.zeros((1, 1, n, D))  # equal scores: the output is the mean of the rows read
    out = mx.fast.scaled_dot_product_attention(query, keys, values, scale=1.0, mask=mask)
    return sorted(int(p) for p in read), out[0, 0, -1, 0].item()


for max_size, keep, split in ((3, 1, [[2, 2], [2, 1, 1]]), (8, 4, [[6, 6], [6] + [1] * 6])):
    print("RotatingKVCache(max_size=%d, keep=%d), %d tokens" % (max_size, keep, sum(split[0])))
    for chunks in split:
        read, out = run(chunks, max_size, keep)
        print("  chunks %-22s last query reads positions %s, attention output %.6f" % (chunks, read, out))
