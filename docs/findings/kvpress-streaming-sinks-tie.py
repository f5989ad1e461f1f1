"""kvpress 0.5.5: StreamingLLMPress keeps an arbitrary subset of its sink
tokens, and can drop the first token, when the compression ratio keeps
fewer tokens than `n_sink`.

`score()` gives every sink token the same score (1) and every pruned one 0;
`ScorerPress` keeps the top `max(1, int(L * (1 - ratio)))`. With fewer kept
than sinks, top-k chooses among equal scores, and on the CPU it keeps
[0, 1, 3] of [0, 1, 2, 3], or [1] alone (not the first token, the attention
sink StreamingLLM is named for). The docstring says the sink tokens "are
never pruned".

Uses only kvpress (and the transformers and torch it installs): a tiny
random Llama (one layer, so that a recompute of the kept tokens is exact)
and a word-level tokenizer built in memory, nothing downloaded. It runs
the pipeline with the press, reads which context tokens the compressed
cache holds, and compares the first answer token's logits with a forward
of the first tokens instead:

    pip install kvpress==0.5.5
    python docs/findings/kvpress-streaming-sinks-tie.py
"""

from importlib.metadata import version

import torch
from kvpress import StreamingLLMPress
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, pipeline

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
    print("kvpress %s, transformers %s, torch %s" % (version("kvpress"), version("transformers"), torch.__version__))

    question = [62, 63]
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out[0, -1]))
    wrong = 0
    for length, ratio in ((13, 0.7), (13, 0.9), (16, 0.9), (13, 0.5)):
        context = [0] + list(range(10, 10 + length - 1))  # the pipeline puts BOS first
        full = DynamicCache()
        model.model(input_ids=torch.tensor([context]), past_key_values=full)
        cache = DynamicCache()
        seen.clear()
        pipe(" " + " ".join("w%d" % t for t in context[1:]), question="w62 w63",
             press=StreamingLLMPress(compression_ratio=ratio, n_sink=4), max_new_tokens=1, cache=cache)
        # Which context positions the compressed cache holds (their value rows).
        rows = cache.layers[0].values[0, 0]
        kept = sorted(int((full.layers[0].values[0, 0] - row).abs().amax(-1).argmin()) for row in rows)
        n_kept = max(1, int(length * (1 - ratio)))
        first = list(range(n_kept)) if n_kept <= 4 else list(range(4)) + list(range(length - (n_kept - 4), length))
        # The answer's first logits, had the press kept those tokens (at
        # their positions, the question after the whole context).
        ids = [context[p] for p in first] + question
        positions = first + [length, length + 1]
        want = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                     attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False).logits[0, -1]
        delta = float((seen[0] - want).abs().max())
        wrong += kept != first
        print("L=%d ratio=%.1f n_sink=4: %d kept, positions %s (the first: %s); first answer logits %.4f off"
              % (length, ratio, n_kept, kept, first, delta))
    print("StreamingLLMPress keeps other tokens than its first sinks when it keeps fewer than n_sink: %s"
          % ("yes" if wrong else "no"))


if __name__ == "__main__":
    main()
