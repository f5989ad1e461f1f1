#!/usr/bin/env python3
"""LightX2V's `RollingKVCachePool` as a kvcheck-subject/1 process.

    python adapters/lightx2v/subject.py [--layers 1] [--chunk N]

The pool class of a LightX2V checkout (adapters/lightx2v/setup.sh,
LIGHTX2V_SRC), driven by the statements of
`WanSFTransformerInfer.infer_self_attn_with_kvcache` that keep it, which
loader.py compiles unmodified out of
`models/networks/wan/infer/self_forcing/transformer_infer.py`:

| kvtrace op | LightX2V calls |
|---|---|
| open | `RollingKVCachePool(num_layers, cache_size=C, num_heads=H, head_dim=D, dtype, cpu)` and `_init_kv_buffer()` per batch row (the pool holds one video: `[N, H, D]`, no batch axis); a stand-in `self` with `kv_cache_size = max_attention_size = C` (`kv_size = local_attn_size * frame_seq_length`, `max_attention_size` unset), `kv_cache_manager.sink_size = S`, `ref_num_frames = ref_tokens = 0`, sliding window on |
| append `G+n` | the first denoising step of segment `G / n` (`scheduler.seg_index`): the `store` program (`kv_cache = ...` to `kv_cache.set_ends(...)`: `need_roll`, `num_evicted`, `roll_window`, `store_kv`) with the chunk's K/V, then the `read` program (`attn_k = kv_cache.k_cache(block_idx, attn_start, local_end_idx)`, `attn_v`) |
| rewrite of the current chunk | a later denoising step, or the re-run at the end of the segment (`end_run_segment`): the same segment index again |
| write `s+0` (the probe) | the current chunk run again with the rows it holds |
| reset | `pool.reset()` (`KVCacheManager._reset_pools`, the next video) |

One position is one token; `num_frame_per_chunk` is the first chunk's
length, so `cache_per_frame` is 1 and `sink_tokens = S`. Every block of a
forward runs the same statements on its own layer of the pool; `--layers`
runs them on that many layers, each of which must read the same rows.

**Visible means what attention reads**: the rows of `attn_k` / `attn_v`,
each identified by its bytes among the latest rows written for every
position (a row matching none raises `UnknownRows`).

Left out of `hello`: `rewind`, `evict`, `pin`, head ranges, recent windows,
windows below the capacity (`ar_config.max_attention_size`), growth, the
global sink and the packed variant. Requests the loop cannot make are
answered as outside the loop's domain (`kvcheck.Outside`): chunks of different lengths
(the start is `seg_index * num_new`), a rewrite of anything but the
current chunk, gaps, negative numbers. Since the chunk length is set by
the video's first chunk, no one declaration holds; `--chunk N` fixes
`num_frame_per_chunk` and declares the loop's domain: chunks of `N`,
`rewrites` of the latest chunk, `probes` after an append, no gaps, nothing
malformed. Without it no domain is declared and each outside answer cuts
its case.
"""

import sys
import types

import kvcheck
from kvcheck import adapter as kit
from kvcheck.pipeline import serving

import loader


class UnknownRows(RuntimeError):
    """Attention read a row that no write produced (or an older one)."""


class LayerMismatch(RuntimeError):
    """Two layers of one forward read different rows."""


class LightX2VRollingCache(serving.ChunkLoop, kvcheck.Subject):
    """LightX2V's RollingKVCachePool (sink + recent ring) under the self-forcing loop's bookkeeping."""

    variants = ("dense",)
    arrays = "torch"
    layout = "bnhd"
    ops = ("reset",)
    unit = "token"

    def __init__(self, layers=1, chunk=None):
        self.layers = layers
        self.chunk = chunk
        self.name = "LightX2V %s RollingKVCachePool" % serving.commit(loader.CHECKOUT)
        if chunk is not None:
            # One chunk length for every video: the loop's domain is then
            # declared, so kvcheck draws only inside it.
            self.name += " (chunks of %d)" % chunk
            self.domain = serving.loop_domain(chunk=chunk)
        self.runtime = serving.runtime(loader, tap=False)

    @classmethod
    def from_args(cls, argv):
        args = parse(argv)
        return cls(args.layers, args.chunk)

    def open(self, config):
        rt = self.rt = self.runtime.ready()
        torch = rt.torch
        self.config = config
        self.dtype = kit.dtype(torch, config["dtype"])
        self.pools = [
            rt.programs.rolling.RollingKVCachePool(self.layers, config["capacity"], config["heads"], config["head_dim"],
                                                   self.dtype, torch.device("cpu"))
            for _ in range(config["batch"])
        ]
        for pool in self.pools:
            pool._init_kv_buffer()  # as KVCacheManager._create_kv_caches does after building it
        self.global_end = 0
        self.chunk_len = self.chunk  # num_frame_per_chunk: --chunk, else the first chunk's length
        self.current = None
        self.rows = [{} for _ in self.pools]  # per batch row: (k bytes, v bytes) -> position

    def stand_in(self, pool, layer, seg_index):
        c = self.config
        manager = types.SimpleNamespace(self_attn_kv_cache=pool, ref_num_frames=0, ref_tokens=0, sink_size=c["sink"],
                                        uses_sliding_window=lambda _layer: True)
        return types.SimpleNamespace(kv_cache_manager=manager, block_idx=layer, config={}, seq_p_group=None,
                                     num_frame_per_chunk=self.chunk_len, kv_cache_size=c["capacity"],
                                     max_attention_size=c["capacity"], _kv_offload=False, clean_cuda_cache=False,
                                     scheduler=types.SimpleNamespace(seg_index=seg_index))

    def forward(self, start, k, v):
        """One forward of the chunk at `start`: every layer stores, then reads."""
        torch, programs = self.rt.torch, self.rt.programs
        seg_index = start // self.chunk_len
        views = []
        for b, pool in enumerate(self.pools):
            kb, vb = k[b].to(self.dtype).contiguous(), v[b].to(self.dtype).contiguous()
            seen = None
            for layer in range(self.layers):
                ns = {"self": self.stand_in(pool, layer, seg_index), "q": kb, "k": kb, "v": vb,
                      "is_ref_prefill": False, "dist": torch.distributed}
                exec(programs.store, ns)
                exec(programs.read, ns)
                read = (ns["attn_k"], ns["attn_v"])
                if seen is not None and not (seen[0].equal(read[0]) and seen[1].equal(read[1])):
                    raise LayerMismatch("layer %d read other rows than layer 0" % layer)
                seen = read
            views.append(seen)
        return views

    def identify(self, views, start, k, v):
        for b in range(len(self.pools)):
            for i in range(k.shape[1]):
                self.rows[b][(self.bytes(k[b, i]), self.bytes(v[b, i]))] = start + i
        positions = None
        for b, (ak, av) in enumerate(views):
            found = []
            for j in range(ak.shape[0]):
                key = (self.bytes(ak[j]), self.bytes(av[j]))
                if key not in self.rows[b]:
                    raise UnknownRows("batch row %d: attention row %d of %d matches no latest written row" % (b, j, ak.shape[0]))
                found.append(self.rows[b][key])
            if positions is not None and found != positions:
                raise LayerMismatch("batch row %d read %s, row 0 read %s" % (b, found, positions))
            positions = found
        torch = self.rt.torch
        return positions, torch.stack([ak for ak, _ in views]), torch.stack([av for _, av in views])

    def bytes(self, row):
        row = row.to(self.dtype).contiguous()
        if row.dtype != self.rt.torch.float32:
            row = row.view(self.rt.torch.int16)
        return row.numpy().tobytes()

    def forget(self, start, length):
        """Drops the rows of positions [start, start+length) (before they are written again)."""
        for table in self.rows:
            for key in [key for key, p in table.items() if start <= p < start + length]:
                del table[key]

    def appends(self, length):
        if self.chunk_len is not None and length != self.chunk_len:
            raise kvcheck.Outside("chunk of %d tokens: every segment has num_frame_per_chunk = %d (start = seg_index * num_new)"
                                  % (length, self.chunk_len))
        return True

    def refusal(self, start, length):
        chunk = self.current
        return "write %d+%d: only the current segment (%s) is run again" % (
            start, length, "none" if chunk is None else "%d+%d" % (chunk["start"], chunk["len"]))

    def write(self, start, length, heads, recent_window, k, v):
        g, chunk = self.global_end, self.current
        if self.request(start, length, k) == "probe":
            if chunk is None:
                return self.empty_view()
            start, length, k, v = chunk["start"], chunk["len"], chunk["k"], chunk["v"]
        first = self.chunk_len is None
        if first:
            self.chunk_len = length
        try:
            views = self.forward(start, k, v)
        except Exception:
            if first:
                self.chunk_len = None
            raise
        self.forget(start, length)
        seen = self.identify(views, start, k, v)
        self.current = {"start": start, "len": length, "k": k, "v": v}
        self.global_end = max(g, start + length)
        return seen

    def reset(self):
        for pool in self.pools:
            pool.reset()
        self.global_end = 0
        self.chunk_len = self.chunk
        self.current = None
        self.rows = [{} for _ in self.pools]


def parse(argv):
    parser = serving.parser(__doc__)
    serving.add_layers(parser, 1, "pool layers, each run through the statements (default 1)")
    parser.add_argument("--chunk", type=int,
                        help="num_frame_per_chunk: every chunk has this length, and the loop's domain is declared"
                             " (default: the first chunk's length, no declaration)")
    return serving.parse(parser, argv, positive=("layers", "chunk"))


if __name__ == "__main__":
    sys.exit(serving.main(__file__, "LightX2VRollingCache"))
