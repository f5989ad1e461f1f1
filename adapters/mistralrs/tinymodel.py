"""Tiny randomly initialised models in the Hugging Face layout, for the
mistral.rs front door (subject.py).

Written with the standard library alone (no numpy, no torch, no
download): a folder with `config.json`, `model.safetensors` (f32),
`tokenizer.json`, `tokenizer_config.json` and `generation_config.json`,
which mistral.rs loads as a plain model (`Which.Plain(model_id=folder)`)
on the CPU. Three architectures:

| arch | attention |
|---|---|
| `llama` | full, RoPE |
| `mistral` | every layer slides over `window` tokens (`sliding_window`); without one, full |
| `gemma2` | even layers slide over `window` tokens, odd layers are full; logit soft-capping |

The vocabulary maps text to tokens one to one: `<unk>`, `<s>`, `</s>`,
then the words `t3` .. `t1023`, split at whitespace (`WhitespaceSplit`,
`WordLevel`), so that a prompt written as words is exactly the token ids
it names, and a generated token's text names its id. The chat template
writes BOS and the message as it is: a one-message chat is the prompt.
"""

import json
import os
import random
import struct
from array import array

VOCAB = 1024
FIRST_PLAIN = 3  # <unk> <s> </s>, then the words t3 .. t1023
BOS, EOS = 1, 2
N_EMBD = 32
N_HEAD = 2
HEAD_DIM = 16
N_FF = 64
RMS_EPS = 1e-5
ROPE_BASE = 10000.0

ARCHS = ("llama", "mistral", "gemma2")
SPECIALS = ("<unk>", "<s>", "</s>")
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"


def word(token):
    """The text of plain token `token`."""
    return "t%d" % token


def text(tokens):
    """The prompt text of plain tokens `tokens` (BOS is the template's)."""
    return " ".join(word(t) for t in tokens)


def token_of(piece):
    """The id of one token's text: `t<id>` or a special token; None for
    any other text."""
    if piece in SPECIALS:
        return SPECIALS.index(piece)
    if piece.startswith("t") and piece[1:].isdigit():
        token = int(piece[1:])
        if FIRST_PLAIN <= token < VOCAB and word(token) == piece:
            return token
    return None


def folder_name(arch, layers, window, seed):
    return "%s-l%d-w%d-s%d" % (arch, layers, window or 0, seed)


def build(directory, arch="llama", layers=2, window=None, seed=0):
    """Writes the model into a folder under `directory` (once per
    arguments) and returns the folder's path."""
    if arch not in ARCHS:
        raise ValueError("arch %r: expected one of %s" % (arch, ", ".join(ARCHS)))
    if layers < 1:
        raise ValueError("layers %d: at least 1" % layers)
    if window is not None and window < 1:
        raise ValueError("window %d: at least 1" % window)
    if arch == "gemma2" and (window is None or layers < 2):
        raise ValueError("gemma2 needs a window and at least 2 layers (layer 0 slides, layer 1 is full)")
    if arch == "llama" and window is not None:
        raise ValueError("llama has no sliding window: use mistral or gemma2")
    path = os.path.join(directory, folder_name(arch, layers, window, seed))
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tmp = "%s.%d.tmp" % (path, os.getpid())
    os.makedirs(tmp, exist_ok=True)
    write_weights(os.path.join(tmp, "model.safetensors"), arch, layers, seed)
    dump(os.path.join(tmp, "config.json"), config(arch, layers, window))
    dump(os.path.join(tmp, "tokenizer.json"), tokenizer())
    dump(os.path.join(tmp, "tokenizer_config.json"), {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"})
    dump(os.path.join(tmp, "generation_config.json"), {"bos_token_id": BOS, "eos_token_id": EOS})
    os.replace(tmp, path)
    return path


def dump(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


def config(arch, layers, window):
    common = {
        "vocab_size": VOCAB, "hidden_size": N_EMBD, "intermediate_size": N_FF, "num_hidden_layers": layers,
        "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD, "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096, "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_BASE,
        "tie_word_embeddings": False, "bos_token_id": BOS, "eos_token_id": EOS, "torch_dtype": "float32",
    }
    if arch == "llama":
        return dict(common, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu")
    if arch == "mistral":
        return dict(common, architectures=["MistralForCausalLM"], model_type="mistral", hidden_act="silu",
                    sliding_window=window)
    return dict(common, architectures=["Gemma2ForCausalLM"], model_type="gemma2",
                hidden_activation="gelu_pytorch_tanh", attention_bias=False, sliding_window=window,
                attn_logit_softcapping=50.0, final_logit_softcapping=30.0, query_pre_attn_scalar=HEAD_DIM)


def tokenizer():
    """A word-level tokenizer.json: whitespace splits words, each word is
    one token (the specials are added tokens, matched before splitting)."""
    vocab = {piece: i for i, piece in enumerate(SPECIALS)}
    vocab.update((word(i), i) for i in range(FIRST_PLAIN, VOCAB))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": piece, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, piece in enumerate(SPECIALS)],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        # mistral.rs's grammar support (llguidance) reads every vocabulary
        # through its decoder and refuses a tokenizer without one; the
        # words are ASCII, which the byte-level decoder leaves as they are.
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def write_weights(path, arch, layers, seed):
    rng = random.Random(seed)
    tensors = {}
    kv = N_HEAD * HEAD_DIM
    # Gemma's RMSNorm multiplies by 1 + weight: its neutral weight is 0.
    unit = 0.0 if arch == "gemma2" else 1.0

    def matrix(name, rows, cols, scale=None):
        scale = scale or cols ** -0.5
        tensors[name] = ([rows, cols], array("f", (rng.gauss(0.0, scale) for _ in range(rows * cols))))

    def norm(name, jitter=0.0):
        tensors[name] = ([N_EMBD], array("f", (unit + jitter * rng.gauss(0.0, 1.0) for _ in range(N_EMBD))))

    matrix("model.embed_tokens.weight", VOCAB, N_EMBD, 1.0)
    matrix("lm_head.weight", VOCAB, N_EMBD)
    norm("model.norm.weight")
    for i in range(layers):
        b = "model.layers.%d." % i
        norm(b + "input_layernorm.weight", 0.1)
        norm(b + "post_attention_layernorm.weight")
        if arch == "gemma2":
            norm(b + "pre_feedforward_layernorm.weight")
            norm(b + "post_feedforward_layernorm.weight")
        matrix(b + "self_attn.q_proj.weight", kv, N_EMBD)
        matrix(b + "self_attn.k_proj.weight", kv, N_EMBD)
        matrix(b + "self_attn.v_proj.weight", kv, N_EMBD)
        matrix(b + "self_attn.o_proj.weight", N_EMBD, kv)
        matrix(b + "mlp.gate_proj.weight", N_FF, N_EMBD)
        matrix(b + "mlp.up_proj.weight", N_FF, N_EMBD)
        matrix(b + "mlp.down_proj.weight", N_EMBD, N_FF)
    # safetensors: an 8-byte little-endian header length, the JSON header
    # (padded to 8 bytes), then the tensors' bytes (little-endian f32).
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, data = tensors[name]
        if struct.pack("=f", 1.0) != struct.pack("<f", 1.0):
            data.byteswap()
        raw = data.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in blobs:
            f.write(raw)
