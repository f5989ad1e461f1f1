"""mlx-lm's server as a subject: its request mapping, and the server
against a fresh prefill.

The first tests need only the standard library (the tokens a write puts
in a prompt, the command line, which configs the server can describe).
The rest start `mlx_lm.server` in this process on tiny random models and
need the environment of adapters/mlx-lm/setup.sh; without it they skip,
saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/mlx-lm/tests -v
    adapters/mlx-lm/.venv/bin/python -m unittest discover -s adapters/mlx-lm/tests -v
"""

import os
import unittest

import kvcheck
from kvcheck.adapter import FRONT_DOOR_CONFIG as GROWTH
from kvcheck.adapter import load_file

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

server_subject = load_file(os.path.join(ADAPTER, "server_subject.py"), "mlx_lm_server_subject")

try:
    import mlx.core  # noqa: F401
    import mlx_lm.server  # noqa: F401

    HAVE_MLX = True
except ImportError:
    HAVE_MLX = False

SKIP = "mlx-lm environment absent: run adapters/mlx-lm/setup.sh, then this with its venv's python"



class Mapping(unittest.TestCase):
    def test_tokens_are_prompt_words_and_an_edit_changes_them(self):
        for writer in range(1, 20):
            for position in range(64):
                t = server_subject.Conversation(server_subject.CONTENT).token(position, writer)
                self.assertTrue(1 <= t <= server_subject.VOCAB - 2, t)
        # An edited turn (another writer) differs somewhere in a 4-token
        # span; equal tokens would make it a regenerate.
        for writer in range(1, 20):
            for start in range(0, 40):
                token = server_subject.Conversation(server_subject.CONTENT).token
                old = [token(p, writer) for p in range(start, start + 4)]
                new = [token(p, writer + 1) for p in range(start, start + 4)]
                self.assertNotEqual(old, new)

    def test_every_token_has_one_word(self):
        # A follow-up sends the server's answer back as words: any id the
        # model generates, a chat marker too, must map back to itself.
        words = server_subject.WORDS
        self.assertEqual(len(set(words)), server_subject.VOCAB)
        for role, marker in server_subject.MARKERS.items():
            self.assertEqual(words[marker], role)
        self.assertEqual(server_subject.words([3, 61, 63]), "w3 user w63")

    def test_a_masked_subject_declares_no_domain(self):
        # A mask answers outside to requests the declared domain admits:
        # declared, each would be a domain_violation.
        self.assertIsNotNone(server_subject.MlxLmServer().capabilities().get("domain"))
        masked = server_subject.MlxLmServer.from_args(["--mask", "exact-hit"])
        self.assertNotIn("domain", masked.capabilities())
        # Undeclared, it is drawn malformed writes: each is outside.
        with self.assertRaisesRegex(kvcheck.Outside, "negative"):
            masked.write(0, -1, None, None, None, None)

    def test_command_line_keeps_the_servers_own_options(self):
        s = server_subject.MlxLmServer.from_args(["--model", "llama4", "--judge", "cold", "--", "--kv-bits", "8"])
        self.assertEqual((s.model_name, s.judge, s.server_args), ("llama4", "cold", ["--kv-bits", "8"]))
        self.assertIn("--kv-bits 8", s.name)
        self.assertFalse(s.seeded)
        self.assertTrue(server_subject.MlxLmServer.from_args(["--path", "single"]).seeded)
        with self.assertRaises(SystemExit):
            server_subject.MlxLmServer.from_args(["--model", "gpt-7"])

    def test_only_configs_where_every_token_is_attended_open(self):
        s = server_subject.MlxLmServer()
        for config in (dict(GROWTH, growth=False), dict(GROWTH, window=3)):
            with self.assertRaises(kvcheck.Outside):
                s.open(config)
        self.assertIsNone(s.model, "a refused config builds no model")

    def test_declared_domain_is_valid(self):
        self.assertIsNone(kvcheck.subject.domain_problem(server_subject.MlxLmServer.domain))


@unittest.skipUnless(HAVE_MLX, SKIP)
class AgainstAFreshPrefill(unittest.TestCase):
    def conversation(self, subject):
        """A follow-up, a regenerate, an edit of an earlier turn, a new
        conversation; returns the positions of each write's view."""
        subject.open(GROWTH)
        seen = [subject.write(0, 6, None, None, None, None), subject.write(6, 2, None, None, None, None)]
        seen.append(subject.write(8, 0, None, None, None, None))  # regenerate
        subject.rewind(3)
        seen.append(subject.write(3, 1, None, None, None, None))  # an edit sharing 3 tokens
        seen.append(subject.write(1, 2, None, None, None, None))  # a rewrite in the middle
        subject.reset()
        seen.append(subject.write(0, 3, None, None, None, None))
        return seen

    def test_llama_batched_and_sequential_agree(self):
        for path in ("batch", "single"):
            s = server_subject.MlxLmServer("llama", path=path)
            try:
                seen = self.conversation(s)
            finally:
                s.close_servers()
            self.assertEqual(seen[1], list(range(8)))
            self.assertEqual(seen[-1], [0, 1, 2])

    def test_gemma3_and_qwen3_next_agree(self):
        for model in ("gemma3", "qwen3-next"):
            s = server_subject.MlxLmServer(model)
            try:
                self.conversation(s)
            finally:
                s.close_servers()

    def test_llama4_edit_below_the_dropped_front_is_reported(self):
        # ChunkedKVCache drops positions before its last attention chunk;
        # the prompt cache trims it back to 3 shared tokens anyway.
        s = server_subject.MlxLmServer("llama4")
        try:
            s.open(GROWTH)
            s.write(0, 6, None, None, None, None)
            s.write(6, 2, None, None, None, None)
            s.rewind(3)
            with self.assertRaises(server_subject.RecomputeMismatch) as caught:
                s.write(3, 1, None, None, None, None)
            self.assertIn("3 reused from the prompt cache", str(caught.exception))
        finally:
            s.close_servers()

    def test_follow_up_of_exactly_the_answer_is_reported_and_can_be_masked(self):
        # A follow-up of one token after a one-token answer is exactly the
        # sequence the prompt cache holds: the batched path's generation
        # thread dies, and every later request fails too.
        s = server_subject.MlxLmServer("llama")
        try:
            s.open(GROWTH)
            s.write(0, 4, None, None, None, None)
            with self.assertRaises(server_subject.ServerError):
                s.write(4, 1, None, None, None, None)
            s.reset()
            with self.assertRaises(server_subject.ServerError) as caught:
                s.write(0, 3, None, None, None, None)
            self.assertIn("HTTP", str(caught.exception))
        finally:
            s.close_servers()
        masked = server_subject.MlxLmServer("llama", masks=["exact-hit"])
        try:
            masked.open(GROWTH)
            masked.write(0, 4, None, None, None, None)
            with self.assertRaises(kvcheck.Outside):
                masked.write(4, 1, None, None, None, None)
            self.assertEqual(masked.write(4, 2, None, None, None, None), list(range(6)))
        finally:
            masked.close_servers()

    def test_the_tokenizer_gives_back_every_id(self):
        # The server reads the words a follow-up sends back: each must be
        # the id the model generated (a duplicate word would read as unk).
        from tokenizers import Tokenizer

        model = server_subject.TinyModel("llama")
        tokenizer = Tokenizer.from_file(os.path.join(model.path, "tokenizer.json"))
        ids = list(range(server_subject.VOCAB))
        self.assertEqual(tokenizer.encode(server_subject.words(ids)).ids, ids)

    def test_every_generated_token_judged(self):
        # Three greedy tokens a request, each judged by a fresh prefill of
        # the prompt and the tokens before it.
        s = server_subject.MlxLmServer("llama", max_tokens=3)
        try:
            s.open(GROWTH)
            s.write(0, 5, None, None, None, None)
            self.assertEqual(len(s.talk.reply[1]), 3)
            s.write(5, 5, None, None, None, None)
            s.rewind(2)
            s.write(2, 2, None, None, None, None)
        finally:
            s.close_servers()

    def test_a_draft_model_stores_a_cache_one_token_short(self):
        # With --draft-model the server speculates; the last token of an
        # answer that the target model produced (a rejected draft) is never
        # run through the cache the server then stores under the prompt and
        # every answered token. A follow-up that continues the conversation
        # reuses that cache: a token is missing and the rest sit one
        # position early, so its logits differ from a fresh prefill.
        s = server_subject.MlxLmServer("llama", max_tokens=3, draft="llama")
        try:
            s.open(GROWTH)
            s.write(0, 5, None, None, None, None)
            with self.assertRaisesRegex(server_subject.RecomputeMismatch, "differ from a fresh prefill"):
                s.write(5, 5, None, None, None, None)
        finally:
            s.close_servers()

    def test_cold_judge_compares_two_servers(self):
        # 8-bit keys and values: a prompt's last token attends quantized
        # rows when the rest came from the prompt cache, full-precision ones
        # in a cold prefill; the difference is the quantization's, about 1e-3.
        s = server_subject.MlxLmServer(
            "llama", judge="cold", tolerance=1e-2, server_args=["--kv-bits", "8", "--quantized-kv-start", "0"]
        )
        try:
            s.open(GROWTH)
            s.write(0, 5, None, None, None, None)
            s.write(5, 2, None, None, None, None)
            self.assertEqual(s.global_end, 7)
        finally:
            s.close_servers()


if __name__ == "__main__":
    unittest.main()
