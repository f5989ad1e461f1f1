"""mlx-lm: the first token of generate_step(max_kv_size=16) depends on
prefill_step_size, because a multi-token step's mask hides the 4 tokens
RotatingKVCache keeps (see mlx-lm-prefill-mask-hides-keep.md).

A tiny randomly initialised Qwen2 (no weights downloaded) and a 40-token
prompt: the first token's log-probabilities with the default
prefill_step_size (2048: the prompt but its last token in one step) against
prefill_step_size=1 (one token at a time, the path that reads the kept
tokens). Equal when the mask reads the kept tokens in both.

    pip install mlx-lm==0.32.2 "mlx[cpu]" && python mlx-lm-prefill-mask-hides-keep-generate.py
"""

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models import qwen2

mx.random.seed(0)
args = qwen2.ModelArgs(
    model_type="qwen2",
    hidden_size=64,
    num_hidden_layers=2,
    intermediate_size=128,
    num_attention_heads=4,
    rms_norm_eps=1e-6,
    vocab_size=128,
    num_key_value_heads=2,
)
model = qwen2.Model(args)
mx.eval(model.parameters())
prompt = mx.random.randint(0, 128, (40,))
first = {}
for step in (2048, 1):
    # max_kv_size=16: make_prompt_cache gives every layer RotatingKVCache(max_size=16, keep=4)
    _, first[step] = next(generate_step(prompt, model, max_tokens=1, max_kv_size=16, prefill_step_size=step))
print("max |logprobs(prefill_step_size=2048) - logprobs(prefill_step_size=1)| = %.4f"
      % mx.abs(first[2048] - first[1]).max().item())
