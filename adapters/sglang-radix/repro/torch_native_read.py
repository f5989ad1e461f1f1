"""The SWA subject's `read` through sglang's `TorchNativeAttnBackend`
(subject.py `--read-through torch_native` / `torch_native-decode`).

The plain `read` (driver.py, `SWARadixDriver.read`) gathers a windowed
layer's rows through the full->SWA translation itself, as the flashinfer,
triton and intel_amx backends do. This reader instead takes every row from
what the torch_native backend's own SDPA path gathers, so that a kvcheck
run judges the backend's indexing: for each layer it calls the backend's
public `forward_extend` (or `forward_decode`, one call per position) over
the request's row of `req_to_token`, with `save_kv_cache=False` (nothing
written) and a probe layer whose `sliding_window_size` is 0.

Why the output is the gathered rows, bit for bit: the backend's mask
(`_make_sliding_window_mask`: `k <= q and k >= q - sliding_window_size`)
with a window of 0 lets the query of position p attend key p alone. With
a query of zeros every unmasked score is 0, the softmax weight of key p is
exactly 1 and every other weight exactly 0, so the output row p is
`1 * v[p] + sum(0 * v[j])`. Every value a slot can hold here is finite (the
payload of contract.md §16 is a finite, non-zero, normal f32; a slot never
written holds 0), so that sum is `v[p]` exactly. The subject writes the
same payload as keys and values (`SWAKVPool.set_kv_buffer(..., data,
data)`), so the value row the backend gathered is the key row kvcheck
expects. The window of 0 changes only the mask: which slots are gathered
(`k_cache[req_to_token[req, :seq_len]]`, torch_native_backend.py lines
139-141 and 240-242 in 0.5.23) does not depend on it, so the probe reads
the slots a real layer of any window reads.

The backend class is the installed one: `import
sglang.srt.layers.attention.torch_native_backend`. To judge a patched
backend, put a patched copy of the sglang package first on the path
(PYTHONPATH), as docs/findings/sglang-torch-native-swa-reads-full-slots.md
shows.
"""

import types

import numpy as np
import torch

PATHS = ("extend", "decode")


class TorchNativeRead:
    """Reads an `SWARadixDriver`'s rows through `TorchNativeAttnBackend`."""

    def __init__(self, drv, path="extend"):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.layers.radix_attention import AttentionType

        if path not in PATHS:
            raise ValueError("path is one of %s, not %r" % (PATHS, path))
        self.drv = drv
        self.path = path
        self.attn_type = AttentionType.DECODER
        # What the backend reads off its ModelRunner: the device and the two
        # pools (the SWAKVPool is the runner's token_to_kv_pool).
        runner = types.SimpleNamespace(device="cpu", req_to_token_pool=drv.req_to_token_pool,
                                       token_to_kv_pool=drv.kv_pool)
        self.backend = TorchNativeAttnBackend(runner)
        self.width = drv.kv_pool.get_key_buffer(0).shape[-1]

    def _layer(self, layer_id):
        # The fields of a RadixAttention the backend reads; one head of
        # `width` dims, as the driver's pools hold.
        return types.SimpleNamespace(
            layer_id=layer_id, qk_head_dim=self.width, v_head_dim=self.width, tp_q_head_num=1,
            tp_k_head_num=1, tp_v_head_num=1, is_cross_attention=False, attn_type=self.attn_type,
            scaling=1.0, sliding_window_size=0, logit_cap=0.0, k_scale=None, v_scale=None,
        )

    def _batch(self, req_pool_idx, seq_len, extend):
        # A forward batch of one request; out_cache_loc empty (nothing is
        # written: save_kv_cache=False), the rest as the scheduler fills it.
        batch = types.SimpleNamespace(
            out_cache_loc=torch.empty(0, dtype=torch.int64),
            req_pool_indices=torch.tensor([req_pool_idx], dtype=torch.int64),
            seq_lens=torch.tensor([seq_len], dtype=torch.int64),
            encoder_lens=None, encoder_out_cache_loc=None,
        )
        if extend:
            batch.extend_prefix_lens = torch.tensor([0], dtype=torch.int64)
            batch.extend_seq_lens = torch.tensor([seq_len], dtype=torch.int64)
        return batch

    def rows(self, req_pool_idx, layer_id, count, start=0):
        """The value rows of positions [start, count) of one layer, as the
        backend's attention gathers them: a float32 tensor [count - start, D]."""
        layer = self._layer(layer_id)
        if count <= start:
            return torch.empty(0, self.width, dtype=torch.float32)
        if self.path == "extend":
            batch = self._batch(req_pool_idx, count, True)
            self.backend.init_forward_metadata(batch)
            q = torch.zeros(count, self.width, dtype=torch.float32)
            out = self.backend.forward_extend(q, None, None, layer, batch, save_kv_cache=False)
            return out.view(count, self.width)[start:count]
        out = []
        for p in range(start, count):
            # A decode step at position p: the query attends key p alone.
            batch = self._batch(req_pool_idx, p + 1, False)
            self.backend.init_forward_metadata(batch)
            q = torch.zeros(1, self.width, dtype=torch.float32)
            out.append(self.backend.forward_decode(q, None, None, layer, batch, save_kv_cache=False).view(1, self.width))
        return torch.cat(out)

    def read(self, rid, count, start=0):
        """`SWARadixDriver.read`'s bytes, every layer's rows taken from the
        backend's attention: a full layer's of [0, count), a windowed
        layer's of [start, count)."""
        req = self.drv.reqs[rid]
        out = []
        for layer in range(self.drv.layers):
            lo = start if layer in self.drv.window_layers else 0
            rows = self.rows(req.kv.req_pool_idx, layer, count, lo)
            out.append(rows.contiguous().numpy().view(np.uint32).astype("<u4").tobytes())
        return b"".join(out)
