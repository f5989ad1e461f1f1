"""llama.cpp (llama-cpp-python 0.3.36, vendored llama.cpp 0c1e57098): a
sequence state saved after llama_memory_seq_add and before the next
llama_decode holds the shifted positions but K rows still rotated for the
old ones; the pending K shift is not saved, so the restored sequence attends
with wrongly rotated keys.

Needs llama-cpp-python, gguf and numpy (adapters/llama-cpp/setup.sh builds
them); writes a tiny random one-layer llama model, nothing is downloaded.

    adapters/llama-cpp/.venv/bin/python docs/findings/llama-cpp-state-saves-unshifted-keys.py
"""

import ctypes
import os
import sys
import tempfile

import gguf
import llama_cpp as ll
import numpy as np

VOCAB, EMBD, HEADS, HEAD_DIM, FF = 512, 32, 2, 16, 64


def write_model(path):
    """A tiny random llama model with one layer (K/V of a token depend on
    the token and its position only, so a fresh decode is an exact oracle)."""
    rng = np.random.default_rng(0)

    def w(rows, cols):
        return (rng.standard_normal((rows, cols)) * cols ** -0.5).astype(np.float32)

    g = gguf.GGUFWriter(path, "llama")
    g.add_context_length(4096)
    g.add_embedding_length(EMBD)
    g.add_block_count(1)
    g.add_feed_forward_length(FF)
    g.add_head_count(HEADS)
    g.add_head_count_kv(HEADS)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_rope_dimension_count(HEAD_DIM)
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = [b"<unk>", b"<s>", b"</s>"] + [("<0x%02X>" % i).encode() for i in range(256)]
    tokens += [("\u2581t%d" % i).encode() for i in range(VOCAB - len(tokens))]
    g.add_tokenizer_model("llama")
    g.add_token_list(tokens)
    g.add_token_scores([0.0] * VOCAB)
    g.add_token_types([3, 3, 3] + [6] * 256 + [1] * (VOCAB - 259))
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)
    g.add_tensor("token_embd.weight", (rng.standard_normal((VOCAB, EMBD))).astype(np.float32))
    g.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    g.add_tensor("output.weight", w(VOCAB, EMBD))
    kv = HEADS * HEAD_DIM
    for name, array in (
        ("attn_norm", np.ones(EMBD, np.float32)), ("attn_q", w(kv, EMBD)), ("attn_k", w(kv, EMBD)),
        ("attn_v", w(kv, EMBD)), ("attn_output", w(EMBD, kv)), ("ffn_norm", np.ones(EMBD, np.float32)),
        ("ffn_gate", w(FF, EMBD)), ("ffn_up", w(FF, EMBD)), ("ffn_down", w(EMBD, FF)),
    ):
        g.add_tensor("blk.0.%s.weight" % name, array)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def context(model):
    params = ll.llama_context_default_params()
    params.n_ctx = 256
    params.n_threads = params.n_threads_batch = 1
    params.type_k = params.type_v = ll.GGML_TYPE_F32
    ctx = ll.llama_init_from_model(model, params)
    assert ctx
    return ctx


def decode(ctx, tokens, first_pos):
    """Decodes tokens at first_pos.. in sequence 0; the last one's logits."""
    batch = ll.llama_batch_init(len(tokens), 0, 1)
    for i, t in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, first_pos + i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1
    batch.n_tokens = len(tokens)
    assert ll.llama_decode(ctx, batch) == 0
    ll.llama_batch_free(batch)
    return np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, -1), shape=(VOCAB,)).copy()


@ll.llama_log_callback
def quiet(level, text, user):
    pass


def main():
    path = os.path.join(tempfile.mkdtemp(), "tiny.gguf")
    write_model(path)
    ll.llama_log_set(quiet, ctypes.c_void_p(0))
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    model = ll.llama_model_load_from_file(path.encode(), params)
    prompt, new = [300, 301, 302, 303, 304, 305], 306

    # A: decode 6 tokens, then llama-server's context shift with n_keep = 1,
    # n_discard = 2 (positions 1, 2 go; 3..5 move to 1..3), and save the state.
    a = context(model)
    decode(a, prompt, 0)
    mem = ll.llama_get_memory(a)
    ll.llama_memory_seq_rm(mem, 0, 1, 3)
    ll.llama_memory_seq_add(mem, 0, 3, -1, -2)
    size = ll.llama_state_seq_get_size(a, 0)
    state = (ctypes.c_uint8 * size)()
    assert ll.llama_state_seq_get_data(a, state, size, 0) == size

    # B: a fresh context restoring that state.
    b = context(model)
    assert ll.llama_state_seq_set_data(b, state, size, 0) == size

    # C: the cache-free oracle: the kept tokens decoded afresh at 0..3.
    c = context(model)
    decode(c, [prompt[0]] + prompt[3:], 0)

    logits = {name: decode(ctx, [new], 4) for name, ctx in (("A (shifted in place)", a), ("B (restored)", b), ("C (fresh decode)", c))}
    ref = logits["C (fresh decode)"]
    scale = np.abs(ref).max()
    print("logits of the next token at position 4, max |x - C| / max |C|:")
    for name, value in logits.items():
        print("  %-22s %.2e" % (name, np.abs(value - ref).max() / scale))
    wrong = np.abs(logits["B (restored)"] - ref).max() / scale > 1e-3
    right = np.abs(logits["A (shifted in place)"] - ref).max() / scale < 1e-3
    print("restored state attends with keys rotated for the old positions:", "yes" if wrong else "no")
    return 0 if (wrong and right) else 1


if __name__ == "__main__":
    sys.exit(main())
