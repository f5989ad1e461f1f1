"""mistral.rs with a sliding-window model on the CPU: a follow-up request
whose prefix comes from the prefix cache, once the conversation is longer
than the window, is answered differently from the same prompt without the
prefix cache, or fails with "argmax received invalid logits".

The prefix cache hands the new request the conversation's sliding-window
KV cache, which holds only the last `window` positions. The request's
tokens are appended to it and attention reads the retained rows and the
new ones; the mask, though, is built over every position of the
conversation (0 .. past + new), and the CPU attention kernel reads each
mask row's first columns for those keys. The keys are then masked as if
they were the conversation's first positions: a query attends a later
token of its own request and misses an earlier one, or, once the
conversation is long enough, attends nothing (NaN logits).

Needs only mistralrs (pip install mistralrs: the CPU wheel); writes a
tiny random Mistral model (one layer sliding over 4 tokens, f32, a
word-level vocabulary) to a temporary folder with the standard library,
nothing is downloaded:

    python3 docs/findings/mistralrs-swa-prefix-mask.py

The last part recomputes the third turn in pure Python (no library): the
answer without the prefix cache is the model's, and the one with it is
what attention computes when each query's mask row is read from its first
columns.
"""

import json
import math
import os
import random
import struct
import sys
import tempfile
from array import array
from importlib.metadata import version

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RUST_LOG", "warn")

import mistralrs  # noqa: E402

VOCAB, EMBD, HEADS, HEAD_DIM, FF, WINDOW = 1024, 32, 2, 16, 64, 4


def write_model(folder):
    """A tiny random Mistral (one layer, sliding_window 4) with a tokenizer
    whose words `t3` .. `t1023` are the token ids they name. Returns the
    weights, for the pure-Python recompute."""
    rng = random.Random(0)
    weights = {}

    def matrix(name, rows, cols, scale=None):
        scale = scale or cols ** -0.5
        weights[name] = [[rng.gauss(0.0, scale) for _ in range(cols)] for _ in range(rows)]

    matrix("model.embed_tokens.weight", VOCAB, EMBD, 1.0)
    matrix("lm_head.weight", VOCAB, EMBD)
    weights["model.norm.weight"] = [1.0] * EMBD
    weights["model.layers.0.input_layernorm.weight"] = [1.0 + 0.1 * rng.gauss(0.0, 1.0) for _ in range(EMBD)]
    weights["model.layers.0.post_attention_layernorm.weight"] = [1.0] * EMBD
    for name, rows, cols in (("self_attn.q_proj", HEADS * HEAD_DIM, EMBD), ("self_attn.k_proj", HEADS * HEAD_DIM, EMBD),
                             ("self_attn.v_proj", HEADS * HEAD_DIM, EMBD), ("self_attn.o_proj", EMBD, HEADS * HEAD_DIM),
                             ("mlp.gate_proj", FF, EMBD), ("mlp.up_proj", FF, EMBD), ("mlp.down_proj", EMBD, FF)):
        matrix("model.layers.0.%s.weight" % name, rows, cols)
    # safetensors, f32: the weights as mistral.rs will read them.
    header, blobs, offset = {}, [], 0
    for name in sorted(weights):
        value = weights[name]
        shape = [len(value), len(value[0])] if isinstance(value[0], list) else [len(value)]
        flat = array("f", [x for row in value for x in row] if len(shape) == 2 else value)
        weights[name] = (shape, flat)
        raw = flat.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))
    config = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": VOCAB,
              "hidden_size": EMBD, "intermediate_size": FF, "num_hidden_layers": 1, "num_attention_heads": HEADS,
              "num_key_value_heads": HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu",
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "sliding_window": WINDOW, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update(("t%d" % i, i) for i in range(3, VOCAB))
    tokenizer = {"version": "1.0", "truncation": None, "padding": None,
                 "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                                   "normalized": False, "special": True}
                                  for c, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))],
                 "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
                 "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                             "use_regex": False},
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    # The chat template writes BOS and the message: a one-message chat is the prompt.
    tokenizer_config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
                        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    for name, value in (("config.json", config), ("tokenizer.json", tokenizer),
                        ("tokenizer_config.json", tokenizer_config),
                        ("generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(value, f)
    return {name: flat for name, (shape, flat) in weights.items()}


def ask(runner, tokens):
    """(greedy token, {token: logprob} of the top 3, prompt tokens the
    prefix cache supplied) for BOS + `tokens`, or the error's message."""
    request = mistralrs.ChatCompletionRequest(
        messages=" ".join("t%d" % t for t in tokens), model="tiny", max_tokens=1, temperature=0.0,
        logprobs=True, top_logprobs=3, ignore_eos=True)
    try:
        response = runner.send_chat_completion_request(request)
    except ValueError as error:
        return str(error).splitlines()[0]
    step = response.choices[0].logprobs.content[0]
    # Reported from 0.9.5 on; "?" before.
    details = getattr(response.usage, "prompt_tokens_details", "?")
    return (int(step.token[1:]), {t.token: round(t.logprob, 4) for t in step.top_logprobs},
            details.cached_tokens if details not in (None, "?") else 0 if details is None else "?")


def recompute(weights, ids, visible):
    """Log-probabilities after the last of `ids`, in pure Python, where
    query i attends key j when visible(i, j)."""
    def rows(name, cols):
        flat = weights[name]
        return [flat[r * cols:(r + 1) * cols] for r in range(len(flat) // cols)]

    def matvec(m, x):
        return [sum(a * b for a, b in zip(row, x)) for row in m]

    def rms(x, w):
        s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + 1e-5)
        return [v * s * wi for v, wi in zip(x, w)]

    def rope(v, pos):
        out = []
        for h in range(HEADS):
            x, half = v[h * HEAD_DIM:(h + 1) * HEAD_DIM], HEAD_DIM // 2
            y = [0.0] * HEAD_DIM
            for i in range(half):
                theta = pos * 10000.0 ** (-2.0 * i / HEAD_DIM)
                c, s = math.cos(theta), math.sin(theta)
                y[i], y[i + half] = x[i] * c - x[i + half] * s, x[i + half] * c + x[i] * s
            out += y
        return out

    p = "model.layers.0."
    embed = rows("model.embed_tokens.weight", EMBD)
    xs = [embed[i] for i in ids]
    ns = [rms(x, weights[p + "input_layernorm.weight"]) for x in xs]
    q = [rope(matvec(rows(p + "self_attn.q_proj.weight", EMBD), n), i) for i, n in enumerate(ns)]
    k = [rope(matvec(rows(p + "self_attn.k_proj.weight", EMBD), n), i) for i, n in enumerate(ns)]
    v = [matvec(rows(p + "self_attn.v_proj.weight", EMBD), n) for n in ns]
    i = len(ids) - 1
    attended = []
    for h in range(HEADS):
        part = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        keys = [j for j in range(len(ids)) if visible(i, j)]
        scores = [sum(a * b for a, b in zip(q[i][part], k[j][part])) / math.sqrt(HEAD_DIM) for j in keys]
        top = max(scores)
        e = [math.exp(s - top) for s in scores]
        attended += [sum(e[n] * v[j][part][d] for n, j in enumerate(keys)) / sum(e) for d in range(HEAD_DIM)]
    hidden = [a + b for a, b in zip(xs[i], matvec(rows(p + "self_attn.o_proj.weight", HEADS * HEAD_DIM), attended))]
    n2 = rms(hidden, weights[p + "post_attention_layernorm.weight"])
    gate, up = matvec(rows(p + "mlp.gate_proj.weight", EMBD), n2), matvec(rows(p + "mlp.up_proj.weight", EMBD), n2)
    act = [g / (1.0 + math.exp(-g)) * u for g, u in zip(gate, up)]
    hidden = [a + b for a, b in zip(hidden, matvec(rows(p + "mlp.down_proj.weight", FF), act))]
    logits = matvec(rows("lm_head.weight", EMBD), rms(hidden, weights["model.norm.weight"]))
    top = max(logits)
    z = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - z for x in logits]


def main():
    print("mistralrs", version("mistralrs"))
    with tempfile.TemporaryDirectory() as folder:
        weights = write_model(folder)

        def runner(prefix_cache_n):
            which = mistralrs.Which.Plain(model_id=folder, dtype=mistralrs.ModelDType.F32)
            return mistralrs.Runner(which=which, prefix_cache_n=prefix_cache_n, token_source="none")

        cached, cold = runner(16), runner(0)
        print("a conversation of three turns, each a follow-up of the one before (window %d):" % WINDOW)
        turn, differ, prompts = [10, 11], False, []
        for number in range(1, 4):
            with_cache, without = ask(cached, turn), ask(cold, turn)
            prompts.append(list(turn))
            print("  turn %d, %d-token prompt (BOS included), %s from the prefix cache:" % (number, len(turn) + 1,
                                                                                          with_cache[2]))
            print("    prefix cache on:  token %d, top log-probabilities %s" % with_cache[:2])
            print("    prefix cache off: token %d, top log-probabilities %s" % without[:2])
            differ = differ or with_cache[:2] != without[:2]
            turn = turn + [with_cache[0], 20 + 10 * number]
        print("a 7-token prompt, then its follow-up:")
        cached, cold = runner(16), runner(0)
        first = list(range(10, 17))
        answer = ask(cached, first)
        follow = first + [answer[0], 500]
        with_cache, without = ask(cached, follow), ask(cold, follow)
        print("  follow-up, %d-token prompt: prefix cache on: %s" % (len(follow) + 1, with_cache if isinstance(
            with_cache, str) else "token %d" % with_cache[0]))
        print("  follow-up, %d-token prompt: prefix cache off: token %d" % (len(follow) + 1, without[0]))
        failed = isinstance(with_cache, str)

        # Turn 3 in pure Python. The prefix cache holds turn 2's prompt
        # (5 positions, 0..4) and keeps the last 4 (1..4); turn 3 appends
        # positions 5 and 6. The keys attention reads are positions
        # 1, 2, 3, 4, 5, 6, and the kernel reads each query's mask row from
        # column 0: key number c is masked as position c would be.
        ids = [1] + prompts[2]
        past, keys = len(prompts[1]) + 1, None
        keys = list(range(past - WINDOW, len(ids)))

        def window(i, j):
            return i - WINDOW < j <= i

        def as_read(i, j):
            return j in keys and window(i, keys.index(j))

        right, read = recompute(weights, ids, window), recompute(weights, ids, as_read)
        for name, lp in (("window of 4 (the model)", right), ("mask read from its first columns", read)):
            best = sorted(range(VOCAB), key=lambda t: -lp[t])[:3]
            print("turn 3 in pure Python, %s: token %d, top log-probabilities %s"
                  % (name, best[0], {t: round(lp[t], 4) for t in best}))
        print("a follow-up on a prefix-cached sliding window differs from the same prompt without the prefix "
              "cache: %s; fails: %s" % ("yes" if differ else "no", "yes" if failed else "no"))
        return 1 if differ or failed else 0


if __name__ == "__main__":
    sys.exit(main())
