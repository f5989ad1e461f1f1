"""Takes LightX2V's rolling self-attention KV cache out of a LightX2V checkout.

LightX2V (github.com/ModelTC/LightX2V) runs Self-Forcing-style Wan models
(`WanSFTransformerInfer`, `models/networks/wan/infer/self_forcing/`) with
a per-layer pool, `RollingKVCachePool` (`common/kvcache/rolling.py`): a
fixed sink followed by a ring of recent tokens whose roll only advances the
ring head. The bookkeeping that decides what to roll, where the chunk goes
and which rows attention reads is inline in
`WanSFTransformerInfer.infer_self_attn_with_kvcache`: the global and local
ends, `sink_tokens`, `need_roll`, `num_evicted`, `local_end_idx`,
`attn_start`, then `roll_window`, `store_kv`, `set_ends`, and the
`k_cache` / `v_cache` reads attention gets.

`rolling.py` is imported as it is (the package `__init__` files, which
import every model and the platform layer, are skipped by registering the
packages without running them). The transformer module imports the whole
Wan inference stack, so this module does not import it: it parses the file
and compiles, unmodified (kvcheck.pipeline.source), the statements of
`infer_self_attn_with_kvcache` from `kv_cache = ...self_attn_kv_cache` to
`kv_cache.set_ends(...)` (the `store` program) and the two reads of its
non-sequence-parallel branch (the `read` program). A checkout that lacks
one is refused with what it could not find.
"""

import ast
import importlib
import os

from kvcheck.pipeline import source
from kvcheck.adapter import Checkout

HERE = os.path.dirname(os.path.abspath(__file__))

ROLLING = os.path.join("lightx2v", "common", "kvcache", "rolling.py")
INFER = os.path.join("lightx2v", "models", "networks", "wan", "infer", "self_forcing", "transformer_infer.py")
PACKAGES = ("lightx2v", "lightx2v.common", "lightx2v.common.ops", "lightx2v.common.ops.attn",
            "lightx2v.common.ops.attn.utils", "lightx2v.common.kvcache")

# The checkout setup.sh prepared, or $LIGHTX2V_SRC (kvcheck.adapter.Checkout).
CHECKOUT = Checkout(HERE, "KVCHECK_LIGHTX2V_READY", "LIGHTX2V_SRC", ROLLING, "LightX2V")
marker_path, is_ready, marker, source_dir = CHECKOUT.marker_path, CHECKOUT.is_ready, CHECKOUT.marker, CHECKOUT.source_dir


class Programs:
    def __init__(self, src, rolling, store, read):
        self.src = src
        self.rolling = rolling  # lightx2v.common.kvcache.rolling
        self.store = store  # code: kv_cache = ... through kv_cache.set_ends(...)
        self.read = read  # code: attn_k = kv_cache.k_cache(...), attn_v = ...


def load(src=None):
    src = src or source_dir()
    source.register_packages(src, PACKAGES)
    rolling = importlib.import_module("lightx2v.common.kvcache.rolling")

    path, tree = source.read(src, INFER, "LightX2V")
    body = source.require_method(path, tree, "WanSFTransformerInfer", "infer_self_attn_with_kvcache").body
    texts = [ast.unparse(node) for node in body]
    starts = [i for i, s in enumerate(texts) if s.startswith("kv_cache = self.kv_cache_manager.self_attn_kv_cache")]
    ends = [i for i, s in enumerate(texts) if s.startswith("kv_cache.set_ends(")]
    heads = [i for i, s in enumerate(texts) if s.startswith(("seg_index = ", "is_ref_prefill = "))]
    if len(starts) != 1 or len(ends) != 1 or len(heads) != 2 or not starts[0] < ends[0]:
        raise RuntimeError("%s: infer_self_attn_with_kvcache has no `kv_cache = ...` .. `kv_cache.set_ends(...)` "
                           "block with seg_index / is_ref_prefill before it" % path)
    store = [body[i] for i in heads] + body[starts[0]:ends[0] + 1]
    reads = []
    for node in body[ends[0] + 1:]:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "seq_parallel":
            reads = [n for n in node.orelse if ast.unparse(n).startswith(("attn_k = kv_cache.", "attn_v = kv_cache."))]
            break
    if len(reads) != 2:
        raise RuntimeError("%s: infer_self_attn_with_kvcache has no attn_k / attn_v read after set_ends" % path)
    compiled = [source.compile_statements(path, nodes) for nodes in (store, reads)]
    return Programs(src, rolling, *compiled)
