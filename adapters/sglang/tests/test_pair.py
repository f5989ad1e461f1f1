"""The sglang adapter's own logic, without sglang or torch: `Pair.both`
and `positions` driven with stand-in caches and tensors.

    PYTHONPATH=python python3 -m unittest discover -s adapters/sglang/tests -v
"""

import os
import unittest

from kvcheck.adapter import load_module

SGLANG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# subject.py imports neither torch nor sglang at module level; loader.py
# first, which it imports by name.
load_module(SGLANG, "loader")
subject = load_module(SGLANG, "subject")
TAG_OFFSET, Pair, kvcheck, positions = subject.TAG_OFFSET, subject.Pair, subject.kvcheck, subject.positions


class Cache:
    """A stand-in cache whose call returns its name or raises `error`."""

    def __init__(self, name, error=None):
        self.name, self.error, self.calls = name, error, 0

    def call(self):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.name


def pair(twin, real):
    """A Pair over stand-in caches (its __init__ would build sglang's classes)."""
    p = Pair.__new__(Pair)
    p.twin, p.real = twin, real
    return p


class Both(unittest.TestCase):
    def test_a_twin_that_raises_alone_is_the_adapters_failure(self):
        twin, real = Cache("twin", ValueError("twin only")), Cache("real")
        with self.assertRaises(kvcheck.AdapterError) as raised:
            pair(twin, real).both(lambda cache, is_twin: cache.call())
        self.assertIn("twin only", str(raised.exception))
        self.assertEqual((twin.calls, real.calls), (1, 1))

    def test_the_real_caches_exception_wins(self):
        twin, real = Cache("twin", ValueError("twin")), Cache("real", KeyError("real"))
        with self.assertRaises(KeyError):
            pair(twin, real).both(lambda cache, is_twin: cache.call())

    def test_both_results_when_neither_raises(self):
        seen = []
        result = pair(Cache("twin"), Cache("real")).both(lambda cache, is_twin: seen.append(is_twin) or cache.call())
        self.assertEqual(result, ("twin", "real"))
        self.assertEqual(seen, [True, False])

    def test_the_protocol_answers_it_as_an_adapter_exception_not_a_refusal(self):
        p = pair(Cache("twin", ValueError("twin only")), Cache("real"))

        class Wrapped(kvcheck.Subject):
            arrays = "bytes"
            global_end = 0

            def open(self, config):
                pass

            def write(self, start, length, heads, recent_window, k, v):
                p.both(lambda cache, is_twin: cache.call())
                return [], None, None

        session = kvcheck.subject.Session(Wrapped())
        config = {"variant": "dense", "batch": 1, "heads": 1, "head_dim": 1, "dtype": "f32", "capacity": 4}
        self.assertIn("ok", session.handle({"open": {"config": config}}))
        response = session.handle({"op": {"write": {"start": 0, "len": 0}}})
        self.assertEqual(response["exception"]["type"], "AdapterError")
        self.assertTrue(response["exception"]["adapter"])


class Tensor:
    """Just enough of a `[B, rows, heads, D]` tensor for `positions`."""

    def __init__(self, rows):
        self.rows = rows  # [rows][heads] tags, batch 0, head_dim 1
        self.shape = (1, len(rows), len(rows[0]) if rows else 0, 1)

    def __getitem__(self, index):
        assert index[0] == 0 and index[3] == 0
        rows = self.rows

        class View:
            def tolist(self):
                return [list(row) for row in rows]

        return View()


def tags(*positions_by_head):
    """Rows of tags from per-row tuples of positions (None: head never written)."""
    return [[0.0 if p is None else p + TAG_OFFSET for p in row] for row in positions_by_head]


class Positions(unittest.TestCase):
    def test_heads_that_agree_give_their_position(self):
        self.assertEqual(positions(Tensor(tags((0, 0), (1, 1), (2, 2)))), [0, 1, 2])

    def test_heads_that_disagree_give_the_smallest_whatever_the_head_order(self):
        # D8's view: head-range write [1, 2) rolled head 1 only.
        d8 = tags((0, 1), (1, 2), (2, 3))
        swapped = [list(reversed(row)) for row in d8]
        self.assertEqual(positions(Tensor(d8)), [0, 1, 2])
        self.assertEqual(positions(Tensor(swapped)), [0, 1, 2])

    def test_unwritten_heads_are_skipped_and_unwritten_rows_take_the_slot(self):
        twin = Tensor(tags((None, 5), (None, None), (None, None)))
        slots = Tensor(tags((5, 5), (6, 6), (7, 7)))
        self.assertEqual(positions(twin, slots), [5, 6, 7])
        self.assertEqual(positions(twin), [5, 6, 7])  # one past the row before


if __name__ == "__main__":
    unittest.main()
