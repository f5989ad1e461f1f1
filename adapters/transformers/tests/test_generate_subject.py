"""transformers' `generate()` as a subject: its request mapping, and
`generate()` against the same model without a cache.

The first tests need only the standard library. The rest build tiny random
models with torch and transformers, the environment of
adapters/transformers/setup.sh; without it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/transformers/tests -v
    adapters/transformers/.venv/bin/python -m unittest discover -s adapters/transformers/tests -v
"""

import os
import unittest

import kvcheck
from kvcheck.adapter import FRONT_DOOR_CONFIG as GROWTH
from kvcheck.adapter import load_file

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

generate_subject = load_file(os.path.join(ADAPTER, "generate_subject.py"), "transformers_generate_subject")

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

SKIP = "transformers environment absent: run adapters/transformers/setup.sh, then this with its venv's python"



class Mapping(unittest.TestCase):
    def test_tokens_are_content_and_an_edit_changes_them(self):
        token = generate_subject.Conversation(generate_subject.CONTENT).token
        for writer in range(1, 20):
            for position in range(64):
                self.assertTrue(1 <= token(position, writer) <= generate_subject.CONTENT)
        for writer in range(1, 20):
            for start in range(40):
                old = [token(p, writer) for p in range(start, start + 4)]
                new = [token(p, writer + 1) for p in range(start, start + 4)]
                self.assertNotEqual(old, new)

    def test_command_line(self):
        s = generate_subject.TransformersGenerate.from_args(["--model", "mistral", "--cache", "static", "--reuse"])
        self.assertEqual((s.model_name, s.cache_name, s.reuse), ("mistral", "static", True))
        self.assertIn("--reuse", s.name)
        for bad in (["--cache", "hybrid", "--reuse"], ["--model", "gpt-7"], ["--cache", "paged"],
                    ["--batching", "--reuse"], ["--batching", "--cache", "static"]):
            with self.assertRaises(SystemExit):
                generate_subject.TransformersGenerate.from_args(bad)

    def test_only_configs_where_every_token_is_attended_open(self):
        s = generate_subject.TransformersGenerate()
        for config in (dict(GROWTH, growth=False), dict(GROWTH, window=3)):
            with self.assertRaises(kvcheck.Outside):
                s.open(config)

    def test_requests_no_client_makes_are_outside(self):
        s = generate_subject.TransformersGenerate()
        for start, length in ((0, -1), (-1, 1), (1, 1)):
            with self.assertRaises(kvcheck.Outside):
                s.write(start, length, None, None, None, None)
        with self.assertRaises(kvcheck.Outside):
            s.write(0, 0, None, None, None, None)  # an empty prompt
        with self.assertRaises(kvcheck.Outside):
            s.rewind(1)
        self.assertEqual(s.capabilities()["domain"]["rewinds"], "held")


@unittest.skipUnless(HAVE_TORCH, SKIP)
class AgainstTheModelWithoutACache(unittest.TestCase):
    def run_requests(self, subject):
        subject.open(GROWTH)
        subject.write(0, 5, None, None, None, None)  # a prompt
        subject.write(5, 3, None, None, None, None)  # a follow-up with the answer
        subject.write(2, 2, None, None, None, None)  # an edited turn
        subject.write(subject.global_end, 0, None, None, None, None)  # a regenerate
        subject.rewind(3)
        subject.write(3, 4, None, None, None, None)
        return subject

    def test_a_correct_loop_agrees(self):
        # The quantized cache differs from full precision by design: about
        # 2e-4 in log-probability at 8 bits.
        for model, cache, reuse, tolerance in (
            ("llama", "dynamic", False, 1e-4), ("llama", "dynamic", True, 1e-4), ("mistral", "dynamic", False, 1e-4),
            ("gemma2", "hybrid", False, 1e-4), ("llama", "static", True, 1e-4), ("llama", "quantized", False, 1e-2),
        ):
            with self.subTest(model=model, cache=cache, reuse=reuse):
                subject = generate_subject.TransformersGenerate(model, cache, reuse, max_new_tokens=3, tolerance=tolerance)
                s = self.run_requests(subject)
                self.assertEqual(len(s.talk.reply[1]), 3)

    def test_a_prompt_holding_the_pad_id_is_all_attended(self):
        # The model may answer token 0, the pad id, and a follow-up sends
        # it back: generate() gets the attention mask a tokenizer returns
        # (all ones), so the token is attended, as the judge attends it.
        s = generate_subject.TransformersGenerate("mistral", "dynamic", max_new_tokens=2)
        s.open(GROWTH)
        self.assertEqual(len(s.generate([5, 9, 0])), 2)
        self.assertEqual(len(s.generate([3] * 30 + [0])), 2)

    def test_continuous_batching_agrees(self):
        # generate_batch() through one persistent manager: each request
        # beside the conversation's last two, every answer's greedy tokens
        # against the model without a cache.
        s = generate_subject.TransformersGenerate("llama", batching=True, max_new_tokens=3)
        s.open(GROWTH)
        s.write(0, 5, None, None, None, None)
        s.write(5, 3, None, None, None, None)
        s.write(2, 2, None, None, None, None)
        self.assertEqual((len(s.talk.reply[1]), len(s.sent)), (3, 2))

    def test_the_offloaded_caches_where_an_accelerator_is(self):
        import torch

        for cache in generate_subject.ACCELERATED:
            s = generate_subject.TransformersGenerate("llama", cache, max_new_tokens=2)
            if not torch.cuda.is_available():
                with self.assertRaisesRegex(RuntimeError, "accelerator"):
                    s.open(GROWTH)
            else:
                self.run_requests(s)
        if not torch.cuda.is_available():
            self.skipTest("offloaded and offloaded_static need an accelerator: torch sees none here "
                          "(each refuses at open, naming that)")

    def test_a_cache_holding_a_wrong_token_is_reported(self):
        # The judge can fail: a loop that crops to the prompt's length
        # without comparing tokens reuses the rows of the turn it edited,
        # and its logits are not the model's on the edited prompt.
        s = generate_subject.TransformersGenerate("llama", "dynamic", True)
        s.open(GROWTH)
        s.write(0, 5, None, None, None, None)
        s.reused = lambda tokens: (s.cache.crop(len(tokens) - 1 - s.cache.get_seq_length()), s.cache)[1]
        with self.assertRaises(generate_subject.RecomputeMismatch):
            s.write(2, 2, None, None, None, None)

    def test_a_reused_sliding_cache_cropped_past_its_rows_is_reported(self):
        # docs/findings/transformers-sliding-crop-past-held-rows.md through
        # generate(): on Mistral's sliding layers, the crop of a rewind past
        # the rows a layer still holds leaves the mask wider than its keys.
        s = generate_subject.TransformersGenerate("mistral", "dynamic", True, max_new_tokens=3)
        with self.assertRaisesRegex(RuntimeError, "must match the size"):
            self.run_requests(s)


if __name__ == "__main__":
    unittest.main()
