"""mistral.rs as a subject: its tiny models, its request mapping, and the
library against a cold recompute.

The first tests need only the standard library (the tiny models are
written with it). The rest load mistral.rs (two `Runner`s: the subject and
its judge) and need the environment of adapters/mistralrs/setup.sh; without
it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/mistralrs/tests -v
    adapters/mistralrs/.venv/bin/python -m unittest discover -s adapters/mistralrs/tests -v
"""

import contextlib
import io
import json
import os
import struct
import sys
import tempfile
import unittest

import kvcheck
from kvcheck.adapter import FRONT_DOOR_CONFIG as GROWTH
from kvcheck.adapter import front_door_write as write
from kvcheck.adapter import load_file, load_module, shared

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
kvtrace_replay = shared("kvtrace_replay")
# What subject.py imports by name when a subject opens: the tiny models.
tinymodel = load_module(ADAPTER, "tinymodel")
subject = load_file(os.path.join(ADAPTER, "subject.py"), "mistralrs_subject")

VENV = os.environ.get("VENV") or os.path.join(ADAPTER, ".venv")
try:
    import mistralrs  # noqa: F401

    HAVE_LIBRARY = os.path.exists(os.path.join(VENV, "KVCHECK_MISTRALRS_READY"))
except ImportError:
    HAVE_LIBRARY = False
SKIP = "mistral.rs environment absent: run adapters/mistralrs/setup.sh, then this with its venv's python"


def safetensors_header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


class TinyModels(unittest.TestCase):
    def test_words_are_tokens_one_to_one(self):
        for token in (tinymodel.FIRST_PLAIN, 500, tinymodel.VOCAB - 1):
            self.assertEqual(tinymodel.token_of(tinymodel.word(token)), token)
        self.assertEqual(tinymodel.token_of("</s>"), tinymodel.EOS)
        for wrong in ("t", "t01", "t2", "t%d" % tinymodel.VOCAB, "x5", " t5", ""):
            self.assertIsNone(tinymodel.token_of(wrong), wrong)
        self.assertEqual(tinymodel.text([3, 10, 1023]), "t3 t10 t1023")

    def test_the_files_mistral_rs_loads(self):
        with tempfile.TemporaryDirectory() as folder:
            for arch, layers, window in (("llama", 1, None), ("mistral", 2, 4), ("gemma2", 2, 4)):
                path = tinymodel.build(folder, arch, layers, window)
                with open(os.path.join(path, "config.json")) as f:
                    config = json.load(f)
                self.assertEqual(config["model_type"], arch)
                self.assertEqual(config.get("sliding_window"), window)
                header = safetensors_header(os.path.join(path, "model.safetensors"))
                self.assertEqual(header["model.embed_tokens.weight"]["shape"], [tinymodel.VOCAB, tinymodel.N_EMBD])
                self.assertEqual(sum(1 for name in header if name.endswith("q_proj.weight")), layers)
                self.assertEqual(os.path.getsize(os.path.join(path, "model.safetensors")),
                                 8 + len(json.dumps(header)) + max(e["data_offsets"][1] for e in header.values())
                                 + (-len(json.dumps(header)) % 8))
                with open(os.path.join(path, "tokenizer.json")) as f:
                    vocab = json.load(f)["model"]["vocab"]
                self.assertEqual(len(vocab), tinymodel.VOCAB)
                self.assertTrue(all(tinymodel.token_of(piece) == token for piece, token in vocab.items()))
                # Built once per arguments.
                self.assertEqual(tinymodel.build(folder, arch, layers, window), path)

    def test_wrong_models_are_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            for arch, layers, window in (("gpt2", 1, None), ("llama", 1, 4), ("gemma2", 1, 4), ("gemma2", 2, None),
                                         ("mistral", 0, None), ("mistral", 1, 0)):
                with self.assertRaises(ValueError, msg=(arch, layers, window)):
                    tinymodel.build(folder, arch, layers, window)


class Mapping(unittest.TestCase):
    def test_the_vocabulary_is_the_tiny_models(self):
        self.assertEqual((subject.BOS, subject.FIRST_PLAIN, subject.VOCAB),
                         (tinymodel.BOS, tinymodel.FIRST_PLAIN, tinymodel.VOCAB))

    def test_prompt_tokens_are_plain_and_apart_from_other_clients(self):
        talk = subject.IdConversation(subject.CONTENT)
        for writer in range(1, 20):
            for position in range(200):
                t = talk.token(position, writer)
                self.assertTrue(subject.FIRST_PLAIN <= t < subject.OTHERS, t)
        s = subject.MistralRs(parallel=3)
        s.others = [[], []]
        for _ in range(50):
            for prompt in s.others_next():
                self.assertTrue(all(subject.OTHERS <= t < subject.VOCAB for t in prompt))

    def test_options(self):
        s = subject.MistralRs.from_args(["--model", "mistral", "--prefix-cache", "0", "--parallel", "4"])
        self.assertEqual((s.window, s.prefix_cache, s.parallel), (4, 0, 4))
        self.assertEqual(s.name, "mistral.rs --model mistral --window 4 --prefix-cache 0 --parallel 4")
        self.assertEqual(subject.MistralRs.from_args([]).name, "mistral.rs --model llama")
        for wrong in (["--model", "llama", "--window", "4"], ["--model", "gemma2", "--layers", "1"],
                      ["--window", "0", "--model", "mistral"], ["--max-tokens", "0"], ["--parallel", "0"],
                      ["--prefix-cache", "-1"], ["--tolerance", "-1"], ["--dtype", "q8_0"]):
            # argparse explains on stderr, which the test keeps quiet.
            with self.assertRaises(SystemExit, msg=wrong), contextlib.redirect_stderr(io.StringIO()):
                subject.MistralRs.from_args(wrong)

    def test_the_domain_is_the_front_doors(self):
        self.assertIsNone(kvcheck.subject.domain_problem(subject.MistralRs.domain))
        self.assertIsNotNone(subject.MistralRs().capabilities().get("domain"))

    def test_only_configs_where_every_token_is_attended_open(self):
        s = subject.MistralRs()
        for config in (dict(GROWTH, growth=False), dict(GROWTH, window=3)):
            with self.assertRaises(kvcheck.Outside):
                s.open(config)
        self.assertIsNone(s.runner, "a refused config loads no model")

    @unittest.skipIf(HAVE_LIBRARY, "mistralrs is installed here")
    def test_a_missing_library_names_the_setup(self):
        s = subject.MistralRs()
        try:
            with self.assertRaisesRegex(RuntimeError, "adapters/mistralrs/setup.sh"):
                s.open(GROWTH)
        finally:
            s.close()

    def test_the_comparison(self):
        s = subject.MistralRs(tolerance=0.01)
        self.assertTrue(s.compare(0, {5: -1.0, 6: -2.0}, {5: -1.005, 6: -2.0, 7: -3.0}, "a prompt"))
        with self.assertRaisesRegex(subject.RecomputeMismatch, "differ from a cold recompute by 0.1"):
            s.compare(0, {5: -1.0, 6: -2.0}, {5: -1.1, 6: -2.0}, "a prompt")
        with self.assertRaisesRegex(subject.RecomputeMismatch, "generated token 2 after a prompt is 6"):
            s.compare(1, {5: -2.0, 6: -1.0}, {5: -1.0, 6: -2.0}, "a prompt")
        # A tie within the tolerance that picks another token: what
        # follows cannot be compared.
        self.assertFalse(s.compare(0, {5: -1.0, 6: -1.004}, {5: -1.004, 6: -1.0}, "a prompt"))


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class AgainstAColdRecompute(unittest.TestCase):
    def conversation(self, s):
        """A follow-up, a regenerate, an edited turn, a rewrite in the
        middle, a new conversation."""
        s.open(GROWTH)
        seen = [write(s, 0, 6), write(s, 6, 2), write(s, 8, 0)]
        s.rewind(3)
        seen.append(write(s, 3, 1))
        seen.append(write(s, 1, 2))
        s.reset()
        seen.append(write(s, 0, 3))
        return seen

    def test_prefix_cache_batches_and_sliding_windows_agree(self):
        # The sliding-window model with the prefix cache off (with it on,
        # see Findings below).
        for args in ([], ["--prefix-cache", "0"], ["--max-tokens", "3"], ["--choices", "2", "--max-tokens", "2"],
                     ["--interleave"], ["--parallel", "3", "--max-tokens", "2"], ["--parallel", "4"],
                     ["--model", "mistral", "--prefix-cache", "0", "--max-tokens", "3"],
                     ["--model", "gemma2", "--prefix-cache", "0", "--parallel", "2"]):
            s = subject.MistralRs.from_args(args)
            try:
                seen = self.conversation(s)
            finally:
                s.close()
            self.assertEqual(seen[1], list(range(8)), args)
            self.assertEqual(seen[-1], [0, 1, 2], args)

    def test_the_prefix_cache_is_used(self):
        # A follow-up reuses the conversation so far (BOS and 6 tokens),
        # with the prefix cache on, and nothing with it off.
        for prefix_cache, reused in ((16, 7), (0, 0)):
            s = subject.MistralRs(prefix_cache=prefix_cache)
            try:
                s.open(GROWTH)
                write(s, 0, 6)
                said = []
                judge = s.judge_answers
                s.judge_answers = lambda ids, found, what: (said.append(what), judge(ids, found, what))
                write(s, 6, 2)
            finally:
                s.close()
            if said == ["a 9-token prompt (? reused from the prefix cache)"]:
                self.skipTest("this mistral.rs reports no prompt tokens from the prefix cache (0.9.5 does)")
            self.assertEqual(said, ["a 9-token prompt (%d reused from the prefix cache)" % reused])

    def test_paged_attention_is_refused_on_the_cpu(self):
        # The Python Runner turns PagedAttention off on a device that is
        # neither CUDA nor Metal, and refuses it when asked for.
        s = subject.MistralRs(paged_attn=True)
        try:
            try:
                s.open(GROWTH)
            except RuntimeError as error:
                self.assertIn("paged attention is unavailable on this device", str(error))
            else:
                self.skipTest("this mistral.rs accepts paged_attn on the CPU (0.9.5 refuses it)")
        finally:
            s.close()

    def test_a_wrong_judge_is_caught(self):
        # The judge asked about a prompt one token short: the comparison
        # must notice, or it could not notice a cache that lost one.
        s = subject.MistralRs()
        try:
            s.open(GROWTH)
            write(s, 0, 6)
            complete = s.complete
            s.complete = lambda runner, ids, *a: complete(runner, ids[:-1] if runner is s.judge else ids, *a)
            with self.assertRaises(subject.RecomputeMismatch):
                write(s, 6, 2)
        finally:
            s.close()


def last_response(name, args):
    """The minimized trace `name` (tests/traces/) through the subject
    process with `args`: the response to its last op."""
    with open(os.path.join(HERE, "traces", name + ".kvtrace.json")) as f:
        trace = json.load(f)
    command = "%s %s %s" % (sys.executable, os.path.join(ADAPTER, "subject.py"), args)
    process = kvtrace_replay.Subject(command)
    try:
        response = process.request({"open": {"config": kvtrace_replay.full_config(trace["config"])}})
        for index, op in enumerate(trace["ops"]):
            response = process.request({"op": op, "index": index})
    finally:
        process.close()
    return response


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class Findings(unittest.TestCase):
    """The minimized trace of the finding the campaign reached: it shows
    the finding on the release, or the test skips naming it (a patched
    build)."""

    def test_finding_sliding_window_prefix_mask(self):
        # A 2-token prompt, a follow-up of 2 tokens (the cache now holds 5
        # positions, one more than the window of 4), then another: the
        # prefix cache hands the third request the rolled window, and its
        # mask is read from the first positions instead of the ones held.
        for model in ("mistral", "gemma2"):
            response = last_response("mistralrs-swa-prefix-mask", "--model %s --window 4" % model)
            if "ok" in response:
                self.skipTest("this mistral.rs masks a prefix-cached sliding window right "
                              "(docs/findings/mistralrs-swa-prefix-mask.md)")
            self.assertEqual(response["exception"]["type"], "RecomputeMismatch", model)
            self.assertIn("after a 7-token prompt", response["exception"]["message"])
        # With the prefix cache off, the same requests agree.
        self.assertIn("ok", last_response("mistralrs-swa-prefix-mask", "--model mistral --window 4 --prefix-cache 0"))

    def test_finding_sliding_window_prefix_mask_fails_the_request(self):
        # A 1-token prompt and three follow-ups (2, 4 and 2 tokens): the
        # last one's queries have no key their mask rows allow among the
        # first columns, and the request fails on NaN logits.
        response = last_response("mistralrs-swa-prefix-mask-nan", "--model mistral --window 4")
        if "ok" in response:
            self.skipTest("this mistral.rs masks a prefix-cached sliding window right "
                          "(docs/findings/mistralrs-swa-prefix-mask.md)")
        self.assertEqual(response["exception"]["type"], "ValueError")
        self.assertIn("argmax received invalid logits", response["exception"]["message"])
        self.assertIn("ok", last_response("mistralrs-swa-prefix-mask-nan", "--model mistral --window 4 --prefix-cache 0"))


if __name__ == "__main__":
    unittest.main()
