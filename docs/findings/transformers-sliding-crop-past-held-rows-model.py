"""transformers: the finding of transformers-sliding-crop-past-held-rows.md on
a model. A tiny randomly initialised Mistral (sliding window 4, no weights
downloaded) runs 4 tokens, is rolled back by crop(-2) (alone, or after the
crop(0) that restricts a sliding layer to its window), then runs one token;
its logits are compared with the same 3 tokens run on a fresh cache, with
eager attention and with SDPA (the default).

    pip install torch transformers==5.25.0 && python transformers-sliding-crop-past-held-rows-model.py
"""

import torch
import transformers
from transformers import DynamicCache, MistralConfig, MistralForCausalLM

print("transformers", transformers.__version__, "torch", torch.__version__)
for implementation in ("eager", "sdpa"):
    config = MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=4,
        attn_implementation=implementation,
    )
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    tokens, new = torch.tensor([[5, 9, 17, 33]]), torch.tensor([[40]])
    with torch.no_grad():
        fresh = DynamicCache(config=config)
        model(tokens[:, :2], past_key_values=fresh)
        expected = model(new, past_key_values=fresh).logits[0, -1]
        for crops in ((-2,), (0, -2)):
            cache = DynamicCache(config=config)
            cache.activate_past_recording()  # required before cropping a sliding layer past its window
            model(tokens, past_key_values=cache)
            what = ", ".join("crop(%d)" % c for c in crops)
            try:
                for tokens_to_remove in crops:
                    cache.crop(tokens_to_remove)
                logits = model(new, past_key_values=cache).logits[0, -1]
                print("%-5s %-17s then 1 token: max |logits - fresh cache| = %.4f"
                      % (implementation, what, (logits - expected).abs().max()))
            except RuntimeError as error:
                print("%-5s %-17s -> RuntimeError: %s" % (implementation, what, str(error)))
