"""kvpress 0.5.5: a decoding press's second compression keeps the wrong
tokens, because `ScorerPress.compress` leaves the kept keys in top-k order.

`ScorerPress.compress` keeps `scores.topk(n_kept).indices` and gathers the
keys and values in that order: by score, and among equal scores in an
order of top-k's choosing, not by position. A press run once per prefill
does not care (attention reads the cache as a set). `DecodingPress`
compresses the same cache again every `compression_interval` steps, and a
press that scores by index reads that scrambled order as if it were
positional: `StreamingLLMPress` keeps "the first `n_sink`" entries, which
are no longer the first tokens, and "the most recent", which are no longer
the most recent. BOS, the attention sink StreamingLLM is named for, is
dropped at the second compression. `PrefillDecodingPress` and
`CompressionRatioDecodingPress` inherit it (the first, already at its first
decoding compression, after the prefill press scrambled the context).

Uses only kvpress (and the transformers and torch it installs): a tiny
random Llama (one layer, so that a recompute of the kept tokens is exact)
and a word-level tokenizer built in memory, nothing downloaded. It runs
the pipeline with a decoding press, then compares each answer token's
logits with a forward of the tokens the press documents it keeps at that
step (the first `n_sink` and the most recent, `target_size` in all, after
every `compression_interval` steps, the question's forward being the
first), and prints which positions the cache holds after the call:

    pip install kvpress==0.5.5
    python docs/findings/kvpress-decoding-order-lost.py
"""

from importlib.metadata import version

import torch
from kvpress import DecodingPress, PrefillDecodingPress, StreamingLLMPress
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, pipeline

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


def keep(entries, size, n_sink):
    """StreamingLLMPress's documented choice: the first n_sink, then the most recent."""
    if len(entries) <= size:
        return entries
    return entries[:n_sink] + entries[len(entries) - (size - n_sink):]


def documented(context, answer, prefill_ratio, n_sink, interval, target):
    """For each answer token, the (token, position) entries its forward reads."""
    cache = [(t, p) for p, t in enumerate(context)]
    if prefill_ratio:
        cache = keep(cache, max(1, int(len(context) * (1 - prefill_ratio))), n_sink)
    steps, inputs, position, count = [], list(QUESTION), len(context), 0
    for token in answer:
        step = [(t, position + i) for i, t in enumerate(inputs)]
        position += len(step)
        cache = cache + step
        steps.append(cache)
        count += 1
        if count >= interval or len(step) >= target:
            cache, count = keep(cache, target, n_sink), 0
        inputs = [token]
    return steps


def main():
    torch.set_grad_enabled(False)
    model, pipe = build()
    print("kvpress %s, transformers %s, torch %s" % (version("kvpress"), version("transformers"), torch.__version__))
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out[0, -1]))
    context = [0] + list(range(10, 30))  # the pipeline puts BOS first
    n_sink, interval, target, new_tokens = 2, 2, 8, 6
    wrong = False
    for name, prefill_ratio in (("DecodingPress", 0.0), ("PrefillDecodingPress", 0.5)):
        decoding = DecodingPress(StreamingLLMPress(n_sink=n_sink), compression_interval=interval, target_size=target)
        press = decoding
        if prefill_ratio:
            press = PrefillDecodingPress(prefilling_press=StreamingLLMPress(prefill_ratio, n_sink=n_sink),
                                         decoding_press=decoding)
        cache = DynamicCache()
        seen.clear()
        pipe(" " + " ".join("w%d" % t for t in context[1:]), question=" ".join("w%d" % t for t in QUESTION),
             press=press, max_new_tokens=new_tokens, cache=cache)
        logits = list(seen)
        answer = [int(step.argmax()) for step in logits]
        steps = documented(context, answer, prefill_ratio, n_sink, interval, target)
        print("%s(StreamingLLMPress(n_sink=%d), compression_interval=%d, target_size=%d)%s, %d context tokens:"
              % (name, n_sink, interval, target, " with StreamingLLMPress(%.1f) on the prefill" % prefill_ratio
                 if prefill_ratio else "", len(context)))
        for index, (got, step) in enumerate(zip(logits, steps)):
            want = model(input_ids=torch.tensor([[t for t, _ in step]]),
                         position_ids=torch.tensor([[p for _, p in step]]),
                         attention_mask=torch.ones(1, len(step), dtype=torch.long), use_cache=False).logits[0, -1]
            delta = float((got - want).abs().max())
            wrong |= delta > 1e-4
            print("  answer token %d: logits %.4f off a forward of the documented kept tokens %s"
                  % (index + 1, delta, [p for _, p in step]))
        # Which positions the cache holds after the call, in its order: the
        # keys of every position, from one uncompressed forward.
        full = context + QUESTION + answer[:-1]
        reference = DynamicCache()
        model.model(input_ids=torch.tensor([full]), past_key_values=reference)
        rows = reference.layers[0].keys[0, 0]
        held = [int((rows - row).abs().amax(-1).argmin()) for row in cache.layers[0].keys[0, 0]]
        print("  the cache after the call holds positions %s (in its order); position 0 (BOS) %s"
              % (held, "kept" if 0 in held else "dropped"))
        print("  greedy answer: %s" % " ".join("w%d" % t for t in answer))
    print("a decoding press keeps other tokens than the first n_sink and the most recent: %s"
          % ("yes" if wrong else "no"))


if __name__ == "__main__":
    main()
