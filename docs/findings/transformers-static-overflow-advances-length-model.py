"""transformers: the finding of transformers-static-overflow-advances-length.md
on a model. A tiny randomly initialised Llama (no weights downloaded) with
StaticCache(max_cache_len=8): a 10-token forward that does not fit, then a
forward of its first 8 tokens on the same cache, compared with those 8
tokens run on a fresh cache.

    pip install torch transformers==5.25.0 && python transformers-static-overflow-advances-length-model.py
"""

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

print("transformers", transformers.__version__, "torch", torch.__version__)
config = LlamaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
tokens = torch.randint(0, 64, (1, 10))
with torch.no_grad():
    expected = model(tokens[:, :8], past_key_values=StaticCache(config=config, max_cache_len=8)).logits
    cache = StaticCache(config=config, max_cache_len=8)
    try:
        model(tokens, past_key_values=cache)
    except IndexError as error:
        print("10-token forward -> IndexError: %s" % str(error).splitlines()[0])
    print("get_seq_length() =", int(cache.get_seq_length()))
    try:
        logits = model(tokens[:, :8], past_key_values=cache).logits
        print("then its first 8 tokens -> ok, max |logits - fresh cache| = %.4f, get_seq_length() = %d"
              % ((logits - expected).abs().max(), int(cache.get_seq_length())))
    except IndexError as error:
        print("then its first 8 tokens -> IndexError: %s" % str(error).splitlines()[0])
