"""The mlx-lm adapter's own logic, and its new caches against mlx-lm.

The first tests need only the standard library: the adapter's pure helpers
(how a row fills quantization groups, which columns Llama 4's chunked mask
lets the last query read, untagged twin rows) and the domain the
`quantized` and `chunked` caches declare. The rest drive the adapter over
kvcheck-subject/1 and need the environment of adapters/mlx-lm/setup.sh;
without it they skip, saying so:

    PYTHONPATH=python python3 -m unittest discover -s adapters/mlx-lm/tests -v
    VENV=/path/venv adapters/mlx-lm/setup.sh && /path/venv/bin/python -m unittest discover -s adapters/mlx-lm/tests -v
"""

import base64
import json
import os
import subprocess
import sys
import unittest

import kvcheck
from kvcheck.adapter import load_file

ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
subject = load_file(os.path.join(ADAPTER, "subject.py"), "mlx_lm_subject")

try:
    import mlx.core  # noqa: F401
    import numpy  # noqa: F401
    from mlx_lm.models import cache as _cache  # noqa: F401

    HAVE_MLX = True
except ImportError:
    HAVE_MLX = False

SKIP = "mlx-lm environment absent: run adapters/mlx-lm/setup.sh, then this with its venv's python"


class Helpers(unittest.TestCase):
    def test_tiling_fills_whole_groups_with_copies_of_the_row(self):
        self.assertEqual(subject.tiling(1, 32), (32, 32))
        self.assertEqual(subject.tiling(3, 32), (11, 32))  # 33 values cut to 32
        self.assertEqual(subject.tiling(4, 64), (16, 64))
        self.assertEqual(subject.tiling(64, 64), (1, 64))  # a real head_dim: untouched
        self.assertEqual(subject.tiling(96, 64), (2, 128))

    def test_tiled_groups_keep_the_rows_range(self):
        # Every group of the tiled row holds only the row's values, and
        # (head_dim <= group_size) all of them: same minimum and maximum.
        for d in range(1, 9):
            for group in (32, 64, 128):
                reps, width = subject.tiling(d, group)
                row = list(range(10, 10 + d))
                tiled = (row * reps)[:width]
                self.assertEqual(len(tiled) % group, 0)
                for g in range(0, width, group):
                    self.assertEqual((min(tiled[g : g + group]), max(tiled[g : g + group])), (10, 9 + d))

    def test_chunk_columns_is_the_last_querys_attention_chunk(self):
        # keys 0..7 (start 0), chunk 4: a write 4+2 reads 4, 5 only
        self.assertEqual(subject.chunk_columns(0, 4, 2, 4), [4, 5])
        # a write 0+4 reads the whole first chunk
        self.assertEqual(subject.chunk_columns(0, 0, 4, 4), [0, 1, 2, 3])
        # a chunk crossing a boundary: the last query's chunk only
        self.assertEqual(subject.chunk_columns(0, 3, 3, 4), [4, 5])
        # front dropped (start_position 2): column j holds position 2 + j
        self.assertEqual(subject.chunk_columns(2, 6, 1, 4), [2, 3, 4])
        # the rewind case of the finding: keys 2..3, query 3 reads both,
        # positions 0 and 1 are gone
        self.assertEqual(subject.chunk_columns(2, 3, 1, 4), [0, 1])

    def test_untagged_rows_take_their_neighbours_positions(self):
        self.assertEqual(subject.untagged_as_neighbours([1, 2, 0, 0]), [1, 2, 3, 4])
        self.assertEqual(subject.untagged_as_neighbours([0, 0, 3]), [1, 2, 3])
        self.assertEqual(subject.untagged_as_neighbours([0]), [1])

    def test_loop_domain_is_a_valid_declaration(self):
        self.assertIsNone(kvcheck.subject.domain_problem(subject.LOOP_DOMAIN))
        self.assertEqual(
            kvcheck.subject.json_domain(subject.LOOP_DOMAIN),
            {"rewrites": "latest", "gaps": False, "malformed": False},
        )

    def test_caches_listed(self):
        for kind in ("rotating", "kv", "batch-rotating", "batch-kv", "quantized", "chunked"):
            self.assertIn(kind, subject.CACHES)


CONFIG = {
    "variant": "dense", "batch": 1, "heads": 1, "head_dim": 2, "dtype": "f32", "capacity": 4,
    "sink": 0, "window": None, "growth": True, "global_sink": 0, "seed": 0,
}


class Session:
    """The adapter as a process, spoken to over kvcheck-subject/1."""

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [sys.executable, os.path.join(ADAPTER, "subject.py")] + list(args),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True,
        )
        self.index = 0
        self.hello = self.ask({"hello": {"protocol": "kvcheck-subject/1", "revision": 3}})["hello"]

    def ask(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def open(self, config):
        self.config = config
        return self.ask({"open": {"config": config}})

    def write(self, start, length):
        import numpy as np

        c = self.config
        shape = (c["batch"], length, c["heads"], c["head_dim"])
        payload = (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7 + start).astype(np.float32)
        data = base64.b64encode(payload.tobytes()).decode("ascii")
        self.index += 1
        return self.ask({"op": {"write": {"start": start, "len": length}}, "index": self.index, "k": data, "v": data})

    def rewind(self, to):
        self.index += 1
        return self.ask({"op": {"rewind": {"to": to}}, "index": self.index})

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@unittest.skipUnless(HAVE_MLX, SKIP)
class AgainstMlxLm(unittest.TestCase):
    def session(self, *args):
        s = Session(*args)
        self.addCleanup(s.close)
        return s

    def test_quantized_declares_the_loop_and_positions_only(self):
        s = self.session("--cache", "quantized")
        caps = s.hello["capabilities"]
        self.assertEqual(caps["domain"], subject.LOOP_DOMAIN)
        self.assertFalse(caps["values"])
        self.assertIn("growth", caps["features"])
        caps = self.session("--cache", "quantized", "--values", "dequantized").hello["capabilities"]
        self.assertTrue(caps["values"])

    def test_quantized_reads_every_position_and_dequantizes_close(self):
        import numpy as np

        for bits in ("4", "8"):
            s = self.session("--cache", "quantized", "--bits", bits, "--values", "dequantized")
            s.open(dict(CONFIG, head_dim=3))
            s.write(0, 3)
            got = s.write(3, 2)["ok"]
            self.assertEqual(got["global_end"], 5)
            self.assertEqual(got["visible"], [0, 1, 2, 3, 4])
            k = np.frombuffer(base64.b64decode(got["k"]), dtype=np.float32).reshape(5, 3)
            want = np.concatenate([np.arange(9).reshape(3, 3) / 7, np.arange(6).reshape(2, 3) / 7 + 3])
            self.assertLess(float(np.abs(k - want).max()), 0.05 if bits == "4" else 0.01)

    def test_chunk_mask_matches_the_pure_reference(self):
        rt = subject.load_runtime()

        class Cache:  # what chunk_mask reads of a ChunkedKVCache
            pass

        for chunk in (1, 2, 3, 4, 8):
            pair = subject.Pair(rt, dict(CONFIG, capacity=chunk), "chunked")
            for start in range(0, 6):
                for offset in range(start, start + 9):
                    for length in range(1, 7):
                        cache = Cache()
                        cache.start_position, cache.offset = start, offset
                        mask = pair.chunk_mask(cache, length)
                        last = [j for j, a in enumerate(mask[-1].tolist()) if a]
                        self.assertEqual(last, subject.chunk_columns(start, offset, length, chunk))

    def test_gap_is_outside(self):
        s = self.session("--cache", "quantized")
        s.open(CONFIG)
        self.assertIn("outside", s.write(2, 1))

    def test_chunked_reads_the_current_attention_chunk(self):
        s = self.session("--cache", "chunked")
        caps = s.hello["capabilities"]
        self.assertEqual((caps["features"], caps["domain"]), (["growth"], subject.LOOP_DOMAIN))
        s.open(CONFIG)  # chunk_size = capacity 4
        self.assertEqual(s.write(0, 4)["ok"]["visible"], [0, 1, 2, 3])
        self.assertEqual(s.write(4, 2)["ok"]["visible"], [4, 5])
        self.assertEqual(s.write(6, 1)["ok"]["visible"], [4, 5, 6])

    def test_chunked_after_a_rewind_below_the_dropped_front(self):
        # docs/findings/mlx-lm-chunked-trim-below-dropped-front.md: the same
        # calls through KVCache with the same mask read the whole chunk.
        reads = {}
        for args in (("--cache", "chunked"), ("--cache", "kv", "--chunk-size", "4")):
            s = self.session(*args)
            s.open(CONFIG)
            for start, length in ((0, 4), (4, 2), (6, 1)):
                s.write(start, length)
            rewound = s.rewind(3)
            if "exception" in rewound:
                # the finding's patch: can_trim refuses, the adapter says NotTrimmable
                self.assertEqual(rewound["exception"]["type"], "NotTrimmable")
                self.skipTest("ChunkedKVCache.can_trim refuses the trim: the patched mlx-lm")
            self.assertEqual(rewound["ok"]["global_end"], 3)
            reads[args[1]] = s.write(3, 1)["ok"]["visible"]
        self.assertEqual(reads["kv"], [0, 1, 2, 3])
        if reads["chunked"] == reads["kv"]:
            self.skipTest("ChunkedKVCache reads the whole chunk after the rewind: a fixed mlx-lm")
        self.assertEqual(reads["chunked"], [2, 3])


if __name__ == "__main__":
    unittest.main()
