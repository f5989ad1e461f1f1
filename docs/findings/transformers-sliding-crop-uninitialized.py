"""transformers: Cache.crop on a DynamicSlidingWindowLayer that holds nothing
yet (a fresh cache, or one after reset()) raises AttributeError.

DynamicLayer.crop documents that cropping an uninitialized layer is a no-op
("Nothing to do in these cases: 0 tokens to crop or the layer is not
initialized"); the sliding-window subclass inherits that early return and
then reads `self.keys.shape`, which is None.

    pip install torch transformers==5.25.0 && python transformers-sliding-crop-uninitialized.py
"""

import torch
import transformers
from transformers import DynamicCache, PretrainedConfig

print("transformers", transformers.__version__, "torch", torch.__version__)

full = DynamicCache(config=PretrainedConfig(num_hidden_layers=1, layer_types=["full_attention"]))
sliding = DynamicCache(
    config=PretrainedConfig(num_hidden_layers=1, layer_types=["sliding_attention"], sliding_window=3)
)
for name, cache in (("full_attention", full), ("sliding_attention", sliding)):
    cache.activate_past_recording()  # what assisted decoding does before it crops
    for when in ("fresh cache", "after update + reset()"):
        if when != "fresh cache":
            cache.update(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), 0)
            cache.reset()
        try:
            cache.crop(0)
            print("%-17s %-22s crop(0) -> ok, seq length %d" % (name, when, cache.get_seq_length()))
        except Exception as error:
            print("%-17s %-22s crop(0) -> %s: %s" % (name, when, type(error).__name__, error))
