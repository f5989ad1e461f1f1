#!/usr/bin/env python3
"""mistral.rs as a kvcheck-subject/1 process: the front door of its KV
cache and prefix cache, judged by a cold recompute.

The subject is mistral.rs's Python entry point, unmodified: a `Runner`
over a tiny plain model with random weights (tinymodel.py: `llama`, full
attention; `mistral`, every layer sliding over `--window` tokens;
`gemma2`, even layers sliding, odd layers full), on the CPU, without
network. Its prompts are words that its tokenizer maps one to one to
token ids, sent as chat completion requests (a one-message chat is the
prompt: BOS and the words), greedy, with the top log-probabilities of
every generated token. kvcheck's ops become the requests a client sends:

| kvtrace op | request |
|---|---|
| write `G+n` (append) | the conversation so far and `n` new tokens: a follow-up, beginning with the last answer |
| write `s+n`, `s < G` (rewrite) | the first `s` tokens, `n` other tokens, then the rest as it was: an edited turn |
| write `G+0` (probe) | the conversation again: a regenerate |
| rewind `to` | nothing is sent; the next request shares only the first `to` tokens |
| reset | nothing is sent; a new conversation starts |

Every request after the first of a conversation shares a prefix with one
before it, which mistral.rs's prefix cache (`--prefix-cache N`, the
`Runner`'s `prefix_cache_n`: the finished sequences whose KV caches it
keeps; 0 turns it off) hands to the new sequence, cut to the shared
length. `--parallel N` sends N - 1 other clients' requests beside every
request, all queued before any is read (as streaming requests), so that
the scheduler runs them in one batch; `--interleave` sends one other
client's request before every request; `--choices N` asks for N choices
of every request (`n_choices`); `--paged-attn` asks for PagedAttention,
whose prefix cache is another one (the CPU `Runner` refuses it).

**The judge** is a second `Runner` of the same model and dtype with the
prefix cache off and one sequence at a time: every request is asked of it
too, so it evaluates the whole prompt afresh and generates as many tokens
from there. The top log-probabilities of every generated token must agree
within `--tolerance`, and the greedy tokens must be the same unless the
two best are closer than that; otherwise the request raises
`RecomputeMismatch`, which kvcheck reports as a divergence, minimizes and
saves.

Only configurations that keep every position visible (`growth`, no
window below the capacity) are opened: `kvcheck run --profile growth`.

    adapters/mistralrs/.venv/bin/python adapters/mistralrs/subject.py \\
        [--model llama|mistral|gemma2] [--window W] [--layers N] [--dtype f32|bf16|f16] \\
        [--prefix-cache N] [--max-seqs N] [--max-tokens N] [--parallel N] [--interleave] \\
        [--choices N] [--tolerance T] [--top K] [--paged-attn]
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Everything is local: a model folder on disk, no hub, no token.
os.environ["HF_HUB_OFFLINE"] = "1"
# mistral.rs logs every loaded model at info level; kvcheck shows the
# subject's last lines of standard error, which should be its warnings.
os.environ.setdefault("RUST_LOG", "warn")

import kvcheck
from kvcheck import adapter as kit
from kvcheck.adapter import FRONT_DOOR_DOMAIN, Conversation, front_door_config

# The tiny models' vocabulary (tinymodel.py, imported beside this file):
# <unk>, <s>, </s>, then the plain words.
BOS, FIRST_PLAIN, VOCAB = 1, 3, 1024
# Prompt content: plain tokens, never a special one.
CONTENT = 500
# Other clients' conversations (--parallel, --interleave) use the plain
# tokens above the conversation's.
OTHERS = FIRST_PLAIN + CONTENT
# Never generate a special token: <unk> and <s> would be sent back as
# themselves, </s> would end the answer. Both runners get the same bias.
SPECIALS_BANNED = {0: -100.0, 1: -100.0, 2: -100.0}
DTYPES = ("f32", "bf16", "f16")
SETUP = "adapters/mistralrs/setup.sh"


class RecomputeMismatch(RuntimeError):
    """mistral.rs's answer differs from the cold recompute's."""


class UnexpectedAnswer(RuntimeError):
    """mistral.rs answered with something no request asked for."""


def load_library():
    try:
        import mistralrs
    except ImportError as error:
        raise RuntimeError("mistralrs is not importable (%s): run %s, then this with its venv's python"
                           % (error, SETUP)) from None
    return mistralrs


class IdConversation(Conversation):
    """A conversation whose tokens are the tiny vocabulary's plain ids."""

    def token(self, position, writer):
        return FIRST_PLAIN - 1 + super().token(position, writer)


class Answer:
    """One choice of a chat completion: the generated token ids and, per
    generated token, its top log-probabilities {id: logprob}."""

    def __init__(self, tokens, steps):
        self.tokens, self.steps = tokens, steps


def answer_of(steps, tinymodel, what):
    """The `Answer` of one choice, from its generated tokens'
    log-probabilities (`ResponseLogprob`s)."""
    tokens, found = [], []
    for step in steps:
        token = tinymodel.token_of(step.token)
        if token is None:
            raise UnexpectedAnswer("%s: generated %r, which is no token of the tiny vocabulary" % (what, step.token))
        tokens.append(token)
        found.append({t.token: t.logprob for t in step.top_logprobs})
    return Answer(tokens, found)


def reused(cached):
    """How many prompt tokens came from the prefix cache, as said."""
    return "?" if cached is None else "%d" % cached


class MistralRs(kvcheck.Subject):
    """mistral.rs's KV and prefix caches behind its Python `Runner` (module docs)."""

    dtypes = ("f32", "f16", "bf16")
    variants = ("dense",)
    features = ("growth",)
    values = False
    # The payloads are never read (a request's tokens come from the
    # conversation): bytes, so that no numpy is needed.
    arrays = "bytes"
    domain = FRONT_DOOR_DOMAIN

    def __init__(self, model="llama", window=None, layers=2, dtype="f32", prefix_cache=16, max_seqs=32,
                 max_tokens=1, parallel=1, interleave=False, choices=1, tolerance=1e-3, top=5, paged_attn=False):
        if window is None and model in ("mistral", "gemma2"):
            window = 4
        options = ["--model %s" % model] + (["--window %d" % window] if window is not None else [])
        options += ["--layers %d" % layers] if layers != 2 else []
        options += ["--dtype %s" % dtype] if dtype != "f32" else []
        options += ["--prefix-cache %d" % prefix_cache] if prefix_cache != 16 else []
        options += ["--max-seqs %d" % max_seqs] if max_seqs != 32 else []
        options += ["--max-tokens %d" % max_tokens] if max_tokens != 1 else []
        options += ["--parallel %d" % parallel] if parallel != 1 else []
        options += ["--interleave"] if interleave else []
        options += ["--choices %d" % choices] if choices != 1 else []
        options += ["--paged-attn"] if paged_attn else []
        self.name = " ".join(["mistral.rs"] + options)
        self.model_name, self.window, self.layers, self.dtype = model, window, layers, dtype
        self.prefix_cache, self.max_seqs, self.max_tokens = prefix_cache, max_seqs, max_tokens
        self.parallel, self.interleave, self.choices = parallel, interleave, choices
        self.tolerance, self.top, self.paged_attn = tolerance, top, paged_attn
        self.lib = self.tinymodel = None
        self.folder = self.path = None
        self.runner = self.judge = None
        self.talk = IdConversation(CONTENT)
        self.others = []

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__, "subject.py")
        parser.add_argument("--model", choices=("llama", "mistral", "gemma2"), default="llama",
                            help="llama: full attention; mistral: every layer slides over --window tokens; "
                            "gemma2: even layers slide, odd layers are full")
        parser.add_argument("--window", type=int, help="the sliding window of mistral and gemma2 (default 4)")
        parser.add_argument("--layers", type=int, default=2, help="the model's layers (gemma2: at least 2)")
        parser.add_argument("--dtype", choices=DTYPES, default="f32",
                            help="the dtype mistral.rs loads the model in (its KV cache's too)")
        parser.add_argument("--prefix-cache", type=int, default=16,
                            help="the Runner's prefix_cache_n: finished sequences whose KV caches the prefix "
                            "cache keeps for later requests (0: off)")
        parser.add_argument("--max-seqs", type=int, default=32, help="the Runner's max_seqs: sequences run at once")
        parser.add_argument("--max-tokens", type=int, default=1, help="tokens generated per request")
        parser.add_argument("--parallel", type=int, default=1,
                            help="requests in flight at once: every request goes with N - 1 other clients' "
                            "requests, sent from threads (each other client's conversation grows by a token "
                            "per request, judged too)")
        parser.add_argument("--interleave", action="store_true",
                            help="before every request, one of another client's conversation (growing by a "
                            "token each time, judged too)")
        parser.add_argument("--choices", type=int, default=1, help="choices per request (n_choices)")
        parser.add_argument("--tolerance", type=float, default=1e-3,
                            help="log-probability difference allowed (f32: 1e-3; bf16 and f16 need more)")
        parser.add_argument("--top", type=int, default=5, help="top log-probabilities compared per token")
        parser.add_argument("--paged-attn", action="store_true",
                            help="the Runner's paged_attn: PagedAttention, whose own prefix cache replaces the "
                            "sequence-level one (a CUDA or Metal build; the CPU wheel refuses it)")
        args = parser.parse_args(argv)
        if args.model == "llama" and args.window is not None:
            parser.error("--window: llama has no sliding window (use --model mistral or gemma2)")
        if args.window is not None and args.window < 1:
            parser.error("--window must be at least 1")
        if args.layers < (2 if args.model == "gemma2" else 1):
            parser.error("--layers: llama and mistral need at least 1, gemma2 at least 2 "
                         "(a sliding layer, then a full one)")
        for name in ("max_seqs", "max_tokens", "parallel", "choices", "top"):
            if getattr(args, name) < 1:
                parser.error("--%s must be at least 1" % name.replace("_", "-"))
        if args.prefix_cache < 0:
            parser.error("--prefix-cache must be 0 (off) or more")
        if args.tolerance < 0:
            parser.error("--tolerance must not be negative")
        return cls(args.model, args.window, args.layers, args.dtype, args.prefix_cache, args.max_seqs,
                   args.max_tokens, args.parallel, args.interleave, args.choices, args.tolerance, args.top,
                   args.paged_attn)

    @property
    def global_end(self):
        return len(self.talk.tokens)

    def open(self, config):
        front_door_config(config, "mistral.rs's models")
        if self.lib is None:
            self.lib = load_library()
            self.tinymodel = kit.load_module(HERE, "tinymodel")
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="kvcheck-mistralrs-")
            self.path = self.tinymodel.build(self.folder, self.model_name, self.layers, self.window)
        # A fresh Runner per case: nothing an earlier case left in the
        # prefix cache reaches this one (a minimized trace replays alone).
        self.runner = None
        self.runner = self.load(self.prefix_cache, self.max_seqs, self.paged_attn)
        if self.judge is None:
            self.judge = self.load(0, 1, False)
        self.talk = IdConversation(CONTENT)
        self.others = [[] for _ in range(max(self.parallel - 1, 1 if self.interleave else 0))]

    def load(self, prefix_cache, max_seqs, paged_attn):
        mistralrs = self.lib
        dtype = {"f32": mistralrs.ModelDType.F32, "bf16": mistralrs.ModelDType.BF16,
                 "f16": mistralrs.ModelDType.F16}[self.dtype]
        options = {"paged_attn": True} if paged_attn else {}
        try:
            return mistralrs.Runner(which=mistralrs.Which.Plain(model_id=self.path, dtype=dtype),
                                    prefix_cache_n=prefix_cache, max_seqs=max_seqs, token_source="none", **options)
        except ValueError as error:
            raise RuntimeError("mistral.rs does not load the tiny %s model%s: %s"
                               % (self.model_name, " with paged_attn" if paged_attn else "", error)) from None

    def close(self):
        self.runner = self.judge = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def write(self, start, length, heads, recent_window, k, v):
        tokens = self.talk.prompt(start, length, heads, recent_window)
        self.talk.answered(tokens, self.ask(tokens))
        return list(range(len(tokens)))

    def request(self, ids, top, choices=1, stream=False):
        return self.lib.ChatCompletionRequest(
            messages=self.tinymodel.text(ids), model="tiny", logprobs=True, top_logprobs=top,
            max_tokens=self.max_tokens, temperature=0.0, n_choices=choices, ignore_eos=True,
            logit_bias=dict(SPECIALS_BANNED), stream=stream)

    def complete(self, runner, ids, top, choices, what):
        """[Answer] of `runner` for the prompt BOS + `ids`, and the prompt
        tokens its prefix cache supplied."""
        response = runner.send_chat_completion_request(self.request(ids, top, choices))
        steps = []
        for choice in response.choices:
            content = choice.logprobs.content if choice.logprobs is not None else None
            steps.append(content or [])
        return self.check(response.usage, steps, ids, choices, what)

    def check(self, usage, steps, ids, choices, what):
        """The answer of a request (its usage, and per choice its generated
        tokens' log-probabilities, `ResponseLogprob`s) as ([Answer], the
        prompt tokens the prefix cache supplied), after checking that it
        is an answer to what was asked."""
        if usage.prompt_tokens != len(ids) + 1:
            raise UnexpectedAnswer("%s: mistral.rs counted %d prompt tokens of %d sent"
                                   % (what, usage.prompt_tokens, len(ids) + 1))
        if len(steps) != choices:
            raise UnexpectedAnswer("%s: %d choices of %d asked" % (what, len(steps), choices))
        found = [answer_of(choice, self.tinymodel, what) for choice in steps]
        for answer in found:
            if len(answer.tokens) != self.max_tokens:
                raise UnexpectedAnswer("%s: %d tokens generated of %d asked (ignore_eos)"
                                       % (what, len(answer.tokens), self.max_tokens))
        # The prompt tokens the prefix cache supplied (None where the
        # bindings do not report it: before 0.9.5, and with no reuse).
        details = getattr(usage, "prompt_tokens_details", None)
        return found, (details.cached_tokens if details is not None else 0 if hasattr(usage, "prompt_tokens_details")
                       else None)

    def others_next(self):
        """The next prompt of every other client: its conversation one
        token longer, beginning with its last answer."""
        prompts = []
        for index, other in enumerate(self.others):
            other.append(OTHERS + (index * 97 + len(other) * 31) % (VOCAB - OTHERS))
            prompts.append(list(other))
        return prompts

    def ask(self, ids):
        if self.interleave:
            [other] = self.others_next()[:1]
            found, cached = self.complete(self.runner, other, self.top, 1, "another client's prompt")
            self.others[0][:] = other + found[0].tokens
            self.judge_answers(other, found, "another client's %d-token prompt (%s reused)" % (len(other) + 1, reused(cached)))
        if self.parallel == 1:
            found, cached = self.complete(self.runner, ids, self.top, self.choices, "the prompt")
        else:
            found, cached = self.in_parallel(ids)
        what = "a %d-token prompt (%s reused from the prefix cache)" % (len(ids) + 1, reused(cached))
        self.judge_answers(ids, found, what)
        return found[0].tokens

    def in_parallel(self, ids):
        """The request for `ids` beside one of every other client, all in
        flight at once; the others' answers are judged here. The requests
        stream: a streaming request returns as soon as it is queued (a
        `Runner` serves one blocking call at a time: a second thread's
        call fails with "Already borrowed"), so every one is queued before
        the first is read, and the scheduler runs them together."""
        prompts = self.others_next()
        # The conversation's request goes in the middle of the others.
        middle = len(prompts) // 2
        jobs = [(p, 1, "another client's prompt") for p in prompts]
        jobs.insert(middle, (ids, self.choices, "the prompt"))
        streams = [(self.runner.send_chat_completion_request(self.request(p, self.top, choices, stream=True)),
                    p, choices, what) for p, choices, what in jobs]
        results = [self.read_stream(*each) for each in streams]
        mine = results.pop(middle)
        for index, (prompt, (found, cached)) in enumerate(zip(prompts, results)):
            self.others[index][:] = prompt + found[0].tokens
            self.judge_answers(prompt, found, "another client's %d-token prompt (%s reused), in flight beside a "
                               "%d-token prompt" % (len(prompt) + 1, reused(cached), len(ids) + 1))
        return mine

    def read_stream(self, stream, ids, choices, what):
        """`complete`'s answer, from the chunks of a streaming request."""
        steps = {}
        usage = None
        for chunk in stream:
            for choice in chunk.choices:
                if choice.logprobs is not None:
                    steps.setdefault(choice.index, []).append(choice.logprobs)
            usage = chunk.usage or usage
        if usage is None:
            raise UnexpectedAnswer("%s: a stream without usage" % what)
        return self.check(usage, [steps.get(i, []) for i in range(choices)], ids, choices, what)

    def judge_answers(self, ids, found, what):
        [wanted], _ = self.complete(self.judge, ids, max(self.top, 20), 1, "the cold recompute")
        for number, answer in enumerate(found):
            context = what if len(found) == 1 else "%s, choice %d of %d" % (what, number + 1, len(found))
            for index, got in enumerate(answer.steps):
                if not self.compare(index, got, wanted.steps[index], context):
                    break

    def compare(self, index, got, wanted, what):
        """Raises `RecomputeMismatch` unless mistral.rs's top log-probabilities
        `got` of generated token `index` agree with the judge's `wanted`;
        False when the two best are a tie within the tolerance and pick
        different tokens (what follows cannot be compared)."""
        which = "the first generated token" if index == 0 else "generated token %d" % (index + 1)
        best = (max(got, key=got.get), max(wanted, key=wanted.get))
        if best[0] != best[1]:
            if wanted[best[1]] - wanted.get(best[0], float("-inf")) > self.tolerance:
                raise RecomputeMismatch("%s after %s is %d, a cold recompute gives %d"
                                        % (which, what, best[0], best[1]))
            return False
        worst = max((i for i in got if i in wanted), key=lambda i: abs(got[i] - wanted[i]))
        delta = abs(got[worst] - wanted[worst])
        if delta > self.tolerance:
            raise RecomputeMismatch(
                "the log-probabilities of %s after %s differ from a cold recompute by %.3g (token %d: %.5f against "
                "%.5f; tolerance %g)" % (which, what, delta, worst, got[worst], wanted[worst], self.tolerance))
        return True

    def rewind(self, to):
        self.talk.rewind(to)

    def reset(self):
        self.talk.reset()


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "MistralRs"))
