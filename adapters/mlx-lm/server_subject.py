#!/usr/bin/env python3
"""mlx-lm's server, `mlx_lm.server`, as a kvcheck-subject/1 process: the
front door of its prompt cache, judged by a fresh prefill.

The subject is the library's serving path, not a cache class. The server
runs unmodified in this process (its own command line, `ModelProvider`,
`LRUPromptCache`, `ResponseGenerator`, its batched and sequential
generation, its HTTP handler on a loopback port) over a tiny model with
random weights written to a temporary folder (config.json, safetensors,
a word-level tokenizer whose word `wN` is token N). kvcheck's ops become
requests:

| kvtrace op | request to `POST /v1/completions` |
|---|---|
| write `G+n` (append) | the conversation so far and `n` new tokens: a follow-up |
| write `s+n`, `s < G` (rewrite) | the first `s` tokens, `n` other tokens, then the rest as it was: an edited turn, which shares only a prefix with what the server cached |
| write `G+0` (probe) | the conversation again: a regenerate |
| rewind `to` | nothing is sent; the conversation is cut to its first `to` tokens, so the next request shares that prefix |
| reset | nothing is sent; a new conversation starts (the server keeps its prompt cache) |

Every request asks for greedy tokens (one, or `--max-tokens`) with the
top log-probabilities of each. The judge is the same model without a
cache: a fresh prefill of exactly the prompt and the tokens generated
before each one (`--judge prefill`, the default), or, for a server whose
arithmetic depends on the cache by design (`--kv-bits` quantizes what it
caches), the same request to a second server whose prompt cache is
emptied first (`--judge cold`). Log-probabilities further apart than
`--tolerance` raise `RecomputeMismatch`, so kvcheck reports the request
as a divergence, minimizes it and saves it.

The view kvcheck compares is the positions the server's model attends:
every token of the prompt (these models keep every token in their global
layers; the sliding and chunked layers are checked by the logits). Only
configurations that keep every position visible (`growth`, no window
below the capacity) are opened; `kvcheck run --profile growth` draws them.

    adapters/mlx-lm/.venv/bin/python adapters/mlx-lm/server_subject.py \\
        [--model llama|llama4|gemma3|qwen3-next] [--path batch|single] \\
        [--judge prefill|cold] [--tolerance T] [--top K] [--api text|chat] \\
        [--max-tokens N] [--draft MODEL] [--mask exact-hit] [-- SERVER ARGS...]

SERVER ARGS are `mlx_lm.server` options, passed to its own parser after
`--` (for example `-- --kv-bits 8 --quantized-kv-start 0`).
"""

import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request

import kvcheck
from kvcheck import adapter as kit
from kvcheck.adapter import FRONT_DOOR_DOMAIN, Conversation, front_door_config

VOCAB = 64
# Words of the chat template: roles and the end of a message. Prompt
# content uses tokens 1 .. CONTENT, the end-of-sequence token is VOCAB - 1.
MARKERS = {"system": 60, "user": 61, "end": 62}
CONTENT = 59
# The word of each token id, one each: a follow-up sends the server's own
# answer back as text, so every id the model can generate (a marker too)
# must come back as itself.
WORDS = [{v: k for k, v in MARKERS.items()}.get(i, "w%d" % i) for i in range(VOCAB)]
# A chat template with the shape of real ones: a role header, the content,
# an end marker, so a system prompt's tokens end where the user's begin.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} end {% endfor %}"
# The most top log-probabilities the server returns (its `top_logprobs`
# limit).
SERVER_TOP = 11
# The model folders this process wrote, removed when it ends.
FOLDERS = []

# Tiny configurations of the architectures whose caches the server holds:
# each small enough that a request takes milliseconds, each with the cache
# layout of the real family (what `make_prompt_cache` builds for it).
MODELS = {
    # KVCache in every layer; batchable (the server's BatchGenerator).
    "llama": dict(
        model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
        # head_dim 64: a whole quantization group of --kv-bits (group size 64)
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
        vocab_size=VOCAB, rope_theta=10000.0, tie_word_embeddings=True,
    ),
    # Llama 4: three ChunkedKVCache layers (attention chunks of 4 tokens),
    # then a KVCache layer; not batchable (ChunkedKVCache has no merge), so
    # the server serves it sequentially.
    "llama4": dict(
        model_type="llama4",
        text_config=dict(
            attention_bias=False, attention_chunk_size=4, head_dim=8, hidden_size=32,
            interleave_moe_layer_step=4, intermediate_size=32, intermediate_size_mlp=32,
            max_position_embeddings=4096, model_type="llama4_text", num_attention_heads=4,
            num_experts_per_tok=1, num_hidden_layers=4, num_key_value_heads=2,
            num_local_experts=1, rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0,
            use_qk_norm=False, vocab_size=VOCAB, tie_word_embeddings=False,
        ),
    ),
    # Gemma 3: RotatingKVCache(max_size=sliding_window) in five of every six
    # layers, KVCache in the sixth; batchable.
    "gemma3": dict(
        model_type="gemma3_text", hidden_size=32, num_hidden_layers=6, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6,
        vocab_size=VOCAB, sliding_window=4, sliding_window_pattern=6,
        query_pre_attn_scalar=8, max_position_embeddings=4096,
    ),
    # Qwen3-Next: gated-delta linear attention (ArraysCache, not trimmable)
    # in three of every four layers, KVCache in the fourth; batchable.
    "qwen3-next": dict(
        model_type="qwen3_next", hidden_size=32, num_hidden_layers=4, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=0, num_experts_per_tok=1, decoder_sparse_step=1,
        shared_expert_intermediate_size=32, mlp_only_layers=[0, 1, 2, 3], moe_intermediate_size=32,
        rms_norm_eps=1e-6, vocab_size=VOCAB, rope_theta=10000.0, partial_rotary_factor=0.5,
        max_position_embeddings=4096, full_attention_interval=4,
    ),
}


# Requests of a known finding held back (answered outside, which cuts the
# case there), so that a search looks past it: name -> (what it holds
# back, the test on (subject, prompt ids)).
MASKS = {
    "exact-hit": (
        "a prompt that is exactly a sequence the prompt cache holds (the server takes it with "
        "nothing left to compute; known upstream: ml-explore/mlx-lm#1215, #1887)",
        lambda subject, ids: subject.server.exact_hit(ids),
    ),
}


class RecomputeMismatch(RuntimeError):
    """The server's answer differs from the same model's without a cache."""


class TinyModel:
    """A model folder `mlx_lm.load` and `mlx_lm.server --model` accept:
    random weights (of `seed`), the config, and a word-level tokenizer."""

    def __init__(self, name, seed=0):
        import mlx.core as mx
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        from mlx_lm.utils import _get_classes

        config = MODELS[name]
        self.path = tempfile.mkdtemp(prefix="kvcheck-mlx-%s-" % name)
        FOLDERS.append(self.path)
        model_class, args_class = _get_classes(config)
        mx.random.seed(seed)
        model = model_class(args_class.from_dict(config))
        mx.eval(model.parameters())
        model.save_weights(os.path.join(self.path, "model.safetensors"))
        with open(os.path.join(self.path, "config.json"), "w") as out:
            json.dump(config, out)
        tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="w0"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        tokenizer.save(os.path.join(self.path, "tokenizer.json"))
        with open(os.path.join(self.path, "tokenizer_config.json"), "w") as out:
            json.dump(
                {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "w%d" % (VOCAB - 1),
                 "chat_template": CHAT_TEMPLATE},
                out,
            )


class Server:
    """`mlx_lm.server` on a loopback port, as its `main()` builds it from
    its own command line: the model provider, a fresh `LRUPromptCache`,
    the `ResponseGenerator` thread, and the HTTP handler."""

    def __init__(self, model_path, server_args):
        import mlx_lm.server as server

        captured = {}
        argv = sys.argv
        run = server.run
        # main() parses the command line and hands run() the provider; the
        # provider is all this needs from it (run() would block serving).
        server.run = lambda host, port, provider, **_: captured.update(provider=provider)
        try:
            sys.argv = ["mlx_lm.server", "--model", model_path, "--log-level", "ERROR"] + list(server_args)
            server.main()
        finally:
            server.run, sys.argv = run, argv
        provider = captured["provider"]
        self.prompt_cache = server.LRUPromptCache(provider.cli_args.prompt_cache_size)
        self.generator = server.ResponseGenerator(provider, self.prompt_cache)
        generator = self.generator

        class Handler(server.APIHandler):
            def log_message(self, *_):
                pass  # one line per request would drown kvcheck's progress

        self.httpd = server.ThreadingHTTPServer(
            ("127.0.0.1", 0),
            lambda *a, **k: Handler(generator, *a, system_fingerprint=server.get_system_fingerprint(), **k),
        )
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def complete(self, body):
        """The server's answer to `body` (a completion request, greedy):
        (prompt tokens it counted, cached tokens it reused, the top
        log-probabilities {id: logprob} of each generated token)."""
        chat = "messages" in body
        request = urllib.request.Request(
            "http://127.0.0.1:%d/v1/%s" % (self.port, "chat/completions" if chat else "completions"),
            data=json.dumps(dict(body, temperature=0.0, logprobs=True)).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ServerError("HTTP %d: %s" % (error.code, error.read().decode(errors="replace")[:300])) from None
        except http.client.RemoteDisconnected:
            # What a client sees when the generation raises: the handler
            # re-raises it and the connection closes with no status.
            raise ServerError("the server closed the connection without a response (its log says why)") from None
        usage = answer["usage"]
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        steps = [{e["id"]: e["logprob"] for e in step["top_logprobs"]} for step in answer["choices"][0]["logprobs"]["content"]]
        return usage["prompt_tokens"], cached, steps

    def exact_hit(self, ids):
        """Whether the prompt cache holds exactly `ids` (for any model)."""
        return any(
            self.prompt_cache._trie.search(model, ids).exact is not None
            for model in list(self.prompt_cache._trie._trie)
        )

    def forget(self):
        """Empties the prompt cache (what `--prompt-cache-size 0` keeps)."""
        self.prompt_cache.trim_to(n_sequences=0)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.generator.stop_and_join()


class ServerError(Exception):
    """The server answered the request with an error status."""


class MlxLmServer(kvcheck.Subject):
    """The server's prompt cache behind its HTTP front door (module docs)."""

    dtypes = ("f32", "f16", "bf16")
    variants = ("dense",)
    features = ("growth",)
    values = False
    # What a client sends.
    domain = FRONT_DOOR_DOMAIN

    def __init__(self, model="llama", path="batch", judge="prefill", tolerance=1e-3, top=5, server_args=(),
                 api="text", system=0, reply=True, max_tokens=1, masks=(), draft=None):
        options = ["--%s" % path] if path != "batch" else []
        options += ["--api chat --system %d" % system] if api == "chat" else []
        options += [] if reply else ["--no-reply"]
        options += ["--max-tokens %d" % max_tokens] if max_tokens != 1 else []
        options += ["--mask %s" % mask for mask in masks]
        options += ["--draft %s" % draft] if draft else []
        self.draft_name, self.draft = draft, None
        self.masks = list(masks)
        if self.masks:
            # A mask answers outside to requests the declared domain
            # admits: a masked run declares none, so those only cut.
            self.domain = None
        self.name = " ".join(["mlx_lm.server", model] + options + list(server_args))
        self.model_name, self.seeded, self.judge = model, path == "single", judge
        self.tolerance, self.top, self.server_args = tolerance, min(top, SERVER_TOP), list(server_args)
        self.api, self.system, self.reply_follows = api, system, reply and api == "text"
        self.max_tokens = max_tokens
        self.model = None  # written at the first open: hello needs no mlx
        self.server = self.cold = None
        self.reference = None
        self.talk = Conversation(CONTENT)

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__, "server_subject.py")
        parser.add_argument("--model", choices=sorted(MODELS), default="llama")
        parser.add_argument("--path", choices=("batch", "single"), default="batch",
                            help="batch: plain requests (BatchGenerator where the model allows); "
                            "single: requests with a seed, served by stream_generate")
        parser.add_argument("--judge", choices=("prefill", "cold"), default="prefill")
        parser.add_argument("--tolerance", type=float, default=1e-3)
        parser.add_argument("--top", type=int, default=5)
        parser.add_argument("--api", choices=("text", "chat"), default="text",
                            help="text: /v1/completions; chat: /v1/chat/completions, whose segments "
                            "(system prompt, user turn) the server caches apart")
        parser.add_argument("--system", type=int, default=4,
                            help="with --api chat: the first N tokens of a longer prompt are the system message")
        parser.add_argument("--no-reply", dest="reply", action="store_false",
                            help="a follow-up does not begin with the tokens the server answered")
        parser.add_argument("--max-tokens", type=int, default=1)
        parser.add_argument("--draft", choices=sorted(MODELS),
                            help="speculative decoding: a draft model of this architecture (other random "
                            "weights, the same vocabulary) passed as --draft-model; the server then serves "
                            "every request sequentially and trims rejected draft tokens from both caches")
        parser.add_argument("--mask", action="append", default=[], choices=sorted(MASKS),
                            help="hold back the requests of a known finding (answered outside the domain)")
        args, rest = parser.parse_known_args(argv)
        if rest and rest[0] == "--":
            rest = rest[1:]
        return cls(args.model, args.path, args.judge, args.tolerance, args.top, rest,
                   args.api, args.system, args.reply, args.max_tokens, args.mask, args.draft)

    @property
    def global_end(self):
        return len(self.talk.tokens)

    def open(self, config):
        front_door_config(config, "the server's models")
        self.close_servers()
        if self.model is None:
            self.model = TinyModel(self.model_name)
            if self.draft_name:
                self.draft = TinyModel(self.draft_name, seed=1)
        args = self.server_args + (["--draft-model", self.draft.path] if self.draft else [])
        self.server = Server(self.model.path, args)
        if self.judge == "cold":
            self.cold = Server(self.model.path, args)
        elif self.reference is None:
            from mlx_lm import load

            self.reference = load(self.model.path)[0]
        self.talk = Conversation(CONTENT)

    def close_servers(self):
        for server in (self.server, self.cold):
            if server is not None:
                server.close()
        self.server = self.cold = None

    def write(self, start, length, heads, recent_window, k, v):
        # A follow-up begins with the server's own answer, as a client that
        # continues the conversation sends it back (text API).
        tokens = self.talk.prompt(start, length, heads, recent_window, follow=self.reply_follows)
        self.talk.answered(tokens, self.ask(tokens))
        return list(range(len(tokens)))

    def body(self, tokens, top):
        body = {"max_tokens": self.max_tokens, "top_logprobs": top}
        if self.seeded:
            # A request with a seed is never batched: the server serves it
            # through stream_generate (`_serve_single`).
            body["seed"] = 0
        if self.api == "chat":
            body["messages"] = [{"role": role, "content": words(content)} for role, content in self.messages(tokens)]
        else:
            body["prompt"] = words(tokens)
        return body

    def messages(self, tokens):
        """The chat messages of a prompt: a system message of the first
        `--system` tokens when the prompt is longer, then the user's."""
        if 0 < self.system < len(tokens):
            return [("system", tokens[: self.system]), ("user", tokens[self.system:])]
        return [("user", tokens)]

    def prompt_ids(self, tokens):
        """The token ids the server's template makes of a prompt."""
        if self.api != "chat":
            return list(tokens)
        ids = []
        for role, content in self.messages(tokens):
            ids += [MARKERS[role]] + list(content) + [MARKERS["end"]]
        return ids

    def ask(self, tokens):
        ids = self.prompt_ids(tokens)
        for mask in self.masks:
            about, test = MASKS[mask]
            if test(self, ids):
                raise kvcheck.Outside("--mask %s: %s" % (mask, about))
        counted, cached, steps = self.server.complete(self.body(tokens, self.top))
        if counted != len(ids):
            raise RecomputeMismatch("the server counted %d prompt tokens of %d sent" % (counted, len(ids)))
        generated = [max(step, key=step.get) for step in steps]
        for index, (got, wanted) in enumerate(zip(steps, self.expected(tokens, ids, generated))):
            self.compare(index, got, wanted, "a %d-token prompt (%d reused from the prompt cache)" % (len(ids), cached))
        return generated

    def compare(self, index, got, wanted, what):
        """Raises `RecomputeMismatch` unless the server's top log-probabilities
        `got` of generated token `index` agree with the judge's `wanted`."""
        which = "first" if index == 0 else "generated token %d's" % (index + 1)
        best = (max(got, key=got.get), max(wanted, key=wanted.get))
        if best[0] != best[1] and wanted[best[1]] - wanted.get(best[0], float("-inf")) > self.tolerance:
            raise RecomputeMismatch(
                "the %s greedy token after %s is %d, %s gives %d" % (which, what, best[0], self.judge_name(), best[1])
            )
        # The cold judge returns the server's top tokens only: compare those
        # both sides list.
        worst = max((i for i in got if i in wanted), key=lambda i: abs(got[i] - wanted[i]))
        delta = abs(got[worst] - wanted[worst])
        if delta > self.tolerance:
            raise RecomputeMismatch(
                "%s-token log-probabilities of %s differ from %s by %.3g (token %d: %.4f against %.4f; tolerance %g)"
                % (which, what, self.judge_name(), delta, worst, got[worst], wanted[worst], self.tolerance)
            )

    def judge_name(self):
        return "a fresh prefill" if self.judge == "prefill" else "a cold request"

    def expected(self, tokens, ids, generated):
        """The judge's log-probabilities {id: logprob} of each token the
        server generated after the prompt (`ids` as the server's template
        makes them), given the tokens generated before it."""
        if self.judge == "cold":
            self.cold.forget()
            return self.cold.complete(self.body(tokens, SERVER_TOP))[2]
        import mlx.core as mx
        from mlx_lm.models.cache import make_prompt_cache

        sequence = ids + generated[:-1]
        logits = self.reference(mx.array([sequence]), cache=make_prompt_cache(self.reference))[0, len(ids) - 1 :]
        logits = logits.astype(mx.float32)
        logprobs = (logits - mx.logsumexp(logits, axis=-1, keepdims=True)).tolist()
        return [dict(enumerate(row)) for row in logprobs]

    def rewind(self, to):
        self.talk.rewind(to)

    def reset(self):
        self.talk.reset()


def words(tokens):
    return " ".join(WORDS[t] for t in tokens)


if __name__ == "__main__":
    status = kit.main(__file__, "MlxLmServer")
    for folder in FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
    # mlx's teardown at interpreter exit sometimes aborts once it has
    # computed; the protocol is over by then: leave without it.
    kit.leave(status)
