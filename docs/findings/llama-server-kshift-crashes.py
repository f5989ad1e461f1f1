"""llama.cpp's llama-server dies at its first K shift with two documented
K cache types on the CPU:

- `-ctk bf16`: the K shift ropes the bf16 cache in place, and the CPU rope
  has no bf16 case (ggml-cpu/ops.cpp: GGML_ABORT("fatal error")): SIGABRT.
- a quantized K cache (`-ctk q8_0`, `q4_0`, ...) of a model whose head size
  is not a multiple of 64 (80, 96, 112: Phi-2, Phi-3-mini, ...): the K
  shift multiplies by the Hadamard rotation, which llama.cpp only builds
  for head sizes that are (llama_kv_cache::build_rope_shift calls
  llama_mul_mat_hadamard with rot == nullptr): SIGSEGV.

Both through the server's own options: a generation that fills the
context with `--context-shift`, and a prompt that reuses a chunk of the
cached one at another position with `--cache-reuse N` (no context shift).
Controls: f16 K, and q8_0 K with head size 128 (rotated), survive.

Needs numpy and gguf (pip install numpy gguf); writes tiny random llama
models to a temporary folder, nothing is downloaded:

    python3 docs/findings/llama-server-kshift-crashes.py path/to/llama-server
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import gguf
import numpy as np

VOCAB, EMBD, HEADS, FF = 512, 64, 2, 64


def write_model(path, head_dim):
    """A tiny random two-layer llama model with heads of `head_dim`."""
    rng = np.random.default_rng(0)

    def w(rows, cols):
        return (rng.standard_normal((rows, cols)) * cols ** -0.5).astype(np.float32)

    g = gguf.GGUFWriter(path, "llama")
    g.add_context_length(4096)
    g.add_embedding_length(EMBD)
    g.add_block_count(2)
    g.add_feed_forward_length(FF)
    g.add_head_count(HEADS)
    g.add_head_count_kv(HEADS)
    g.add_key_length(head_dim)
    g.add_value_length(head_dim)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_rope_dimension_count(head_dim)
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
    g.add_tensor("output.weight", w(VOCAB, EMBD))
    kv = HEADS * head_dim
    for layer in range(2):
        for name, array in (
            ("attn_norm", np.ones(EMBD, np.float32)), ("attn_q", w(kv, EMBD)), ("attn_k", w(kv, EMBD)),
            ("attn_v", w(kv, EMBD)), ("attn_output", w(EMBD, kv)), ("ffn_norm", np.ones(EMBD, np.float32)),
            ("ffn_gate", w(FF, EMBD)), ("ffn_up", w(FF, EMBD)), ("ffn_down", w(EMBD, FF)),
        ):
            g.add_tensor("blk.%d.%s.weight" % (layer, name), array)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def complete(port, prompt, n_predict):
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "ignore_eos": True, "cache_prompt": True}
    request = urllib.request.Request("http://127.0.0.1:%d/completion" % port, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def run(server, model, options, requests):
    """Starts llama-server with `options`, sends `requests` [(prompt ids,
    n_predict)] one after another; returns its exit status (None: it
    survived) and the log line that says why it stopped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", "1", "-np", "1"]
                               + options, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2)
                break
            except (urllib.error.URLError, OSError):
                if process.poll() is not None:
                    break
                time.sleep(0.1)
        for prompt, n_predict in requests:
            try:
                complete(port, prompt, n_predict)
            except (urllib.error.URLError, OSError):
                break
        try:
            status = process.wait(5)
        except subprocess.TimeoutExpired:
            status = None
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if "fatal error" in line]
    return status, (lines[-1].strip() if lines else "")


def describe(status):
    if status is None:
        return "survived"
    if status < 0:
        return "exit status %d (%s)" % (status, signal.Signals(-status).name)
    return "exit status %d" % status


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    server = sys.argv[1]
    print(subprocess.run([server, "--version"], capture_output=True, text=True).stderr.strip().splitlines()[0])
    folder = tempfile.mkdtemp()
    models = {}
    for head_dim in (96, 128):
        models[head_dim] = os.path.join(folder, "llama-d%d.gguf" % head_dim)
        write_model(models[head_dim], head_dim)
    prompt = [1] + list(range(300, 370))
    # --context-shift: 70 prompt tokens and 200 generated fill 256.
    shift = (["-c", "256", "--context-shift", "--keep", "4"], [(prompt, 200)])
    # --cache-reuse 4: the second prompt drops 8 tokens of the first, so
    # its last 40 tokens are reused from the cache 8 positions earlier.
    reuse = (["-c", "512", "--cache-reuse", "4"], [(prompt, 1), (prompt[:20] + prompt[28:], 1)])
    crashed = {}
    for cache_type, head_dim in (("f16", 96), ("bf16", 96), ("q8_0", 128), ("q8_0", 96), ("q4_0", 96)):
        for name, (options, requests) in (("--context-shift", shift), ("--cache-reuse 4", reuse)):
            status, why = run(server, models[head_dim], options + ["-ctk", cache_type], requests)
            crashed[(cache_type, head_dim, name)] = status is not None
            print("-ctk %-4s head size %3d %-16s %s %s" % (cache_type, head_dim, name, describe(status), why))
    rest = [key for key in crashed if key[0] in ("f16",) or (key[0], key[1]) == ("q8_0", 128)]
    broken = [key for key in crashed if key not in rest]
    print("the K shift kills the server with bf16 K, and with quantized K at head size 96 only: %s"
          % ("yes" if all(crashed[k] for k in broken) and not any(crashed[k] for k in rest) else "no"))


if __name__ == "__main__":
    main()
