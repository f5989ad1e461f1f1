"""transformers: StaticLayer.update past max_cache_len raises, but only after
it has advanced the layer's length, so the failed call leaves the cache
reporting tokens it never stored and every later update fails too.

    pip install torch transformers==5.25.0 && python transformers-static-overflow-advances-length.py
"""

import torch
import transformers
from transformers import PretrainedConfig, StaticCache

print("transformers", transformers.__version__, "torch", torch.__version__)

cache = StaticCache(config=PretrainedConfig(num_hidden_layers=1, layer_types=["full_attention"]), max_cache_len=4)
k = torch.ones(1, 1, 5, 2)  # [batch, heads, tokens, head_dim]: 5 tokens into a 4-token cache
print("before: get_seq_length() =", int(cache.get_seq_length()), " max_cache_len =", cache.get_max_length())
try:
    cache.update(k, k, 0)
except Exception as error:
    print("update of 5 tokens -> %s: %s" % (type(error).__name__, str(error).splitlines()[0]))
print("after the failed update: get_seq_length() =", int(cache.get_seq_length()))
one = torch.ones(1, 1, 1, 2)
try:
    cache.update(one, one, 0)
    print("a 1-token update afterwards -> ok")
except Exception as error:
    print("a 1-token update afterwards (fits an empty 4-token cache) -> %s: %s" % (type(error).__name__, str(error).splitlines()[0]))
print("after that: get_seq_length() =", int(cache.get_seq_length()))
