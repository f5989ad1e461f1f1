#!/usr/bin/env python3
"""ChunkedKVCache stays trimmable after it dropped its front: a trimmed
Llama 4 prompt cache attends to a cut attention chunk, or lands at the
wrong position.

mlx-lm only (mlx-lm 0.32.2, mlx[cpu] 0.32.4), a 4-layer Llama 4 with random
weights and attention_chunk_size 4 (3 ChunkedKVCache layers, 1 KVCache).
The server's prompt cache (LRUPromptCache.fetch_nearest_cache) reuses a
longer cached prompt by trimming it back to the common prefix; here the
longer prompt was a 6-token prefill and one decode step, after which every
chunked layer holds positions 2..6 only (maybe_trim_front ran before the
decode step). is_trimmable() still says True.

  A. a new prompt sharing 3 tokens: the trim to 3 succeeds on every layer,
     but the chunked layers no longer hold positions 0 and 1 of the first
     attention chunk: position 3 attends to {2, 3} instead of {0, 1, 2, 3}.
  B. a new prompt sharing 1 token: ChunkedKVCache.trim caps the count at
     the rows it holds; the chunked layers stop at offset 2, the KVCache
     layer at 1. trim_prompt_cache returns layer 0's count, and layer 0 of
     Llama 4 is a ChunkedKVCache: 5 of the 6 tokens asked for (printed
     last); fetch_nearest_cache ignores the count.
  C. a new prompt sharing 5 tokens: position 5's chunk {4, 5} is still
     held, the reuse is sound (the control: it agrees before and after the
     patch, which keeps such reuse).

Each case compares the logits of the reused cache with a fresh prefill of
the same prompt; they must be equal up to float rounding.

    python docs/findings/mlx-lm-chunked-trim-below-dropped-front.py
"""

import mlx.core as mx
from mlx_lm.models import llama4
from mlx_lm.models.cache import LRUPromptCache, trim_prompt_cache

mx.set_default_device(mx.cpu)
mx.random.seed(0)
args = llama4.ModelArgs(
    model_type="llama4",
    text_config=dict(
        attention_bias=False, attention_chunk_size=4, head_dim=8, hidden_size=32,
        interleave_moe_layer_step=4, intermediate_size=32, intermediate_size_mlp=32,
        max_position_embeddings=64, model_type="llama4_text", num_attention_heads=4,
        num_experts_per_tok=1, num_hidden_layers=4, num_key_value_heads=2,
        num_local_experts=1, rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0,
        use_qk_norm=False, vocab_size=64,
    ),
)
model = llama4.Model(args)
mx.eval(model.parameters())


def fresh(tokens):
    cache = model.make_cache()
    return model(mx.array([tokens]), cache=cache)[0, -1]


def cached_conversation(tokens):
    """A 6-token prefill, then one decode step, as generate_step runs them."""
    cache = model.make_cache()
    model(mx.array([tokens[:6]]), cache=cache)
    model(mx.array([tokens[6:7]]), cache=cache)
    return cache


long_prompt = [1, 2, 3, 4, 5, 6, 7]
bad = 0
for case, shared in (("A", 3), ("B", 1), ("C", 5)):
    prompt = long_prompt[:shared] + [40]
    lru = LRUPromptCache()
    lru.insert_cache("llama4", long_prompt, cached_conversation(long_prompt))
    cache, rest = lru.fetch_nearest_cache("llama4", prompt)
    if cache is None:
        # Nothing reusable: the server prefills the whole prompt afresh.
        print("%s: prompt %s: no reusable cache, a fresh prefill of %s" % (case, prompt, rest))
        cache = model.make_cache()
    else:
        print(
            "%s: prompt %s reuses the cache of %s; rest %s; offsets %s; chunked start_position %d"
            % (case, prompt, long_prompt, rest, [c.offset for c in cache], cache[0].start_position)
        )
    reused = model(mx.array([rest]), cache=cache)[0, -1]
    delta = mx.abs(reused - fresh(prompt)).max().item()
    ok = delta < 1e-4
    bad += not ok and case != "C"
    print("   max |logit(reused) - logit(fresh)| = %.3g  %s" % (delta, "ok" if ok else "WRONG"))

cache = cached_conversation(long_prompt)
trimmed = trim_prompt_cache(cache, 6)  # B's trim, as fetch_nearest_cache makes it
print("trim_prompt_cache(cache of %s, 6) returns %d; offsets %s; layers %s"
      % (long_prompt, trimmed, [c.offset for c in cache], [type(c).__name__ for c in cache]))
print("reproduced: %d of 2 cases wrong" % bad if bad else "not reproduced: A and B agree")
