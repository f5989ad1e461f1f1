#!/usr/bin/env python3
"""mlx_lm.server: a prompt that is exactly a sequence its prompt cache holds
(the previous prompt followed by the previous completion, as a client sends
it to continue a text) is answered with no completion; on the batched path
the generation thread dies and every later request fails.

Uses only mlx-lm (and its dependency `tokenizers`): writes a tiny Llama with
random weights and a word-level tokenizer to a temporary folder, starts
`python -m mlx_lm.server --model FOLDER --port PORT` as the user would, and
sends plain HTTP requests.

    python mlx-lm-server-exact-hit-kills-generation.py [--seed]

--seed adds `"seed": 0` to each request: the server then serves it with
`stream_generate` (the sequential path every non-batchable model, a draft
model or --kv-bits takes) instead of its BatchGenerator.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def tiny_llama(folder):
    import mlx.core as mx
    from mlx_lm.models import llama
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = dict(
        model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
        vocab_size=64, rope_theta=10000.0, tie_word_embeddings=True,
    )
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    model.save_weights(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump(config, out)
    tokenizer = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(64)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as out:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "w63"}, out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete(port, prompt, seed):
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    if seed:
        body["seed"] = 0
    request = urllib.request.Request(
        "http://127.0.0.1:%d/v1/completions" % port,
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
            return "200 %r" % answer["choices"][0]["text"], answer["choices"][0]["text"]
    except urllib.error.HTTPError as error:
        return "HTTP %d %s" % (error.code, error.read().decode(errors="replace").strip()[:120]), None
    except (http.client.RemoteDisconnected, ConnectionResetError):
        return "connection closed without a response", None


def main():
    seed = "--seed" in sys.argv[1:]
    folder = tempfile.mkdtemp(prefix="mlx-exact-hit-")
    tiny_llama(folder)
    port = free_port()
    log = open(os.path.join(folder, "server.log"), "w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm.server", "--model", folder, "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        import mlx_lm

        print("mlx-lm %s, %s path" % (mlx_lm.__version__, "sequential (seed)" if seed else "batched"))
        prompt = "w1 w2 w3 w4"
        status, text = complete(port, prompt, seed)
        print("1. %-34s -> %s" % (repr(prompt), status))
        follow = prompt + " " + text.strip()
        status, _ = complete(port, follow, seed)
        print("2. %-34s -> %s   (the prompt and its completion: expected 200)" % (repr(follow), status))
        other = "w9 w8 w7"
        status, _ = complete(port, other, seed)
        print("3. %-34s -> %s   (a new conversation: expected 200)" % (repr(other), status))
        time.sleep(0.5)
        log.seek(0)
        errors = [line.strip() for line in log if line.split(":")[0].endswith("Error")]
        print("server log: %s" % (errors[0] if errors else "no error"))
        print("server process: %s" % ("running" if server.poll() is None else "exited %d" % server.returncode))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
