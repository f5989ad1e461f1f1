#!/usr/bin/env python3
"""mlx_lm.server with --draft-model: the prompt cache it saves after a
request holds one token fewer than the key it is saved under, so a
follow-up that continues the conversation is computed without that token
and with the rest one position early.

Uses only mlx-lm (and its dependency `tokenizers`): writes two tiny Llamas
with random weights (the target and a draft, the same word-level
tokenizer) to temporary folders, starts

    python -m mlx_lm.server --model TARGET --draft-model DRAFT --port PORT

as the user would, and sends plain HTTP requests to /v1/completions
(greedy, the top 11 log-probabilities of each token). Each answer's
first-token log-probabilities are compared with a fresh prefill of the same
prompt in this process (`mlx_lm.load` of the target, no cache reused).
Then it replays the request in process with `stream_generate`, as the
server's `_serve_single` calls it, and prints what the saved cache holds.

    python mlx-lm-server-draft-cache-one-short.py

Exit status 1 when a reused cache gives other log-probabilities than the
fresh prefill.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

VOCAB = 64
TOP = 11


def tiny_llama(folder, seed):
    import mlx.core as mx
    from mlx_lm.models import llama
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = dict(
        model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
        vocab_size=VOCAB, rope_theta=10000.0, tie_word_embeddings=True,
    )
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    model.save_weights(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump(config, out)
    tokenizer = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as out:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "w%d" % (VOCAB - 1)}, out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete(port, tokens, max_tokens):
    """(cached tokens, generated tokens, first-token top log-probabilities)."""
    body = {"prompt": " ".join("w%d" % t for t in tokens), "max_tokens": max_tokens,
            "temperature": 0.0, "logprobs": True, "top_logprobs": TOP}
    request = urllib.request.Request(
        "http://127.0.0.1:%d/v1/completions" % port,
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    steps = answer["choices"][0]["logprobs"]["content"]
    cached = answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    generated = [max(step["top_logprobs"], key=lambda e: e["logprob"])["id"] for step in steps]
    return cached, generated, {e["id"]: e["logprob"] for e in steps[0]["top_logprobs"]}


def fresh_prefill(model, tokens):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    logits = model(mx.array([tokens]), cache=make_prompt_cache(model))[0, -1].astype(mx.float32)
    return (logits - mx.logsumexp(logits)).tolist()


def start(target, draft):
    port = free_port()
    command = [sys.executable, "-m", "mlx_lm.server", "--model", target, "--port", str(port)]
    command += ["--draft-model", draft] if draft else []
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def main():
    import mlx.core as mx
    import mlx_lm
    from mlx_lm import load, stream_generate
    from mlx_lm.models.cache import make_prompt_cache

    target, draft = tempfile.mkdtemp(prefix="mlx-target-"), tempfile.mkdtemp(prefix="mlx-draft-")
    tiny_llama(target, seed=0)
    tiny_llama(draft, seed=1)
    model, tokenizer = load(target)
    print("mlx-lm %s mlx %s: --model <tiny llama, seed 0> --draft-model <tiny llama, seed 1>"
          % (mlx_lm.__version__, mx.__version__))

    prompt, max_tokens = [1, 2, 3, 4, 5], 4
    server, port = start(target, draft)
    try:
        cached, answer, first = complete(port, prompt, max_tokens)
        worst = max(abs(first[i] - fresh_prefill(model, prompt)[i]) for i in first)
        print("request 1 %s: cached_tokens %d, greedy tokens %s" % (prompt, cached, answer))
        print("          max |first-token logprob - fresh prefill| = %.4f over its top %d" % (worst, TOP))
        follow = prompt + answer + [7, 8]
        cached, tokens, first = complete(port, follow, max_tokens)
        delta = max(abs(first[i] - fresh_prefill(model, follow)[i]) for i in first)
        print("request 2 %s (the conversation, then two tokens):" % follow)
        print("          cached_tokens %d, greedy tokens %s" % (cached, tokens))
        print("          max |first-token logprob - fresh prefill| = %.4f over its top %d" % (delta, TOP))
    finally:
        server.terminate()
        server.wait()
    server, port = start(target, None)
    try:
        cached, tokens, first = complete(port, follow, max_tokens)
        worst = max(abs(first[i] - fresh_prefill(model, follow)[i]) for i in first)
        print("request 2 to a server without a draft model: cached_tokens %d, greedy tokens %s" % (cached, tokens))
        print("          max |first-token logprob - fresh prefill| = %.4f over its top %d" % (worst, TOP))
    finally:
        server.terminate()
        server.wait()

    # Request 1 as the server's `_serve_single` runs it: the target's and
    # the draft's caches in one list, `stream_generate` with the draft
    # model and the server's default --num-draft-tokens (3), then
    # `insert_cache(prompt + every generated token, cache)`.
    draft_model = load(draft)[0]
    cache = make_prompt_cache(model) + make_prompt_cache(draft_model)
    key = list(prompt)
    for gen in stream_generate(model, tokenizer, mx.array(prompt), max_tokens=max_tokens, prompt_cache=cache,
                               draft_model=draft_model, num_draft_tokens=3, sampler=lambda x: mx.argmax(x, axis=-1)):
        key.append(gen.token)
    layers = len(model.layers)
    print("request 1 in process, as _serve_single runs it: prompt and answer, the key it saves under, %d tokens %s"
          % (len(key), key))
    print("          the cache's target layers hold %s tokens, its draft layers %s"
          % ([c.offset for c in cache[:layers]], [c.offset for c in cache[layers:]]))
    if delta > 1e-3:
        print("the follow-up reused a cache one token short: it differs from the fresh prefill")
        return 1
    print("the follow-up agrees with the fresh prefill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
