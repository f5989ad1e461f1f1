"""kvpress 0.5.5: the cache a caller passes to the pipeline, as the call
leaves it, on a DynamicCache and on a QuantizedCache, with a decoding press.

The pipeline takes `cache=...` and leaves it as the answer left it, minus
what `_remove_answer_from_cache` takes out. With a decoding press,
kvpress's own tests (tests/test_decoding_compression.py) read a
DynamicCache after the call and expect it compressed to the press's
`target_size`. This script runs the same calls on both cache classes and
prints the context positions each holds after the call, matched against
the keys of one uncompressed forward (a quantized layer's dequantized):
on a QuantizedCache they should be those of the DynamicCache.

For the two QuantizedCache patches together
(kvpress-quantized-answers-stay.diff and
kvpress-decoding-quantized-residual.diff): on the release the quantized
calls fail or drop the question and answer before the cache is read.

Uses only kvpress (and the transformers and torch it installs) with
optimum-quanto, the tiny random Llama and word-level tokenizer of
kvpress-decoding-quantized-residual.py (built in memory, nothing
downloaded):

    pip install kvpress==0.5.5 optimum-quanto ninja   # ninja on PATH
    python docs/findings/kvpress-quantized-answers-stay-after-call.py

Exit status 1 when a QuantizedCache is left holding other positions than
the DynamicCache.
"""

import importlib.util
import os
import sys
from importlib.metadata import version

import torch
from kvpress import DecodingPress, PrefillDecodingPress, StreamingLLMPress
from transformers import DynamicCache, QuantizedCache

spec = importlib.util.spec_from_file_location(
    "residual", os.path.join(os.path.dirname(os.path.abspath(__file__)), "kvpress-decoding-quantized-residual.py"))
residual = importlib.util.module_from_spec(spec)
spec.loader.exec_module(residual)

# (context tokens, compression_interval, target_size, max_new_tokens, residual_length, prefill press)
CASES = [
    (21, 3, 8, 4, 128, False),  # one compression during the answer (the residual reproduction's)
    (21, 3, 8, 3, 128, False),  # the compression on the answer's last step
    (21, 10, 8, 3, 128, False),  # no compression during the answer
    (5, 2, 8, 6, 128, False),  # a context shorter than target_size: the cut reaches the quantized store
    (21, 2, 8, 5, 2, False),  # a residual buffer of 2: the layer re-quantizes itself between compressions
    (21, 10, 8, 3, 2, False),  # no compression, the residual buffer re-quantized
    (21, 2, 8, 4, 128, True),  # PrefillDecodingPress(StreamingLLMPress(0.5), DecodingPress)
]


def main():
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    torch.set_grad_enabled(False)
    model, pipe = residual.build()
    print("kvpress %s, transformers %s, optimum-quanto %s, torch %s"
          % (version("kvpress"), version("transformers"), version("optimum-quanto"), torch.__version__))
    answer = []
    model.lm_head.register_forward_hook(lambda module, args, out: answer.append(int(out[0, -1].argmax())))
    differ = 0
    for length, interval, target, new_tokens, residual_length, prefill in CASES:
        context = [0] + list(range(10, 10 + length - 1))  # the pipeline puts BOS first
        held = {}
        for name in ("DynamicCache", "QuantizedCache"):
            press = DecodingPress(StreamingLLMPress(n_sink=2), compression_interval=interval, target_size=target)
            if prefill:
                press = PrefillDecodingPress(prefilling_press=StreamingLLMPress(compression_ratio=0.5, n_sink=2),
                                             decoding_press=press)
            cache = DynamicCache() if name == "DynamicCache" else QuantizedCache(
                backend="quanto", config=model.config, nbits=4, q_group_size=8, residual_length=residual_length)
            answer.clear()
            try:
                pipe(" " + " ".join("w%d" % t for t in context[1:]),
                     question=" ".join("w%d" % t for t in residual.QUESTION),
                     press=press, max_new_tokens=new_tokens, cache=cache)
            except Exception as error:
                held[name] = "fails: %s: %s" % (type(error).__name__, error)
                continue
            tokens = context + residual.QUESTION + answer[:-1]
            held[name] = "length %d, positions %s" % (cache.get_seq_length(), residual.held(model, cache, tokens))
        print("context %d, compression_interval %d, target_size %d, max_new_tokens %d, residual_length %d%s:"
              % (length, interval, target, new_tokens, residual_length,
                 ", PrefillDecodingPress(StreamingLLMPress(0.5), ...)" if prefill else ""))
        for name, text in held.items():
            print("  %-15s %s" % (name, text))
        differ += held["DynamicCache"] != held["QuantizedCache"]
    if differ:
        print("after %d of %d calls a QuantizedCache holds other positions than a DynamicCache" % (differ, len(CASES)))
        return 1
    print("after every call a QuantizedCache holds the positions a DynamicCache holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
