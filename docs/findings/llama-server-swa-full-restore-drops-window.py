"""llama.cpp's llama-server with --swa-full (a sliding-window model whose
SWA cache keeps every row): a prompt that reuses part of a state the server
brought back (the host-memory prompt cache, on by default, or a slot file
restored through /slots) is answered differently from a cold recompute.

The state the server saves for a slot is written by the KV cache's state
writer, which leaves out the rows of a sliding-window layer that the next
position no longer reads (the masked ones), even with --swa-full. The
server sets its own n_swa to 0 with --swa-full and so takes such a state as
complete: when the new prompt keeps only its first tokens, the positions
evaluated next attend a window whose first rows are missing.

Needs numpy and gguf (pip install numpy gguf); writes a tiny random
Gemma 2 model (layer 0 slides over 4 tokens, layer 1 is global) to a
temporary folder, nothing is downloaded:

    python3 docs/findings/llama-server-swa-full-restore-drops-window.py path/to/llama-server
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import gguf
import numpy as np

VOCAB, EMBD, HEADS, HEAD_DIM, FF, WINDOW = 512, 32, 2, 16, 64, 4


def write_model(path):
    """A tiny random Gemma 2: layer 0 slides over WINDOW tokens, layer 1 is global."""
    rng = np.random.default_rng(0)

    def w(rows, cols):
        return (rng.standard_normal((rows, cols)) * cols ** -0.5).astype(np.float32)

    g = gguf.GGUFWriter(path, "gemma2")
    g.add_context_length(4096)
    g.add_embedding_length(EMBD)
    g.add_block_count(2)
    g.add_feed_forward_length(FF)
    g.add_head_count(HEADS)
    g.add_head_count_kv(HEADS)
    g.add_key_length(HEAD_DIM)
    g.add_value_length(HEAD_DIM)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_rope_dimension_count(HEAD_DIM)
    g.add_sliding_window(WINDOW)
    g.add_attn_logit_softcapping(50.0)
    g.add_final_logit_softcapping(30.0)
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = [b"<unk>", b"<s>", b"</s>"] + [("<0x%02X>" % i).encode() for i in range(256)]
    tokens += [("\u2581t%d" % i).encode() for i in range(VOCAB - len(tokens))]
    g.add_tokenizer_model("llama")
    g.add_token_list(tokens)
    g.add_token_scores([0.0] * VOCAB)
    g.add_token_types([3, 3, 3] + [6] * 256 + [1] * (VOCAB - 259))
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)
    g.add_tensor("token_embd.weight", rng.standard_normal((VOCAB, EMBD)).astype(np.float32))
    g.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    kv = HEADS * HEAD_DIM
    for layer in range(2):
        for name, array in (
            ("attn_norm", np.ones(EMBD, np.float32)), ("attn_q", w(kv, EMBD)), ("attn_k", w(kv, EMBD)),
            ("attn_v", w(kv, EMBD)), ("attn_output", w(EMBD, kv)), ("post_attention_norm", np.ones(EMBD, np.float32)),
            ("ffn_norm", np.ones(EMBD, np.float32)), ("ffn_gate", w(FF, EMBD)), ("ffn_up", w(FF, EMBD)),
            ("ffn_down", w(EMBD, FF)), ("post_ffw_norm", np.ones(EMBD, np.float32)),
        ):
            g.add_tensor("blk.%d.%s.weight" % (layer, name), array)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


class Server:
    def __init__(self, binary, model, options, log):
        # f32 K/V: a cold recompute is then exact.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.process = subprocess.Popen(
            [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-t", "1",
             "-ctk", "f32", "-ctv", "f32"] + options, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=2)
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        sys.exit("llama-server did not start")

    def post(self, path, body):
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def first_logprobs(self, prompt, cache):
        """The top-10 log-probabilities of the token after `prompt`, and
        how many prompt tokens came from the slot's cache."""
        answer = self.post("/completion", {"prompt": prompt, "n_predict": 1, "n_probs": 10, "temperature": 0.0,
                                           "cache_prompt": cache})
        top = {e["id"]: e["logprob"] for e in answer["completion_probabilities"][0]["top_logprobs"]}
        return top, answer["timings"]["cache_n"]

    def close(self):
        self.process.terminate()
        self.process.wait()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    print(subprocess.run([binary, "--version"], capture_output=True, text=True).stderr.strip().splitlines()[0])
    folder = tempfile.mkdtemp()
    model = os.path.join(folder, "gemma2.gguf")
    write_model(model)
    log = open(os.path.join(folder, "server.log"), "w")
    cold = Server(binary, model, ["-np", "1", "--cache-ram", "0"], log)
    # A conversation, an edit of its second token, then a long prompt that
    # shares only the first two tokens with both.
    first, edited = [1, 300, 301, 302, 303], [1, 300, 310, 302, 303]
    long = [1, 300] + list(range(320, 338))
    worst = {}
    try:
        for way in ("the host-memory prompt cache (default options)", "/slots save, erase, restore"):
            print(way + ", --swa-full:")
            if way.startswith("/slots"):
                options, prompts = ["--swa-full", "-np", "1", "--slot-save-path", folder], [first, long]
            else:
                options, prompts = ["--swa-full"], [first, edited, long]
            server = Server(binary, model, options, log)
            try:
                for number, prompt in enumerate(prompts, 1):
                    if number > 1 and way.startswith("/slots"):
                        server.post("/slots/0?action=save", {"filename": "slot.bin"})
                        server.post("/slots/0?action=erase", {})
                        server.post("/slots/0?action=restore", {"filename": "slot.bin"})
                    got, reused = server.first_logprobs(prompt, cache=True)
                    want, _ = cold.first_logprobs(prompt, cache=False)
                    delta = max(abs(got[i] - want[i]) for i in got if i in want)
                    worst[way] = max(worst.get(way, 0.0), delta)
                    print("  prompt %d: %d tokens, %d from the cache: first-token log-probabilities %.4f off a "
                          "cold recompute" % (number, len(prompt), reused, delta))
            finally:
                server.close()
    finally:
        cold.close()
    print("a prompt reusing part of a state brought back differs from a cold recompute: %s"
          % ("yes" if all(d > 1e-3 for d in worst.values()) else "no"))


if __name__ == "__main__":
    main()
