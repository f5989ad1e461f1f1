"""Tiny randomly initialised GGUF models for the llama.cpp adapter.

Written with the `gguf` package at test time (no download): a `llama`
model (full attention, RoPE "norm") and a `gemma2` model whose layer 0 is a
sliding-window layer (`sliding_window` = the window asked for; layer 1 is
a full-attention layer; RoPE "neox"). Both carry an SPM-style vocabulary
(`<unk>`, `<s>`, `</s>`, the 256 byte tokens, then plain tokens) that
llama.cpp loads but the adapter never tokenizes with: it feeds token ids.

Besides the file, `build` returns the layer-0 tables the adapter needs to
recognise a cache row: for every token, the K row before RoPE and the V
row that layer 0 computes from the token alone (RMSNorm of the embedding,
times the norm weight, through W_k / W_v). Layer 0's K/V depend on the
token and its position only, never on other tokens, which is what makes a
cache row identifiable.
"""

import os

import numpy as np

VOCAB = 4096
FIRST_PLAIN = 3 + 256  # <unk> <s> </s>, then the byte tokens
N_EMBD = 32
N_HEAD = 2
HEAD_DIM = 16
N_FF = 64
RMS_EPS = 1e-5
ROPE_BASE = 10000.0

ARCHS = ("llama", "gemma2")


class TinyModel:
    """A written GGUF file and the layer-0 tables of its tokens."""

    def __init__(self, path, arch, layers, window, k0, v0, head_dim=16):
        self.path = path
        self.arch = arch
        self.layers = layers
        self.window = window
        self.k0 = k0  # [VOCAB, N_HEAD * HEAD_DIM], before RoPE
        self.v0 = v0  # [VOCAB, N_HEAD * HEAD_DIM]
        self.head_dim = head_dim
        self.n_head_kv = N_HEAD
        self.rope_base = ROPE_BASE
        self.neox = arch == "gemma2"
        self.first_token = FIRST_PLAIN
        self.vocab = VOCAB

    def rope(self, rows, positions):
        """RoPE of `rows` ([n, heads * head_dim], f64) at `positions` ([n]),
        as ggml's rope of this model's type rotates them."""
        head_dim = self.head_dim
        rows = np.asarray(rows, dtype=np.float64).reshape(len(positions), N_HEAD, head_dim)
        half = head_dim // 2
        inv = ROPE_BASE ** (-2.0 * np.arange(half) / head_dim)
        theta = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        if self.neox:
            x0, x1 = rows[..., :half], rows[..., half:]
        else:
            x0, x1 = rows[..., 0::2], rows[..., 1::2]
        y0 = x0 * cos - x1 * sin
        y1 = x0 * sin + x1 * cos
        out = np.empty_like(rows)
        if self.neox:
            out[..., :half], out[..., half:] = y0, y1
        else:
            out[..., 0::2], out[..., 1::2] = y0, y1
        return out.reshape(len(positions), N_HEAD * head_dim)


def build(directory, arch="llama", layers=1, window=None, seed=0, head_dim=HEAD_DIM):
    """Writes the model to `directory` (once per arguments) and returns a
    TinyModel. `head_dim` 32 lets llama.cpp quantize the K/V cache (its
    quantized types pack blocks of 32 values of a head)."""
    import gguf

    if arch not in ARCHS:
        raise ValueError("arch %r: expected one of %s" % (arch, ", ".join(ARCHS)))
    if arch == "gemma2" and (window is None or window < 1 or layers < 2):
        raise ValueError("gemma2 needs a window >= 1 and at least 2 layers (layer 0 slides, layer 1 is full)")
    rng = np.random.default_rng(seed)
    kv = N_HEAD * head_dim

    def weight(rows, cols, scale=None):
        return (rng.standard_normal((rows, cols)) * (scale or cols ** -0.5)).astype(np.float32)

    embd = weight(VOCAB, N_EMBD, 1.0)
    tensors = {"token_embd.weight": embd, "output_norm.weight": np.ones(N_EMBD, np.float32)}
    if arch == "llama":
        tensors["output.weight"] = weight(VOCAB, N_EMBD)
    for i in range(layers):
        b = "blk.%d." % i
        tensors[b + "attn_norm.weight"] = (1.0 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32)
        tensors[b + "attn_q.weight"] = weight(kv, N_EMBD)
        tensors[b + "attn_k.weight"] = weight(kv, N_EMBD)
        tensors[b + "attn_v.weight"] = weight(kv, N_EMBD)
        tensors[b + "attn_output.weight"] = weight(N_EMBD, kv)
        tensors[b + "ffn_norm.weight"] = np.ones(N_EMBD, np.float32)
        tensors[b + "ffn_gate.weight"] = weight(N_FF, N_EMBD)
        tensors[b + "ffn_up.weight"] = weight(N_FF, N_EMBD)
        tensors[b + "ffn_down.weight"] = weight(N_EMBD, N_FF)
        if arch == "gemma2":
            tensors[b + "post_attention_norm.weight"] = np.ones(N_EMBD, np.float32)
            tensors[b + "post_ffw_norm.weight"] = np.ones(N_EMBD, np.float32)

    name = "%s-l%d-w%s-s%d%s.gguf" % (arch, layers, window or 0, seed, "" if head_dim == HEAD_DIM else "-d%d" % head_dim)
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        tmp = path + ".%d.tmp" % os.getpid()
        w = gguf.GGUFWriter(tmp, arch)
        w.add_context_length(4096)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(layers)
        w.add_feed_forward_length(N_FF)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_layer_norm_rms_eps(RMS_EPS)
        w.add_rope_freq_base(ROPE_BASE)
        w.add_rope_dimension_count(head_dim)
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        if arch == "gemma2":
            w.add_sliding_window(window)
            w.add_attn_logit_softcapping(50.0)
            w.add_final_logit_softcapping(30.0)
        tokens = [b"<unk>", b"<s>", b"</s>"] + [("<0x%02X>" % i).encode() for i in range(256)]
        tokens += [("\u2581t%d" % i).encode() for i in range(VOCAB - len(tokens))]
        types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
        types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (VOCAB - FIRST_PLAIN)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(VOCAB - FIRST_PLAIN)])
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        for tensor_name, array in tensors.items():
            w.add_tensor(tensor_name, array)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)

    # Layer 0 from the token alone: gemma2 scales the embedding by
    # sqrt(n_embd) first (RMSNorm makes that matter only through eps).
    x = embd.astype(np.float64)
    if arch == "gemma2":
        x = x * np.sqrt(N_EMBD)
    normed = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + RMS_EPS)
    normed = normed * tensors["blk.0.attn_norm.weight"].astype(np.float64)
    k0 = normed @ tensors["blk.0.attn_k.weight"].astype(np.float64).T
    v0 = normed @ tensors["blk.0.attn_v.weight"].astype(np.float64).T
    return TinyModel(path, arch, layers, window, k0, v0, head_dim)
