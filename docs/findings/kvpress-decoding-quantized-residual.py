"""kvpress 0.5.5: on a QuantizedCache, a decoding press compresses only the
quantized part of the cache and throws away the rest: the question and the
answer generated so far. If it compresses at the last step, the pipeline
then fails with an IndexError.

A transformers `QuantizedLayer` keeps what was quantized in
`_quantized_keys` and the tokens written since in full precision in its
residual buffer (`keys`, up to `residual_length` of them): after the
prefill, the context is quantized and the question and answer go to the
buffer. `DecodingPress.forward_hook` reads the cache to compress with
`extract_keys_and_values`, which for a `QuantizedCache` dequantizes
`_quantized_keys` only; it compresses that, re-quantizes it and empties the
buffer (`keys = torch.zeros(0)`). The question and every answer token
since the last quantization are gone: the next tokens are generated from
the context alone. The empty buffer is 1-D, so when the compression falls
on the last step, the pipeline's `_remove_answer_from_cache` slices it as
`keys[:, :, :n]` and raises `IndexError`.

Uses only kvpress (and the transformers and torch it installs) with
optimum-quanto for transformers' quanto backend: a tiny random Llama (one
layer) and a word-level tokenizer built in memory, nothing downloaded. It
runs the pipeline with the same decoding press on a DynamicCache and on a
QuantizedCache (4 bits, groups of 8) and compares each answer token's
logits with a forward of the tokens the press documents it keeps. The
press compresses every 3 steps, so that 4 answer tokens see one
compression (the order of the kept keys, see kvpress-decoding-order-lost,
plays no part) and 3 answer tokens end on one:

    pip install kvpress==0.5.5 optimum-quanto ninja   # ninja on PATH
    python docs/findings/kvpress-decoding-quantized-residual.py
"""

import os
import sys
from importlib.metadata import version

import torch
from kvpress import DecodingPress, StreamingLLMPress
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, QuantizedCache, pipeline

VOCAB = 64
QUESTION = [62, 63]


def build():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=4096, bos_token_id=0,
                         eos_token_id=1, pad_token_id=2)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    vocabulary = {"<s>": 0, "</s>": 1, "<pad>": 2, "<unk>": 3, **{"w%d" % i: i for i in range(4, VOCAB)}}
    word_level = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", unk_token="<unk>", model_max_length=4096)
    return model, pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device="cpu")


def held(model, cache, tokens):
    """The positions whose keys the cache holds after the call, nearest to
    those of one uncompressed forward (a quantized layer's dequantized)."""
    reference = DynamicCache()
    model.model(input_ids=torch.tensor([tokens]), past_key_values=reference)
    layer = cache.layers[0]
    keys = layer.keys
    if isinstance(cache, QuantizedCache):
        stored = layer._dequantize(layer._quantized_keys)
        keys = torch.cat([stored, keys], dim=-2) if keys.dim() == 4 else stored
    rows = reference.layers[0].keys[0, 0]
    return sorted(int((rows - row).abs().amax(-1).argmin()) for row in keys[0, 0])


def main():
    # quanto compiles its CPU extension with the ninja next to this interpreter.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    torch.set_grad_enabled(False)
    model, pipe = build()
    print("kvpress %s, transformers %s, optimum-quanto %s, torch %s"
          % (version("kvpress"), version("transformers"), version("optimum-quanto"), torch.__version__))
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out[0, -1]))
    context = [0] + list(range(10, 30))  # the pipeline puts BOS first
    n_sink, interval, target = 2, 3, 8
    caches = (("DynamicCache", DynamicCache),
              ("QuantizedCache(nbits=4)", lambda: QuantizedCache(backend="quanto", config=model.config, nbits=4,
                                                                 q_group_size=8)))
    worst = {}
    for name, make in caches:
        for new_tokens in (4, 3):
            press = DecodingPress(StreamingLLMPress(n_sink=n_sink), compression_interval=interval, target_size=target)
            seen.clear()
            label = "%-24s max_new_tokens=%d:" % (name, new_tokens)
            cache = make()
            try:
                pipe(" " + " ".join("w%d" % t for t in context[1:]), question=" ".join("w%d" % t for t in QUESTION),
                     press=press, max_new_tokens=new_tokens, cache=cache)
            except Exception as error:
                print("%s the pipeline fails: %s: %s" % (label, type(error).__name__, error))
                continue
            logits = list(seen)
            answer = [int(step.argmax()) for step in logits]
            # The question's forward and answer token 1's are the press's
            # steps 1 and 2; after step 2 the cache keeps its first 2 and
            # most recent 6 entries: positions 0, 1, 18..23.
            # One compression, after step 3 (the question's forward, answer
            # tokens 1 and 2): the first 2 and the most recent 6 entries.
            tokens = context + QUESTION + answer[:-1]
            compressed = len(context) + len(QUESTION) + interval - 1
            kept = list(range(n_sink)) + list(range(compressed - (target - n_sink), compressed))
            deltas = []
            for index, got in enumerate(logits):
                last = len(context) + len(QUESTION) + index
                positions = list(range(last)) if last <= compressed else kept + list(range(compressed, last))
                want = model(input_ids=torch.tensor([[tokens[p] for p in positions]]),
                             position_ids=torch.tensor([positions]),
                             attention_mask=torch.ones(1, len(positions), dtype=torch.long), use_cache=False).logits[0, -1]
                deltas.append(float((got - want).abs().max()))
            print("%s answer tokens' logits %s off a forward of the documented kept tokens; the cache holds "
                  "positions %s" % (label, ", ".join("%.4f" % d for d in deltas), held(model, cache, tokens)))
            worst[name] = max(worst.get(name, 0.0), max(deltas[interval:] or [0.0]))
    print("after a decoding compression, a QuantizedCache answers %.4f off (DynamicCache %.4f; 4-bit "
          "quantization alone moves these logits by about 0.003)"
          % (worst.get(caches[1][0], float("nan")), worst.get(caches[0][0], float("nan"))))


if __name__ == "__main__":
    main()
