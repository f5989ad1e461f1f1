#!/usr/bin/env python3
"""llama.cpp's `llama-server` as a kvcheck-subject/1 process: the front
door of its slots' KV cache, judged by a cold recompute.

The subject is the server binary itself, unmodified, on a loopback port,
over a tiny GGUF model with random weights (tinymodel.py: a `llama`
model, or a `gemma2` model whose layer 0 slides over a window of 4
tokens). Prompts travel as token ids, each beginning with BOS, as a
tokenized text prompt does. kvcheck's ops become requests to
`POST /completion` (`cache_prompt` on, greedy, `n_probs`):

| kvtrace op | request |
|---|---|
| write `G+n` (append) | the conversation so far and `n` new tokens: a follow-up, beginning with the server's last answer |
| write `s+n`, `s < G` (rewrite) | the first `s` tokens, `n` other tokens, then the rest as it was: an edited turn |
| write `G+0` (probe) | the conversation again: a regenerate |
| rewind `to` | nothing is sent; the next request shares only the first `to` tokens |
| reset | nothing is sent; a new conversation starts (with `--slot rotate`, on the next slot) |

What the server's own options add on the way (they follow `--`):
`--cache-reuse N` reuses chunks of an edited turn by shifting their keys;
`--context-shift --keep N` drops half of what follows the first N tokens
when a generation fills the slot's context; `-np N` gives N slots, chosen
by prompt similarity unless `--slot rotate` names one; `-ctk`/`-ctv`
choose the cache types; `--cache-ram` (on by default) saves and restores
slots' prompts in host memory. `--roundtrip` saves the slot to a file,
erases it and restores it (`/slots/0?action=save|erase|restore`) before
every request; `--interleave` sends a request of another client's
conversation before every request; `--completions N` asks for N
completions of each prompt (`n_cmpl`: the prompt is evaluated once and
shared by N slots); `--draft` adds a draft model (speculative decoding).

**The judge** is a second `llama-server` of the same binary and model,
with the same cache types and flash-attention setting, one slot, no
prompt cache in host memory: each request is sent to it with
`cache_prompt: false`, so it evaluates the whole prompt afresh and
generates as many tokens from there. Where the server shifted its context
(its log says where, and how many tokens it kept and discarded), the
judge is asked again from what the server says it kept: the first
`n_keep` tokens and the ones after the discarded span. The top
log-probabilities of every generated token must agree within
`--tolerance`, and the greedy tokens must be the same unless the two best
are closer than that; otherwise the request raises `RecomputeMismatch`,
which kvcheck reports as a divergence, minimizes and saves. A server that
exits while answering is reported with its exit status and the log line
that says why (`ServerDied`).

A context shift or a reused chunk keeps keys and values that a deeper
layer computed while attending to tokens no longer there, which no
recompute of the kept tokens reproduces: the rows that move keys run a
one-layer model (`--layers 1`), whose keys and values depend on a token
and its position only.

Only configurations that keep every position visible (`growth`, no
window below the capacity) are opened: `kvcheck run --profile growth`.

    adapters/llama-cpp/.venv-server/bin/python adapters/llama-cpp/server_subject.py \\
        [--server PATH] [--model llama|gemma2] [--layers N] [--head-dim 16|32|64] \\
        [--slot auto|rotate] [--max-tokens N] [--tolerance T] [--top K] [--roundtrip] \\
        [--interleave] [--completions N] [--draft] [-- SERVER ARGS...]

The binary is `--server`, else `$LLAMA_SERVER`, else the one
adapters/llama-cpp/server-setup.sh installed in the venv.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

import kvcheck
from kvcheck import adapter as kit
from kvcheck.adapter import FRONT_DOOR_DOMAIN, Conversation, front_door_config

# The tiny models' vocabulary (tinymodel.py, which needs numpy: imported
# at the first open): <unk>, <s>, </s>, the 256 byte tokens, then plain
# tokens.
BOS, FIRST_PLAIN, VOCAB = 1, 3 + 256, 4096
# Prompt content: plain tokens, so no control token is ever sent.
CONTENT = 512
# The judge's context: longer than any conversation the growth profile
# draws, with room for the tokens generated after it.
JUDGE_CONTEXT = 2048
# Server options that change what a request computes (and so the judge
# takes them too), with whether each takes a value.
ARITHMETIC = {"-ctk": True, "--cache-type-k": True, "-ctv": True, "--cache-type-v": True,
              "-fa": True, "--flash-attn": True, "--swa-full": False}
BYTE_TOKENS_BANNED = [[i, False] for i in range(3, FIRST_PLAIN)]
SHIFT = re.compile(r"slot context shift, n_keep = (\d+), n_left = (\d+), n_discard = (\d+)")


class RecomputeMismatch(RuntimeError):
    """The server's answer differs from the cold recompute's."""


class ServerError(Exception):
    """The server answered a request with an error status."""


class ServerDied(RuntimeError):
    """The server process exited while answering."""


def default_binary():
    """`$LLAMA_SERVER`, else what server-setup.sh installed in the venv."""
    if os.environ.get("LLAMA_SERVER"):
        return os.environ["LLAMA_SERVER"]
    venv = os.environ.get("VENV") or os.path.join(HERE, ".venv-server")
    return os.path.join(venv, "bin", "llama-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One `llama-server` process on a loopback port, its log in a file."""

    def __init__(self, binary, model, args, folder, name):
        self.log_path = os.path.join(folder, name + ".log")
        self.log = open(self.log_path, "wb")
        self.port = free_port()
        command = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-t", "1"] + list(args)
        self.command = command
        try:
            self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        except OSError as error:
            raise RuntimeError("cannot start %s: %s (run adapters/llama-cpp/server-setup.sh, or set "
                               "LLAMA_SERVER)" % (binary, error)) from None
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("llama-server exited with status %d at start-up: %s\n%s"
                                   % (self.process.returncode, " ".join(command), self.tail()))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("llama-server did not answer /health in 120 s:\n" + self.tail())
            time.sleep(0.05)
        self.props = self.get("/props")

    def tail(self, lines=12):
        with open(self.log_path, "rb") as f:
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])

    def last_words(self):
        """The log's error lines (an abort's message), else its last line,
        leaving out the stack trace an abort prints."""
        with open(self.log_path, "rb") as f:
            lines = [line for line in f.read().decode(errors="replace").splitlines()
                     if line.strip() and not re.match(r"\s*#\d+ ", line)]
        errors = [line for line in lines if re.search(r"error|GGML_ASSERT|GGML_ABORT|terminate", line)]
        return " | ".join((errors or lines)[-3:]) or "(its log is empty)"

    def log_size(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def log_since(self, offset):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def get(self, path):
        return self.call(urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path)))

    def post(self, path, body):
        return self.call(urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.port, path), data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}))

    def call(self, request):
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ServerError("HTTP %d: %s" % (error.code, error.read().decode(errors="replace")[:300])) from None
        except (urllib.error.URLError, ConnectionError, OSError):
            status = self.wait_exit()
            if status is None:
                raise
            raise ServerDied("llama-server exited with status %d%s while answering: %s"
                             % (status, signal_name(status), self.last_words())) from None

    def wait_exit(self, seconds=5):
        try:
            return self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def complete(self, ids, n_predict, top, slot=None, cache=True, completions=1):
        """Greedy tokens after `ids` and their top log-probabilities:
        ([(the answer, [{id: logprob}] per generated token)], one per
        completion (`completions` > 1 is `n_cmpl`: the prompt is evaluated
        once and shared with other slots), the context shifts logged)."""
        body = {"prompt": ids, "n_predict": n_predict, "n_probs": top, "temperature": 0.0,
                "cache_prompt": cache, "return_tokens": True, "samplers": ["top_k"], "top_k": 1,
                # Every request generates n_predict tokens, the judge's too.
                "ignore_eos": True,
                # A byte token alone is an incomplete UTF-8 sequence, whose
                # probabilities the server holds back with its text: never
                # sample one (the log-probabilities stay those of the model).
                "logit_bias": BYTE_TOKENS_BANNED}
        if slot is not None:
            body["id_slot"] = slot
        if completions > 1:
            body["n_cmpl"] = completions
        offset = self.log_size()
        answers = self.post("/completion", body)
        shifts = [tuple(int(g) for g in m.groups()) for m in SHIFT.finditer(self.log_since(offset))]
        found = [(answer, [{e["id"]: e["logprob"] for e in step["top_logprobs"]}
                           for step in answer["completion_probabilities"]])
                 for answer in (answers if isinstance(answers, list) else [answers])]
        return found, shifts

    def close(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            if self.wait_exit(10) is None:
                self.process.kill()
                self.process.wait()
        self.log.close()


def signal_name(status):
    if status > 128:
        try:
            return " (%s)" % signal.Signals(status - 128).name
        except ValueError:
            return ""
    if status < 0:
        try:
            return " (%s)" % signal.Signals(-status).name
        except ValueError:
            return ""
    return ""


def attended_segments(ids, generated, steps, shifts):
    """Where the server's context shifts cut a generation of `steps`
    tokens after prompt `ids`: [(first step, the tokens attended then)].
    A shift logged as (n_keep, n_left, n_discard) happens before a token
    enters a cache of n_keep + n_left tokens and keeps the first n_keep
    and what follows the n_discard after them."""
    cache, pending, segments = list(ids), list(shifts), [(0, list(ids))]
    for step in range(1, steps):
        if pending and pending[0][0] + pending[0][1] == len(cache):
            n_keep, _, n_discard = pending.pop(0)
            cache = cache[:n_keep] + cache[n_keep + n_discard:]
            cache.append(generated[step - 1])
            segments.append((step, list(cache)))
        else:
            cache.append(generated[step - 1])
    if pending:
        raise RecomputeMismatch("the server logged a context shift of a %d-token cache that its %d-token answer "
                                "to a %d-token prompt never holds" % (pending[0][0] + pending[0][1], steps, len(ids)))
    return segments


class IdConversation(Conversation):
    """A conversation whose tokens are the tiny vocabulary's plain ids."""

    def token(self, position, writer):
        return FIRST_PLAIN - 1 + super().token(position, writer)


class LlamaCppServer(kvcheck.Subject):
    """llama-server's slots behind its HTTP front door (module docs)."""

    dtypes = ("f32", "f16", "bf16")
    variants = ("dense",)
    features = ("growth",)
    values = False
    domain = FRONT_DOOR_DOMAIN

    def __init__(self, binary=None, model="llama", slot="auto", max_tokens=1, tolerance=0.01, top=5,
                 roundtrip=False, server_args=(), layers=2, head_dim=16, completions=1, draft=False,
                 interleave=False):
        options = ["--model %s" % model] + (["--layers %d" % layers] if layers != 2 else [])
        options += ["--head-dim %d" % head_dim] if head_dim != 16 else []
        options += ["--slot %s" % slot] if slot != "auto" else []
        options += ["--max-tokens %d" % max_tokens] if max_tokens != 1 else []
        options += ["--roundtrip"] if roundtrip else []
        options += ["--completions %d" % completions] if completions != 1 else []
        options += ["--draft"] if draft else []
        options += ["--interleave"] if interleave else []
        self.name = " ".join(["llama-server"] + options + list(server_args))
        self.binary = binary or default_binary()
        self.head_dim, self.completions, self.draft = head_dim, completions, draft
        self.interleave, self.interleaved = interleave, 0
        self.model_name, self.layers, self.slot_mode, self.max_tokens = model, layers, slot, max_tokens
        self.tolerance, self.top, self.roundtrip = tolerance, top, roundtrip
        self.server_args = list(server_args)
        if "--context-shift" in self.server_args:
            # A prompt longer than the shifting context (which the server
            # refuses) is answered outside, and the declared domain admits
            # it: such a run declares none.
            self.domain = None
        self.folder = self.model = None
        self.server = self.judge = None
        self.talk = IdConversation(CONTENT)
        self.conversation = 0

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__, "server_subject.py")
        parser.add_argument("--server", help="the llama-server binary (default $LLAMA_SERVER, else the venv's)")
        parser.add_argument("--model", choices=("llama", "gemma2"), default="llama",
                            help="llama: two full-attention layers; gemma2: layer 0 slides over 4 tokens")
        parser.add_argument("--layers", type=int, default=2,
                            help="the model's layers (gemma2: at least 2); a context shift keeps the deeper "
                            "layers' keys and values of what it drops, so only with 1 layer does a recompute "
                            "of the kept tokens describe it")
        parser.add_argument("--head-dim", type=int, choices=(16, 32, 64), default=16,
                            help="32 or 64 for the quantized cache types (they pack blocks of 32 values of a head; "
                            "with 64 llama.cpp also rotates quantized keys by a Hadamard matrix)")
        parser.add_argument("--slot", choices=("auto", "rotate"), default="auto",
                            help="auto: the server picks a slot (prompt similarity, else the least recently "
                            "used); rotate: each conversation names the next slot (id_slot)")
        parser.add_argument("--max-tokens", type=int, default=1, help="tokens generated per request")
        parser.add_argument("--tolerance", type=float, default=0.01,
                            help="log-probability difference allowed (the default K/V cache is f16)")
        parser.add_argument("--top", type=int, default=5)
        parser.add_argument("--roundtrip", action="store_true",
                            help="save, erase and restore the slot (slot 0) before every request")
        parser.add_argument("--completions", type=int, default=1,
                            help="completions per request (n_cmpl): the server evaluates the prompt once and "
                            "shares it with as many slots")
        parser.add_argument("--draft", action="store_true",
                            help="speculative decoding with a draft model (the same architecture with other "
                            "random weights, passed as -md): rejected draft tokens are cut from the caches")
        parser.add_argument("--interleave", action="store_true",
                            help="before every request, one of another client's conversation (growing by a "
                            "token each time, judged too): the server parks idle slots' prompts in host memory "
                            "and brings them back")
        args, rest = parser.parse_known_args(argv)
        if rest and rest[0] == "--":
            rest = rest[1:]
        if args.max_tokens < 1:
            parser.error("--max-tokens must be at least 1")
        if args.completions < 1:
            parser.error("--completions must be at least 1")
        if args.completions > 1 and "--context-shift" in rest:
            parser.error("--completions: the server refuses a context shift of a shared prompt")
        if args.layers < (2 if args.model == "gemma2" else 1):
            parser.error("--layers: llama needs at least 1, gemma2 at least 2 (a sliding layer, then a full one)")
        return cls(args.server, args.model, args.slot, args.max_tokens, args.tolerance, args.top,
                   args.roundtrip, rest, args.layers, args.head_dim, args.completions, args.draft, args.interleave)

    @property
    def global_end(self):
        return len(self.talk.tokens)

    def open(self, config):
        front_door_config(config, "llama-server's models")
        self.close_servers()
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="kvcheck-llama-server-")
            import tinymodel

            window = 4 if self.model_name == "gemma2" else None
            self.model = tinymodel.build(self.folder, self.model_name, layers=self.layers, window=window,
                                         head_dim=self.head_dim)
            if self.draft:
                self.draft_model = tinymodel.build(self.folder, self.model_name, layers=self.layers, window=window,
                                                   head_dim=self.head_dim, seed=1)
        args = list(self.server_args)
        if not any(a in ("-c", "--ctx-size") for a in args):
            args += ["-c", str(JUDGE_CONTEXT)]
        if self.roundtrip:
            args += ["--slot-save-path", self.folder]
        if self.draft:
            args += ["-md", self.draft_model.path]
            if "--spec-type" not in args:
                args += ["--spec-type", "draft-simple"]
        if self.slot_mode == "rotate" and not any(a in ("-np", "--parallel") for a in args):
            args += ["-np", "4"]
        self.server = LlamaServer(self.binary, self.model.path, args, self.folder, "server")
        self.slots = self.server.props.get("total_slots", 1)
        if (self.draft or "--spec-type" in args) and not any(s.get("speculative") for s in self.server.get("/slots")):
            self.close_servers()
            raise RuntimeError("llama-server %s does not speculate (its /slots say so)" % " ".join(args))
        self.judge = LlamaServer(self.binary, self.model.path, self.judge_args(), self.folder, "judge")
        self.talk = IdConversation(CONTENT)
        self.conversation = 0

    def judge_args(self):
        """The server's options that change arithmetic, on one slot with
        no host-memory prompt cache and a context no prompt fills."""
        args, it = ["-np", "1", "-c", str(JUDGE_CONTEXT), "--cache-ram", "0"], iter(self.server_args)
        for arg in it:
            if arg in ARITHMETIC:
                args += [arg, next(it)] if ARITHMETIC[arg] else [arg]
        return args

    def close_servers(self):
        for server in (self.server, self.judge):
            if server is not None:
                server.close()
        self.server = self.judge = None

    def close(self):
        self.close_servers()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def write(self, start, length, heads, recent_window, k, v):
        tokens = self.talk.prompt(start, length, heads, recent_window)
        self.talk.answered(tokens, self.ask([BOS] + tokens))
        return list(range(len(tokens)))

    def slot(self):
        if self.roundtrip:
            return 0
        if self.slot_mode == "rotate":
            return self.conversation % self.slots
        return None

    def ask(self, ids):
        slot = self.slot()
        if self.interleave:
            # Another client's conversation, one token longer each time.
            self.interleaved += 1
            other = [BOS] + [FIRST_PLAIN + CONTENT + i for i in range(2 + self.interleaved)]
            [(answer, steps)], shifts = self.server.complete(other, self.max_tokens, self.top)
            self.judge_steps(other, list(answer["tokens"]), steps, shifts,
                             "another conversation's %d-token prompt (%d reused)"
                             % (len(other), answer["timings"]["cache_n"]))
        if self.roundtrip:
            self.server.post("/slots/0?action=save", {"filename": "slot.bin"})
            self.server.post("/slots/0?action=erase", {})
            self.server.post("/slots/0?action=restore", {"filename": "slot.bin"})
        try:
            answers, shifts = self.server.complete(ids, self.max_tokens, self.top, slot, completions=self.completions)
        except ServerError as error:
            if "exceed" in str(error) and "--context-shift" in self.server_args:
                raise kvcheck.Outside("a prompt of %d tokens: the server refuses one its context cannot hold (%s)"
                                      % (len(ids), error)) from None
            raise
        if len(answers) != self.completions:
            raise RecomputeMismatch("the server answered %d completions of %d asked" % (len(answers), self.completions))
        for answer, steps in answers:
            if answer["tokens_evaluated"] != len(ids):
                raise RecomputeMismatch("the server counted %d prompt tokens of %d sent"
                                        % (answer["tokens_evaluated"], len(ids)))
            what = "a %d-token prompt (%d reused from the slot)" % (len(ids), answer["timings"]["cache_n"])
            if self.completions > 1:
                what = "%s, completion %d of %d (slot %d)" % (what, answer["index"] + 1, self.completions,
                                                            answer["id_slot"])
            # With several completions the server refuses to shift: no shift is logged.
            self.judge_steps(ids, list(answer["tokens"]), steps, shifts, what)
        return [t for t in answers[0][0]["tokens"] if t >= FIRST_PLAIN]

    def judge_steps(self, ids, generated, steps, shifts, what):
        """Compares every generated token's log-probabilities with the
        judge's, asking it again from what the server kept after each of
        its context shifts."""
        segments = attended_segments(ids, generated, len(steps), shifts)
        for (first, attended), stop in zip(segments, [s[0] for s in segments[1:]] + [len(steps)]):
            [(_, wanted)], _ = self.judge.complete(attended, stop - first, max(self.top, 20), cache=False)
            context = what + (", after a context shift" if first else "")
            for index in range(first, stop):
                got = steps[index]
                if not got:
                    # A token a speculative step produced comes with no
                    # probabilities (known upstream: ggml-org/llama.cpp#27972):
                    # its greedy choice, among the tokens not banned, is what
                    # can be compared.
                    want = {i: p for i, p in wanted[index - first].items() if not 3 <= i < FIRST_PLAIN}
                    if not want:
                        return  # the judge's top tokens are all banned ones
                    got = {generated[index]: want.get(generated[index], float("-inf"))}
                else:
                    want = wanted[index - first]
                if not self.compare(index, got, want, context):
                    return

    def compare(self, index, got, wanted, what):
        """Raises `RecomputeMismatch` unless the server's top log-probabilities
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
                "the log-probabilities of %s after %s differ from a cold recompute by %.3g (token %d: %.4f against "
                "%.4f; tolerance %g)" % (which, what, delta, worst, got[worst], wanted[worst], self.tolerance))
        return True

    def rewind(self, to):
        self.talk.rewind(to)

    def reset(self):
        self.talk.reset()
        self.conversation += 1


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "LlamaCppServer"))
