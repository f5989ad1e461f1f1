#!/usr/bin/env python3
"""mlx_lm.server on Llama 4: a *regenerate* request (the same prompt sent
again) after the conversation passed attention_chunk_size tokens answers
from a prompt cache trimmed below the rows ChunkedKVCache already dropped.

mlx-lm only (mlx-lm 0.32.2, mlx[cpu] 0.32.4). The script writes a tiny
Llama 4 with random weights (seed 0) to a temporary folder: 4 layers,
attention_chunk_size 4 (layers 0-2 ChunkedKVCache, layer 3 KVCache),
vocabulary 64, and a word-level tokenizer whose word wN is token N. Then it
starts `python -m mlx_lm.server --model <folder> --port <free port>` and
sends, through /v1/completions (greedy, top 11 log-probabilities per
token):

  1. a 6-token prompt, 8 tokens generated: the first request on a fresh
     server, a fresh prefill. The server then keeps the cache of the prompt
     and the generated tokens; before each forward pass Llama 4 calls
     ChunkedKVCache.maybe_trim_front(), so its chunked layers keep only the
     last 4 positions.
  2. the same prompt again (regenerate). LRUPromptCache.fetch_nearest_cache
     finds the longer cached sequence and trims it back to the prompt's
     first 5 tokens. The chunked layers no longer hold the start of
     position 5's attention chunk, and ChunkedKVCache.trim stops at
     start_position, so those layers end at another offset than the
     KVCache layer; the last prompt token is then computed on that cache.

Each answer's first-token log-probabilities are compared, on the tokens the
server returns, with a fresh prefill of the prompt in this process
(mlx_lm.load of the same folder, make_prompt_cache, one forward pass). A
second, fresh server answering the prompt once gives the fresh answer too.

    python mlx-lm-chunked-trim-below-dropped-front-server.py
"""

import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import mlx.core as mx
import mlx_lm
from mlx_lm.models import llama4
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCAB = 64
CONFIG = dict(
    model_type="llama4",
    text_config=dict(
        attention_bias=False, attention_chunk_size=4, head_dim=8, hidden_size=32,
        interleave_moe_layer_step=4, intermediate_size=32, intermediate_size_mlp=32,
        max_position_embeddings=4096, model_type="llama4_text", num_attention_heads=4,
        num_experts_per_tok=1, num_hidden_layers=4, num_key_value_heads=2,
        num_local_experts=1, rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0,
        use_qk_norm=False, vocab_size=VOCAB, tie_word_embeddings=False,
    ),
)
PROMPT = "w1 w2 w3 w4 w5 w6"
MAX_TOKENS = 8


def write_model(path):
    mx.random.seed(0)
    model = llama4.Model(llama4.ModelArgs.from_dict(CONFIG))
    mx.eval(model.parameters())
    model.save_weights(os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as out:
        json.dump(CONFIG, out)
    tokenizer = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as out:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "w%d" % (VOCAB - 1)}, out)


class Server:
    def __init__(self, path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlx_lm.server", "--model", path, "--port", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % self.port, timeout=5).read()
                return
            except OSError:
                if self.process.poll() is not None or time.time() > deadline:
                    self.log.seek(0)
                    sys.exit("the server did not start:\n" + self.log.read().decode(errors="replace"))
                time.sleep(0.5)

    def complete(self, prompt):
        body = dict(prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.0, logprobs=True, top_logprobs=11)
        request = urllib.request.Request(
            "http://127.0.0.1:%d/v1/completions" % self.port,
            data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        steps = answer["choices"][0]["logprobs"]["content"]
        cached = answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        # The generated tokens, from the text (word wN is token N): with top_logprobs
        # each entry's "id" is the first of its top list, not the sampled token.
        tokens = [int(word[1:]) for word in answer["choices"][0]["text"].split()]
        first = {entry["id"]: entry["logprob"] for entry in steps[0]["top_logprobs"]}
        return tokens, first, cached

    def close(self):
        self.process.terminate()
        self.process.wait()


def main():
    print("mlx-lm", mlx_lm.__version__, "mlx", mx.__version__)
    path = tempfile.mkdtemp(prefix="llama4-tiny-")
    write_model(path)

    # The judge: a fresh prefill of the prompt, in this process.
    model, tokenizer = mlx_lm.load(path)
    ids = tokenizer.encode(PROMPT)
    cache = mlx_lm.models.cache.make_prompt_cache(model)
    logits = model(mx.array([ids]), cache=cache)[0, -1]
    fresh = (logits - mx.logsumexp(logits)).tolist()
    print("prompt %s: %d tokens, attention_chunk_size 4, caches %s"
          % (ids, len(ids), [type(c).__name__ for c in cache]))

    def report(name, answer):
        tokens, first, cached = answer
        delta = max(abs(lp - fresh[i]) for i, lp in first.items())
        print("%-26s cached_tokens %d, greedy tokens %s" % (name + ":", cached, tokens))
        print("%-26s max |first-token logprob - fresh prefill| = %.4f over its top %d"
              % ("", delta, len(first)))
        return tokens, delta

    server = Server(path)
    try:
        first_tokens, _ = report("request 1 (fresh server)", server.complete(PROMPT))
        again_tokens, delta = report("request 2 (regenerate)", server.complete(PROMPT))
    finally:
        server.close()
    server = Server(path)
    try:
        fresh_tokens, _ = report("another fresh server", server.complete(PROMPT))
    finally:
        server.close()

    # What the server's prompt cache did for request 2, the same calls in this process.
    cache, key = mlx_lm.models.cache.make_prompt_cache(model), ids[:]
    for response in mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=MAX_TOKENS, prompt_cache=cache):
        key.append(response.token)
    print("after request 1 the server keeps %d tokens %s: offsets %s, chunked start_position %d"
          % (len(key), key, [c.offset for c in cache], cache[0].start_position))
    lru = mlx_lm.models.cache.LRUPromptCache()
    lru.insert_cache("llama4", key, copy.deepcopy(cache))
    reused, rest = lru.fetch_nearest_cache("llama4", ids)
    if reused is None:
        print("request 2: fetch_nearest_cache reuses nothing, a fresh prefill of %s" % rest)
    else:
        print("request 2: fetch_nearest_cache trims it by %d to reuse %d tokens, rest %s: offsets %s"
              % (len(key) - len(ids) + 1, len(ids) - len(rest), rest, [c.offset for c in reused]))
    print("           trim_prompt_cache(cache, %d) returns %d"
          % (len(key) - len(ids) + 1, mlx_lm.models.cache.trim_prompt_cache(cache, len(key) - len(ids) + 1)))

    wrong = delta > 1e-3 or again_tokens != fresh_tokens
    print("regenerate %s the fresh prefill (greedy tokens %s)"
          % ("differs from" if wrong else "agrees with", "differ" if again_tokens != fresh_tokens else "equal"))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
