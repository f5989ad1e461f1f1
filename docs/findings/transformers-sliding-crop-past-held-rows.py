"""transformers: DynamicSlidingWindowLayer.crop, once past the window, removes
rows it no longer holds without noticing: after a second crop in a row (or a
crop of more tokens than the layer holds) its length and its rows disagree,
and the next forward's keys no longer line up with its mask.

    pip install torch transformers==5.25.0 && python transformers-sliding-crop-past-held-rows.py
"""

import torch
import transformers
from transformers import DynamicCache, PretrainedConfig

print("transformers", transformers.__version__, "torch", torch.__version__)


def tagged(start, n):
    """K/V whose single value is the token's position, so rows show where they came from."""
    return torch.arange(start, start + n, dtype=torch.float32).reshape(1, 1, n, 1)


config = PretrainedConfig(num_hidden_layers=1, layer_types=["sliding_attention"], sliding_window=4)
cache = DynamicCache(config=config)
cache.activate_past_recording()  # required before cropping a sliding layer past its window
layer = cache.layers[0]


def show(what):
    held = layer.keys[0, 0, :, 0].int().tolist() if layer.keys is not None else None
    print("%-34s get_seq_length()=%2d  rows held (positions): %s" % (what, cache.get_seq_length(), held))


cache.update(tagged(0, 4), tagged(0, 4), 0)
show("update positions 0..3")
cache.crop(0)
show("crop(0)")
try:
    cache.crop(-2)
    show("crop(-2)  (expected: length 2, rows 0..1)")
    kv_length, kv_offset = cache.get_mask_sizes(1, 0)
    keys, _ = cache.update(tagged(2, 1), tagged(2, 1), 0)
    print("next forward (1 token at position 2): the mask covers %d keys from position %d; update returned %d keys holding positions %s"
          % (kv_length, kv_offset, keys.shape[2], keys[0, 0, :, 0].int().tolist()))
except RuntimeError as error:  # a layer that refuses the crop it cannot undo
    print("crop(-2) -> RuntimeError: %s" % error)
    show("after the refused crop")

over = DynamicCache(config=config)
over.activate_past_recording()
over.update(tagged(0, 4), tagged(0, 4), 0)
try:
    over.crop(-5)
    print("crop(-5) of a 4-token sliding layer -> get_seq_length() = %d" % over.get_seq_length())
except RuntimeError as error:
    print("crop(-5) of a 4-token sliding layer -> RuntimeError: %s" % error)
full = DynamicCache(config=PretrainedConfig(num_hidden_layers=1, layer_types=["full_attention"]))
full.update(tagged(0, 4), tagged(0, 4), 0)
full.crop(-5)
print("crop(-5) of a 4-token full-attention layer -> get_seq_length() = %d" % full.get_seq_length())
