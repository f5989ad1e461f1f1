#!/usr/bin/env python3
"""transformers' `generate()` as a kvcheck-subject/1 process: the front door
of its KV caches, judged by the same model without a cache.

The subject is the library's generation path, not a cache class. A tiny
model with random weights (built in this process from the architecture's
config: Llama, Mistral with a sliding window, a Gemma 2 of alternating
sliding and full layers) generates greedily with `model.generate()`, and
kvcheck's ops become the requests a chat or completion loop makes:

| kvtrace op | `generate()` call |
|---|---|
| write `G+n` (append) | the conversation so far and `n` new tokens (beginning with the model's previous answer, as a loop that continues the text feeds it back): a follow-up |
| write `s+n`, `s < G` (rewrite) | the first `s` tokens, `n` other tokens, then the rest as it was: an edited turn |
| write `G+0` (probe) | the conversation again: a regenerate |
| rewind `to` | nothing is called; the conversation is cut to its first `to` tokens |
| reset | nothing is called; a new conversation starts |

Each call is `model.generate(input_ids, max_new_tokens=N, do_sample=False,
output_logits=True, return_dict_in_generate=True, ...)` with the cache of
`--cache`: `cache_implementation=` one of transformers' names (`dynamic`,
`static`, `sliding_window`, `hybrid`, `quantized` with HQQ, 8 bits; `offloaded`
and `offloaded_static` where torch sees an accelerator), a fresh cache
each call. With `--reuse`, the documented way to reuse a prompt cache
across calls instead: one cache object (`DynamicCache(config=...)` with
`activate_past_recording()`, so that its sliding layers can be cropped, or the
`StaticCache` of `--cache static`) passed as `past_key_values` to every
call, cropped (`cache.crop(-k)`, `k` tokens removed; `reset()` when none is kept) to the prefix the new prompt shares with
what it holds, keeping at least one prompt token to compute. With
`--assistant MODEL`, assisted generation (a draft model of that
architecture, other random weights): `generate()` crops the cache after
every rejected draft. With `--batching`, continuous batching instead:
`generate_batch()` of the prompt beside the last two prompts sent, through
one persistent manager whose paged cache outlives each call; its greedy
tokens are judged (it returns no logits).

The judge is the same model's forward without a cache
(`use_cache=False`) on the prompt and the tokens generated before each
one: every generated token's logits, as log-probabilities, within
`--tolerance` (default 1e-4; both are float32 on the CPU), and each greedy
token. A difference raises `RecomputeMismatch`, which kvcheck reports as a
divergence of the write, minimizes and saves; an exception of `generate()`
itself is compared the same way (the contract serves every such request).

The view is every position of the prompt (the models' global layers keep
every token; the sliding layers are checked through the logits), so only
configs with growth and no window below the capacity open (`kvcheck run
--profile growth`).

    adapters/transformers/.venv/bin/python adapters/transformers/generate_subject.py \\
        [--model llama|mistral|gemma2] [--cache dynamic|static|sliding_window|hybrid|quantized] \\
        [--reuse] [--assistant MODEL] [--max-new-tokens N] [--tolerance T] [--attention eager|sdpa] [--batching]
"""

import sys

import kvcheck
from kvcheck import adapter as kit
from kvcheck.adapter import FRONT_DOOR_DOMAIN, Conversation, front_door_config

VOCAB = 64
# Prompt tokens are 1 .. CONTENT; the model may answer any id.
CONTENT = 59
# The longest conversation a static cache is built for: kvcheck's growth
# profile stays well below it, and a longer one is outside.
STATIC_LEN = 256

COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=512, rms_norm_eps=1e-6)
# Tiny configurations of the architectures whose caches `generate()`
# builds: full attention, a sliding window, and both layer kinds.
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, num_hidden_layers=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, num_hidden_layers=2, sliding_window=4)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(COMMON, num_hidden_layers=2, sliding_window=4, query_pre_attn_scalar=8,
                    layer_types=["sliding_attention", "full_attention"])),
}
CACHES = ("dynamic", "static", "sliding_window", "hybrid", "quantized", "offloaded", "offloaded_static")
# Offloading moves layers between the accelerator and the CPU: on the CPU
# alone generate() fails with a CUDA driver error.
ACCELERATED = ("offloaded", "offloaded_static")


class RecomputeMismatch(RuntimeError):
    """`generate()`'s logits differ from the same model's without a cache."""


def load():
    """torch, transformers and the classes this uses, imported up front:
    transformers' lazy attributes, first reached from another thread
    while the module still loads, can come back missing."""
    import torch
    import transformers

    for name in ["DynamicCache", "StaticCache"] + [cls for config, model, _ in MODELS.values() for cls in (config, model)]:
        getattr(transformers, name)
    return torch, transformers


def build(name, seed, attention="eager"):
    """A tiny model of architecture `name`, random weights of `seed`, eval
    mode, float32, with the attention implementation `attention`."""
    torch, transformers = library().ready()
    config_class, model_class, config = MODELS[name]
    config = getattr(transformers, config_class)(**config)
    config._attn_implementation = attention
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


_LIBRARY = []


def library():
    """torch and transformers, loading in the background from the first
    call on: once per process (the helper loads this file a second time as
    the subject's module; two imports of transformers racing in two
    threads leave its lazy attributes missing)."""
    if not _LIBRARY:
        _LIBRARY.append(kit.Background(load))
    return _LIBRARY[0]


class TransformersGenerate(kvcheck.Subject):
    """`generate()` of a tiny model, judged without a cache (module docs)."""

    dtypes = ("f32", "f16", "bf16")
    variants = ("dense",)
    features = ("growth",)
    values = False
    # What a chat or completion loop sends.
    domain = FRONT_DOOR_DOMAIN

    def __init__(self, model="llama", cache="dynamic", reuse=False, assistant=None, max_new_tokens=1,
                 tolerance=1e-4, attention="eager", batching=False):
        self.model_name, self.cache_name, self.reuse, self.attention = model, cache, reuse, attention
        self.batching, self.sent = batching, []
        self.assistant_name, self.max_new_tokens, self.tolerance = assistant, max_new_tokens, tolerance
        options = ["--model %s --cache %s" % (model, cache)]
        options += ["--reuse"] if reuse else []
        options += ["--assistant %s" % assistant] if assistant else []
        options += ["--max-new-tokens %d" % max_new_tokens] if max_new_tokens != 1 else []
        options += ["--attention %s" % attention] if attention != "eager" else []
        options += ["--batching"] if batching else []
        self.name = "transformers generate() " + " ".join(options)
        self.model = self.assistant = None
        self.cache = None  # the reused cache (--reuse)
        self.cached = []  # the tokens it holds
        self.talk = Conversation(CONTENT)
        library()  # loads while the helper answers hello

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__, "generate_subject.py")
        parser.add_argument("--model", choices=sorted(MODELS), default="llama")
        parser.add_argument("--cache", choices=CACHES, default="dynamic",
                            help="the cache_implementation generate() builds (with --reuse: the cache object "
                            "passed as past_key_values: DynamicCache, or StaticCache for static)")
        parser.add_argument("--reuse", action="store_true",
                            help="one cache across calls, cropped to the prefix each prompt shares with it")
        parser.add_argument("--assistant", choices=sorted(MODELS),
                            help="assisted generation with a draft model of this architecture (other weights)")
        parser.add_argument("--max-new-tokens", type=int, default=1)
        parser.add_argument("--tolerance", type=float, default=1e-4)
        parser.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                            help="the attention implementation (eager raises on a mask that does not fit "
                            "its keys; sdpa, transformers' default, may build no mask)")
        parser.add_argument("--batching", action="store_true",
                            help="continuous batching: generate_batch() with a persistent manager (the paged "
                            "cache), each request beside the conversation's last two, greedy tokens judged")
        args = parser.parse_args(argv)
        if args.batching and (args.reuse or args.assistant or args.cache != "dynamic"):
            parser.error("--batching has its own paged cache: no --reuse, --assistant or --cache")
        if args.reuse and args.cache not in ("dynamic", "static"):
            parser.error("--reuse passes a DynamicCache or a StaticCache: --cache dynamic or static")
        return cls(args.model, args.cache, args.reuse, args.assistant, args.max_new_tokens, args.tolerance,
                   args.attention, args.batching)

    @property
    def global_end(self):
        return len(self.talk.tokens)

    def open(self, config):
        front_door_config(config, "generate()")
        if self.cache_name in ACCELERATED and not library().ready()[0].cuda.is_available():
            raise RuntimeError("cache_implementation=%r offloads to the CPU from an accelerator, and torch "
                               "sees none here" % self.cache_name)
        if self.model is None:
            self.model = build(self.model_name, 0, self.attention)
            if self.assistant_name:
                self.assistant = build(self.assistant_name, 1, self.attention)
        self.cache, self.cached, self.sent = None, [], []
        self.talk = Conversation(CONTENT)

    def write(self, start, length, heads, recent_window, k, v):
        tokens = self.talk.prompt(start, length, heads, recent_window)
        if self.cache_name == "static" and len(tokens) + self.max_new_tokens > STATIC_LEN:
            raise kvcheck.Outside("a conversation longer than the static cache (%d)" % STATIC_LEN)
        self.talk.answered(tokens, self.generate(tokens))
        return list(range(len(tokens)))

    def generate(self, tokens):
        """The greedy tokens `generate()` answers `tokens` with, each judged."""
        if self.batching:
            return self.generate_batch(tokens)
        torch, transformers = library().ready()
        kwargs = dict(max_new_tokens=self.max_new_tokens, min_new_tokens=self.max_new_tokens, do_sample=False,
                      output_logits=True, return_dict_in_generate=True)
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant
        if self.reuse:
            kwargs["past_key_values"] = self.reused(tokens)
        elif self.cache_name == "quantized":
            # 8 bits in groups of a head's width (the tiny models' head_dim
            # 8; HQQ's default group of 64 does not divide their tensors).
            kwargs.update(cache_implementation="quantized",
                          cache_config={"backend": "hqq", "nbits": 8, "q_group_size": 8, "axis_key": 0, "axis_value": 0})
        elif self.cache_name == "static":
            kwargs.update(cache_implementation="static")
        else:
            kwargs["cache_implementation"] = self.cache_name
        ids = torch.tensor([tokens])
        with torch.no_grad():
            # The attention mask a tokenizer returns with the ids: every
            # token real (generate() would otherwise take the pad id, which
            # the model may answer and a follow-up send back, for padding).
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        generated = out.sequences[0, len(tokens):].tolist()
        if self.reuse:
            self.cached = (tokens + generated)[: self.cache.get_seq_length()]
        self.judge(tokens, generated, [step[0] for step in out.logits])
        return generated

    def generate_batch(self, tokens):
        """`generate_batch()` of `tokens` beside the last two prompts sent
        (they share prefixes with it: follow-ups, edits), through one
        persistent manager, so its paged cache outlives the call; every
        request's greedy tokens against the model's without a cache."""
        torch, transformers = library().ready()
        config = transformers.GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=False,
                                               eos_token_id=None, pad_token_id=0)
        batch = [tokens] + self.sent[-2:]
        out = self.model.generate_batch(inputs=batch, generation_config=config, progress_bar=False,
                                        warmup=False, persistent_manager=True)
        answers = [result.generated_tokens for _, result in sorted(out.items(), key=lambda item: int(item[0].split("_")[-1]))]
        if len(answers) != len(batch):
            raise RecomputeMismatch("generate_batch answered %d of %d requests" % (len(answers), len(batch)))
        for prompt, answer in zip(batch, answers):
            wanted = self.greedy(prompt)
            if list(answer) != wanted:
                raise RecomputeMismatch("generate_batch answers a %d-token prompt with %s, the model without a "
                                        "cache with %s" % (len(prompt), list(answer), wanted))
        self.sent = (self.sent + [tokens])[-2:]
        return list(answers[0])

    def greedy(self, prompt):
        """The model's greedy tokens after `prompt`, every step without a cache."""
        torch, _ = library().ready()
        sequence = list(prompt)
        with torch.no_grad():
            for _ in range(self.max_new_tokens):
                sequence.append(int(self.model(torch.tensor([sequence]), use_cache=False).logits[0, -1].argmax()))
        return sequence[len(prompt):]

    def reused(self, tokens):
        """The reused cache, cropped to the prefix `tokens` shares with what
        it holds, one prompt token at least left to compute."""
        torch, transformers = library().ready()
        if self.cache is None:
            if self.cache_name == "static":
                self.cache = transformers.StaticCache(config=self.model.config, max_cache_len=STATIC_LEN)
            else:
                self.cache = transformers.DynamicCache(config=self.model.config)
                # What the error of a sliding layer's crop past its window
                # asks for (assisted decoding does the same).
                self.cache.activate_past_recording()
            self.cached = []
        shared = 0
        while shared < min(len(self.cached), len(tokens) - 1) and self.cached[shared] == tokens[shared]:
            shared += 1
        held = self.cache.get_seq_length()
        if shared < held:
            if shared == 0:
                self.cache.reset()
            else:
                self.cache.crop(-(held - shared))
        self.cached = self.cached[:shared]
        return self.cache

    def judge(self, tokens, generated, logits):
        torch, _ = library().ready()
        sequence = tokens + generated[:-1]
        with torch.no_grad():
            fresh = self.model(torch.tensor([sequence]), use_cache=False).logits[0, len(tokens) - 1:]
        what = "a %d-token prompt" % len(tokens)
        for index, (got, wanted) in enumerate(zip(logits, fresh)):
            got, wanted = got.float().log_softmax(-1), wanted.float().log_softmax(-1)
            which = "first" if index == 0 else "generated token %d's" % (index + 1)
            best = int(wanted.argmax())
            if generated[index] != best and float(wanted[best] - wanted[generated[index]]) > self.tolerance:
                raise RecomputeMismatch("the %s greedy token after %s is %d, without a cache %d"
                                        % (which, what, generated[index], best))
            delta = (got - wanted).abs()
            worst = int(delta.argmax())
            if float(delta[worst]) > self.tolerance:
                raise RecomputeMismatch(
                    "%s-token log-probabilities after %s differ from the model without a cache by %.3g "
                    "(token %d: %.4f against %.4f; tolerance %g)"
                    % (which, what, float(delta[worst]), worst, float(got[worst]), float(wanted[worst]),
                       self.tolerance))

    def rewind(self, to):
        self.talk.rewind(to)

    def reset(self):
        self.talk.reset()


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "TransformersGenerate"))
