"""kvpress 0.5.5: with `cache=QuantizedCache(...)` and several questions,
the pipeline leaves each answer in the cache for the next question.

The pipeline compresses the context once, then answers each question and
removes it and its answer from the cache (`_remove_answer_from_cache`) so
that the next question sees the compressed context alone. It does so by
slicing each layer's rows to the context's length; a quantized layer keeps
the question and answer in its residual buffer after the context (the
context itself went to the quantized store), so the slice removes nothing,
and `cumulative_length` is not put back. The same question asked twice is
answered from different caches. With a residual buffer shorter than a
question and its answer, the buffer is flushed into the quantized store
and the next question fails with a size mismatch.

Uses only kvpress (with the transformers and torch it installs, and
optimum-quanto for the quantized cache): a tiny random Llama and a
word-level tokenizer built in memory, nothing downloaded:

    pip install kvpress==0.5.5 optimum-quanto ninja
    python docs/findings/kvpress-quantized-answers-stay.py
"""

from importlib.metadata import version

import torch
from kvpress import StreamingLLMPress
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, QuantizedCache, pipeline

VOCAB = 64


def main():
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
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
    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device="cpu")
    print("kvpress %s, transformers %s, optimum-quanto %s, torch %s"
          % (version("kvpress"), version("transformers"), version("optimum-quanto"), torch.__version__))

    logits = []
    model.lm_head.register_forward_hook(lambda module, args, out: logits.append(out[0, -1]))
    context = " " + " ".join("w%d" % i for i in range(10, 30))  # 21 tokens with BOS
    broken = 0
    for name, make in (
        ("DynamicCache", DynamicCache),
        ("QuantizedCache(residual_length=128)",
         lambda: QuantizedCache(backend="quanto", config=config, nbits=4, q_group_size=8)),
        ("QuantizedCache(residual_length=2)",
         lambda: QuantizedCache(backend="quanto", config=config, nbits=4, q_group_size=8, residual_length=2)),
    ):
        for press in (None, StreamingLLMPress(compression_ratio=0.5, n_sink=4)):
            logits.clear()
            cache = make()
            label = "%-36s %-22s" % (name, "StreamingLLMPress(0.5)" if press else "no press")
            try:
                pipe(context, questions=["w62 w63", "w62 w63"], press=press, max_new_tokens=3, cache=cache)
            except RuntimeError as error:
                broken += 1
                print("%s the second question fails: RuntimeError: %s" % (label, error))
                continue
            # The same question twice about the same compressed context.
            delta = float((logits[0] - logits[3]).abs().max())
            broken += name != "DynamicCache" and delta > 0
            print("%s the same question's first-token logits %.2e apart; cache length after the call %d"
                  % (label, delta, cache.get_seq_length()))
    print("QuantizedCache answers a repeated question from a cache that still holds the first answer: %s"
          % ("yes" if broken else "no"))


if __name__ == "__main__":
    main()
