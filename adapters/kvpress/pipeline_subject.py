#!/usr/bin/env python3
"""kvpress's pipeline (`"kv-press-text-generation"`) as a kvcheck-subject/1
process: its presses at their front door, judged by a recompute without a
cache of what each press's documentation says it keeps.

The subject is the library's pipeline, unmodified, over a tiny Llama with
random weights built in this process (one layer by default: its keys and
values depend on a token and its position only, so a recompute of the
kept tokens is exact) and a word-level tokenizer (word `wN` is token N).
kvcheck's ops become pipeline calls:

| kvtrace op | `pipe(context, question=..., press=..., max_new_tokens=N)` |
|---|---|
| write `G+n` (append) | the conversation so far and `n` new tokens as the context: a follow-up |
| write `s+n`, `s < G` (rewrite) | the first `s` tokens, `n` other tokens, then the rest as it was: an edited context |
| write `G+0` (probe) | the same context again |
| rewind `to` | nothing is called; the next context shares only the first `to` tokens |
| reset | nothing is called; a new conversation starts |

Every call asks the same two-word question (`--questions N`: N times in
one call, `questions=[...]`, where every repeat must be answered exactly as
the first). The pipeline prefills the
context (BOS first) with the press hooked, which compresses the cache,
then feeds the question and generates greedily. The logits of each
generated token are read from the model's output head (a forward hook
that changes nothing) and compared with a recompute without a cache: one
forward of the kept context tokens, then the question and the tokens
generated before, at the positions the press's documentation gives them:

- `--press streaming`: `StreamingLLMPress(compression_ratio, n_sink)`
  keeps the first `n_sink` tokens and the most recent ones, `max(1,
  int(L * (1 - ratio)))` in all, at their original positions; the
  question follows at position L;
- `--press rerotate`: `KeyRerotationPress(StreamingLLMPress(...))`: the
  same tokens, re-rotated to positions 0..k-1; the question follows at k;
- `--press none`: no press, the whole context;
- `--press decoding`: `DecodingPress(StreamingLLMPress(n_sink),
  compression_interval, target_size)` compresses while the answer is
  generated: every forward (the question's, then each answer token's)
  is a step, and after every `--interval`-th step, or one of at least
  `--target` tokens, the cache, the step's tokens included, keeps its
  first `n_sink` entries and its most recent, `--target` in all, at their
  positions;
- `--press prefill-decoding`: `PrefillDecodingPress` with the streaming
  press on the context and that decoding press on the answer;
- `--press ratio-decoding`: `CompressionRatioDecodingPress`, whose target
  is `max(1, int(seen * (1 - ratio)))` of the `seen` positions so far.

Each answer token is judged by its own forward of what the press keeps
when that token is computed (`schedule`).

Logits further apart than `--tolerance`, or a different greedy token
where the two best are further apart than that, raise `RecomputeMismatch`:
kvcheck reports it as a divergence, minimizes and saves it.

Only configurations that keep every position visible (`growth`, no
window below the capacity) are opened: `kvcheck run --profile growth`.

    adapters/kvpress/.venv/bin/python adapters/kvpress/pipeline_subject.py \\
        [--press none|streaming|rerotate|decoding|prefill-decoding|ratio-decoding] [--ratio R] [--sink N] \\
        [--interval N] [--target N] [--layers N] [--cache dynamic|quantized] [--max-tokens N] [--tolerance T] \\
        [--questions N]
"""

import os
import sys

import kvcheck
from kvcheck import adapter as kit
from kvcheck.adapter import FRONT_DOOR_DOMAIN, Conversation, front_door_config

VOCAB = 64
BOS, EOS, PAD, UNK = 0, 1, 2, 3
FIRST_WORD = 4
# Context tokens are words w4 .. w61; the question is two words of its own.
CONTENT = VOCAB - FIRST_WORD - 2
QUESTION = [VOCAB - 2, VOCAB - 1]
PRESSES = ("none", "streaming", "rerotate", "decoding", "prefill-decoding", "ratio-decoding")
# The presses that compress while the answer is generated; the pipeline
# refuses several questions with them.
DECODING = ("decoding", "prefill-decoding", "ratio-decoding")


class RecomputeMismatch(RuntimeError):
    """The pipeline's logits differ from the recompute of what the press keeps."""


def words(ids):
    return " ".join("w%d" % i for i in ids)


def kept_positions(length, ratio, sink):
    """The context positions StreamingLLMPress documents it keeps: the first
    `sink`, then the most recent, `max(1, int(length * (1 - ratio)))` in
    all (kvpress's `compute_n_kept`); all of them when `ratio` is 0."""
    if ratio <= 0:
        return list(range(length))
    return streaming_keep(length, max(1, int(length * (1 - ratio))), sink)


def streaming_keep(length, kept, sink):
    """The indices StreamingLLMPress keeps of `length` when it keeps `kept`:
    the first `sink` (the first `kept` when fewer: sinks "are never
    pruned"), then the most recent."""
    if kept >= length:
        return list(range(length))
    if kept <= sink:
        return list(range(kept))
    return list(range(sink)) + list(range(length - (kept - sink), length))


def decoding_target(press, target, ratio, seen):
    """The size a decoding press compresses the cache to once `seen`
    positions were written (the largest position id + 1): DecodingPress's
    `target_size`, or CompressionRatioDecodingPress's `max(1, int(seen * (1
    - target_compression_ratio)))`."""
    if press == "ratio-decoding":
        return max(1, int(seen * (1 - ratio)))
    return target


def schedule(press, context, generated, ratio, sink, interval, target, question=QUESTION):
    """What each answer token's logits are computed from, as the press's
    documentation describes it: for every step (the question, then each
    answer token fed back but the last), the cache's (token, position)
    entries followed by the step's own. The logits of answer token i are
    those of the last entry of step i.

    A prefill press compresses the context once (`streaming`, `rerotate`,
    and `prefill-decoding`'s prefill); a decoding press counts the steps,
    the question's forward included, and after every `interval`-th one, or
    one of at least `target` tokens, compresses the cache, the step's own
    tokens included, to its target with StreamingLLMPress's choice (the
    first `sink` entries and the most recent)."""
    length = len(context)
    if press in ("streaming", "rerotate", "prefill-decoding"):
        kept = kept_positions(length, ratio, sink)
    else:
        kept = list(range(length))
    if press == "rerotate":
        cache = [(context[p], i) for i, p in enumerate(kept)]
        after = len(kept)
    else:
        cache = [(context[p], p) for p in kept]
        after = length
    steps, count = [], 0
    inputs = list(question)
    for index in range(len(generated)):
        step = [(token, after + i) for i, token in enumerate(inputs)]
        after += len(step)
        steps.append(cache + step)
        cache = cache + step
        if press in DECODING:
            count += 1
            size = decoding_target(press, target, ratio, after)
            if count >= interval or len(step) >= size:
                cache = [cache[i] for i in streaming_keep(len(cache), size, sink)]
                count = 0
        inputs = [generated[index]]
    return steps


class WordConversation(Conversation):
    """A conversation whose tokens are the words w4 .. w61."""

    def token(self, position, writer):
        return FIRST_WORD - 1 + super().token(position, writer)


class KvpressPipeline(kvcheck.Subject):
    """kvpress's pipeline and a press (module docs)."""

    dtypes = ("f32", "f16", "bf16")
    variants = ("dense",)
    features = ("growth",)
    values = False
    domain = FRONT_DOOR_DOMAIN

    def __init__(self, press="streaming", ratio=0.5, sink=4, layers=1, cache="dynamic", max_tokens=2,
                 tolerance=1e-4, questions=1, interval=2, target=8):
        options = ["--press %s" % press]
        options += ["--ratio %g --sink %d" % (ratio, sink)] if press != "none" else []
        options += ["--interval %d" % interval] if press in DECODING else []
        options += ["--target %d" % target] if press in ("decoding", "prefill-decoding") else []
        options += ["--layers %d" % layers] if layers != 1 else []
        options += ["--cache %s" % cache] if cache != "dynamic" else []
        options += ["--max-tokens %d" % max_tokens] if max_tokens != 2 else []
        options += ["--questions %d" % questions] if questions != 1 else []
        self.name = " ".join(["kvpress pipeline"] + options)
        self.press_name, self.ratio, self.sink, self.layers = press, ratio, sink, layers
        self.cache_name, self.max_tokens, self.tolerance = cache, max_tokens, tolerance
        self.questions, self.interval, self.target = questions, interval, target
        self.pipe = self.model = None
        self.talk = WordConversation(CONTENT)
        if press != "none" and self.refused(0):
            # The press refuses a cache no longer than its sinks (answered
            # outside), which the declared domain admits: declare none.
            self.domain = None

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__, "pipeline_subject.py")
        parser.add_argument("--press", choices=PRESSES, default="streaming")
        parser.add_argument("--ratio", type=float, default=0.5,
                            help="the press's compression_ratio, in [0, 1): StreamingLLMPress's, the prefill's of "
                            "prefill-decoding, CompressionRatioDecodingPress's target_compression_ratio")
        parser.add_argument("--sink", type=int, default=4, help="StreamingLLMPress's n_sink")
        parser.add_argument("--layers", type=int, default=1,
                            help="the model's layers; with more than one, a deeper layer's keys and values of "
                            "a kept token were computed attending to the pruned ones, which no recompute of "
                            "the kept tokens reproduces")
        parser.add_argument("--cache", choices=("dynamic", "quantized"), default="dynamic",
                            help="quantized: QuantizedCache(backend='quanto', nbits=4, q_group_size=8)")
        parser.add_argument("--max-tokens", type=int, default=2)
        parser.add_argument("--tolerance", type=float, default=1e-4)
        parser.add_argument("--questions", type=int, default=1,
                            help="the same question asked N times in one call (questions=[...]): the pipeline "
                            "compresses the context once and removes each answer from the cache before the "
                            "next question, so every repeat must be answered exactly as the first")
        parser.add_argument("--interval", type=int, default=2,
                            help="a decoding press's compression_interval: it compresses after every N steps")
        parser.add_argument("--target", type=int, default=8,
                            help="DecodingPress's target_size: the tokens it keeps when it compresses")
        args = parser.parse_args(argv)
        if args.press in DECODING and args.questions != 1:
            parser.error("--press %s takes one question: kvpress's pipeline refuses several with a decoding press"
                         % args.press)
        if args.interval < 1 or args.target < 1:
            parser.error("--interval and --target must be at least 1 (kvpress asserts both positive)")
        if not 0 <= args.ratio < 1:
            parser.error("--ratio must be in [0, 1) (kvpress's presses refuse 1 and more)")
        if args.sink < 0 or args.layers < 1 or args.max_tokens < 1 or args.questions < 1:
            parser.error("--sink must be at least 0, --layers, --max-tokens and --questions at least 1")
        return cls(args.press, args.ratio, args.sink, args.layers, args.cache, args.max_tokens, args.tolerance,
                   args.questions, args.interval, args.target)

    def refused(self, length):
        """Whether StreamingLLMPress would refuse the first cache it
        compresses after a context of `length` tokens: the context with BOS
        (a prefill press), or that and the question (a decoding press's
        first step), no longer than its sinks."""
        first = length + 1 + (len(QUESTION) if self.press_name in ("decoding", "ratio-decoding") else 0)
        return first <= self.sink

    @property
    def global_end(self):
        return len(self.talk.tokens)

    def open(self, config):
        front_door_config(config, "kvpress's pipeline")
        if self.pipe is None:
            self.build()
        self.talk = WordConversation(CONTENT)

    def build(self):
        import torch
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, pipeline

        import kvpress  # noqa: F401  (importing it registers the pipeline)

        torch.manual_seed(0)
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=self.layers,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                             max_position_embeddings=4096, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
        config._attn_implementation = "sdpa"
        self.model = LlamaForCausalLM(config).eval()
        vocabulary = {"<s>": BOS, "</s>": EOS, "<pad>": PAD, "<unk>": UNK}
        vocabulary.update({"w%d" % i: i for i in range(FIRST_WORD, VOCAB)})
        tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                                 pad_token="<pad>", unk_token="<unk>", model_max_length=4096)
        # The answer runs to max_new_tokens: nothing the model generates ends it.
        self.model.generation_config.eos_token_id = None
        self.pipe = pipeline("kv-press-text-generation", model=self.model, tokenizer=self.tokenizer, device="cpu")
        self.steps = []
        self.model.lm_head.register_forward_hook(lambda module, args, out: self.steps.append(out[0, -1].detach()))

    def make_press(self):
        from kvpress import (CompressionRatioDecodingPress, DecodingPress, KeyRerotationPress, PrefillDecodingPress,
                             StreamingLLMPress)

        if self.press_name == "none":
            return None
        if self.press_name == "ratio-decoding":
            return CompressionRatioDecodingPress(StreamingLLMPress(n_sink=self.sink), compression_interval=self.interval,
                                                 target_compression_ratio=self.ratio)
        if self.press_name in DECODING:
            decoding = DecodingPress(StreamingLLMPress(n_sink=self.sink), compression_interval=self.interval,
                                     target_size=self.target)
            if self.press_name == "decoding":
                return decoding
            prefill = StreamingLLMPress(compression_ratio=self.ratio, n_sink=self.sink)
            return PrefillDecodingPress(prefilling_press=prefill, decoding_press=decoding)
        press = StreamingLLMPress(compression_ratio=self.ratio, n_sink=self.sink)
        return KeyRerotationPress(press) if self.press_name == "rerotate" else press

    def make_cache(self):
        if self.cache_name == "dynamic":
            return None
        from transformers import QuantizedCache

        # quanto loads its compiled CPU extension through torch's
        # cpp_extension, which runs ninja (the venv's) every time.
        bin_dir = os.path.dirname(sys.executable)
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        return QuantizedCache(backend="quanto", config=self.model.config, nbits=4, q_group_size=8)

    def write(self, start, length, heads, recent_window, k, v):
        tokens = self.talk.prompt(start, length, heads, recent_window, follow=False)
        if self.press_name != "none" and self.refused(len(tokens)):
            # StreamingLLMPress asserts a cache longer than its sinks.
            raise kvcheck.Outside("a context of %d tokens (BOS included): StreamingLLMPress(n_sink=%d) refuses to "
                                  "compress a cache no longer than its sinks" % (len(tokens) + 1, self.sink))
        self.ask(tokens)
        self.talk.answered(tokens, [])
        return list(range(len(tokens)))

    def ask(self, tokens):
        import torch

        self.steps = []
        with torch.no_grad():
            answers = self.pipe(" " + words(tokens), questions=[words(QUESTION)] * self.questions,
                                press=self.make_press(), max_new_tokens=self.max_tokens,
                                cache=self.make_cache())["answers"]
        if len(self.steps) != self.max_tokens * self.questions:
            raise RecomputeMismatch("the pipeline ran its output head %d times for %d questions of %d tokens"
                                    % (len(self.steps), self.questions, self.max_tokens))
        first = self.steps[: self.max_tokens]
        generated = [int(step.argmax()) for step in first]
        for number, answer in enumerate(answers):
            steps = self.steps[number * self.max_tokens: (number + 1) * self.max_tokens]
            if answer.split() != ["w%d" % int(step.argmax()) for step in steps if int(step.argmax()) >= FIRST_WORD]:
                # The hook reads the logits the pipeline decodes from: its
                # answer is their greedy tokens (special ones left out).
                raise RecomputeMismatch("the pipeline answered %r, its own logits give %s"
                                        % (answer, [int(step.argmax()) for step in steps]))
            if number:
                # The same question about the same compressed context.
                delta = max(float((a - b).abs().max()) for a, b in zip(steps, first))
                if delta > 1e-5:
                    raise RecomputeMismatch("question %d of %d, the first one again, is answered with logits %.3g "
                                            "apart from the first's (the cache still holds an earlier answer?)"
                                            % (number + 1, self.questions, delta))
        wanted = self.recompute([BOS] + list(tokens), generated)
        context = "a %d-token context" % (len(tokens) + 1)
        for index, (got, want) in enumerate(zip(first, wanted)):
            self.compare(index, got, want, context)

    def recompute(self, context, generated):
        """The logits of each answer token without a cache: one forward of
        what the press documents the step reads (`schedule`), each token at
        its documented position."""
        import torch

        wanted = []
        for step in schedule(self.press_name, context, generated, self.ratio, self.sink, self.interval, self.target):
            ids, positions = [token for token, _ in step], [position for _, position in step]
            with torch.no_grad():
                # An explicit all-ones mask: without one, transformers reads
                # position ids that jump (the sinks, then the recent tokens)
                # as packed sequences and masks each from the others.
                logits = self.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                                    attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False).logits
            wanted.append(logits[0, -1])
        return wanted

    def compare(self, index, got, want, context):
        which = "the first answer token" if index == 0 else "answer token %d" % (index + 1)
        best = (int(got.argmax()), int(want.argmax()))
        if best[0] != best[1]:
            gap = float(want[best[1]] - want[best[0]])
            if gap > self.tolerance:
                raise RecomputeMismatch("%s after %s is w%d, a recompute of what the press keeps gives w%d (%.3g apart)"
                                        % (which, context, best[0], best[1], gap))
        delta = float((got - want).abs().max())
        if delta > self.tolerance:
            raise RecomputeMismatch("the logits of %s after %s differ from a recompute of what the press keeps by "
                                    "%.3g (tolerance %g)" % (which, context, delta, self.tolerance))

    def rewind(self, to):
        self.talk.rewind(to)

    def reset(self):
        self.talk.reset()


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "KvpressPipeline"))
