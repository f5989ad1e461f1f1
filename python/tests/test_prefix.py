"""kvcheck.prefix: the payload, PrefixSubject's checks and record, and the
prefix family of kvcheck-subject/1 through serve_prefix.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
(stdlib only; numpy cases skip without numpy; no network, no binary).
"""

import base64
import io
import json
import os
import struct
import subprocess
import sys
import unittest

import kvcheck
from kvcheck.adapter import script_env
from kvcheck.prefix import (
    ERROR_KINDS,
    NoRoom,
    PrefixSession,
    PrefixSubject,
    Request,
    bits_to_float,
    payload_bits,
    rows_bytes,
    serve_prefix,
)

HERE = os.path.abspath(__file__)

try:
    import numpy
except ImportError:
    numpy = None

HELLO = {"hello": {"protocol": "kvcheck-subject/1", "revision": 6, "family": "prefix"}}


def config(**fields):
    base = {"variant": "prefix", "blocks": 8, "block_size": 2, "layers": 1, "row_width": 2, "hit": "leave_one", "seed": 0}
    base.update(fields)
    return base


def decode(rows):
    data = base64.b64decode(rows)
    return list(struct.unpack("<%dI" % (len(data) // 4), data))


def flat(rows):
    return [x for layer in rows for row in layer for x in row]


class Naive(PrefixSubject):
    """A cache that shares nothing: every running request holds its own
    ceil(n / B) blocks, nothing is ever cached, every hit is 0. It keeps
    each hook's arguments in `calls`, so a test sees what the base passed."""

    name = "naive"
    hit = ("leave_one", "whole")

    def open(self, config):
        if config["blocks"] == 99:
            raise kvcheck.Refused("invalid_config", "99 blocks is unlucky")
        if config["blocks"] == 98:
            raise kvcheck.Outside("no pools of 98")
        self.calls = []
        self.rows = {}  # request -> {position: [row per layer]}
        self.held = {}  # request -> blocks

    def need(self, tokens):
        return -(-tokens // self.config["block_size"])

    def counts(self):
        used = sum(self.held.values())
        return used, 0, self.config["blocks"] - used

    def take(self, request, tokens):
        more = self.need(tokens) - self.held.get(request, 0)
        if more > self.counts()[2]:
            raise NoRoom("needs %d" % more)
        self.held[request] = self.need(tokens)

    def start(self, request, tokens):
        self.calls.append(("start", request, tokens, self.index))
        if tokens == [666]:
            raise ValueError("the library refuses 666")
        if tokens == [667]:
            raise kvcheck.Outside("never asked 667")
        if tokens == [668]:
            return "two"
        self.take(request, len(tokens))
        self.rows[request] = {}
        return 0

    def compute(self, request, first, rows):
        self.calls.append(("compute", request, first, rows))
        for i in range(len(rows[0])):
            self.rows[request][first + i] = [layer[i] for layer in rows]

    def extend(self, request, tokens):
        self.calls.append(("extend", request, tokens))
        self.take(request, len(self.requests[request].tokens) + len(tokens))

    def fork(self, request, into):
        self.calls.append(("fork", request, into))
        self.held[into] = self.held[request]
        self.rows[into] = dict(self.rows[request])

    def rollback(self, request, count):
        self.calls.append(("rollback", request, count))
        kept = len(self.requests[request].tokens) - count
        self.held[request] = self.need(kept)
        self.rows[request] = {p: r for p, r in self.rows[request].items() if p < kept}

    def finish(self, request):
        self.calls.append(("finish", request))
        self.held.pop(request, None)

    def preempt(self, request):
        self.calls.append(("preempt", request))
        del self.held[request]
        self.rows[request] = {}

    def resume(self, request):
        self.calls.append(("resume", request))
        self.take(request, len(self.requests[request].tokens))
        return 0

    def read(self, request):
        computed = self.requests[request].computed
        return [[self.rows[request][p][layer] for p in range(computed)] for layer in range(self.config["layers"])]

    def evict(self, count):
        self.calls.append(("evict", count))

    def clear(self):
        self.calls.append(("clear",))


class Minimal(PrefixSubject):
    """Only the required ops."""

    def open(self, config):
        pass

    def counts(self):
        return 0, 0, self.config["blocks"]

    def start(self, request, tokens):
        return 0

    def compute(self, request, first, rows):
        pass

    def finish(self, request):
        pass

    def read(self, request):
        return []


class Session:
    """A PrefixSession driven request by request."""

    def __init__(self, subject=None, cfg=None):
        self.session = PrefixSession(subject or Naive())
        self.hello = self.session.handle(HELLO)
        self.opened = self.session.handle({"open": {"config": cfg or config()}})
        self.index = 0

    def op(self, op):
        response = self.session.handle({"op": op, "index": self.index})
        self.index += 1
        return response

    def read(self, request):
        return self.session.handle({"read": {"request": request}})

    @property
    def subject(self):
        return self.session.subject


class Payload(unittest.TestCase):
    """docs/contract.md §16, with its known answers."""

    def test_known_answers_seed_0(self):
        rows = payload_bits(0, [1, 2, 3], 2, 2)
        self.assertEqual(
            rows,
            [
                [[0x41730000, 0x40590000], [0xC1EF0000, 0xBD3A0000], [0xC26D0000, 0x40040000]],
                [[0xBCDD0000, 0x3CCE0000], [0xBD040000, 0xBDC70000], [0xC1CF0000, 0x3E760000]],
            ],
        )
        self.assertEqual([bits_to_float(b) for b in rows[0][0]] + [bits_to_float(rows[0][1][0])], [15.1875, 3.390625, -29.875])

    def test_known_answers_seed_7(self):
        self.assertEqual(payload_bits(7, [0], 1, 4), [[[0x421E0000, 0x419F0000, 0xC0A40000, 0x3C960000]]])

    def test_a_range_chains_over_the_tokens_before_it(self):
        tokens = [5, 1, 4, 1, 5, 9]
        whole = payload_bits(3, tokens, 2, 3)
        for first in range(len(tokens) + 1):
            for count in range(len(tokens) - first + 1):
                part = payload_bits(3, tokens, 2, 3, first, count)
                self.assertEqual(part, [layer[first:first + count] for layer in whole])
        self.assertEqual(payload_bits(3, tokens, 2, 3, 4), [layer[4:] for layer in whole])

    def test_rows_are_of_the_prefix_alone(self):
        # The same prefix in two prompts has the same rows; a differing
        # token changes every row after it.
        a, b = payload_bits(0, [1, 2, 3], 1, 2), payload_bits(0, [1, 2, 4], 1, 2)
        self.assertEqual(a[0][:2], b[0][:2])
        self.assertNotEqual(a[0][2], b[0][2])

    def test_every_value_is_exact_in_half_precision(self):
        for bits in flat(payload_bits(11, list(range(40)), 2, 4)):
            self.assertEqual(bits & 0xFFFF, 0)  # bf16: the top half alone
            value = bits_to_float(bits)
            self.assertEqual(struct.unpack("<e", struct.pack("<e", value))[0], value)  # f16
            self.assertTrue(2 ** -6 <= abs(value) < 2 ** 6)

    def test_positions_outside_the_tokens(self):
        with self.assertRaises(ValueError):
            payload_bits(0, [1, 2], 1, 1, 1, 2)
        with self.assertRaises(ValueError):
            payload_bits(0, [1, 2], 1, 1, 3)


class Rows(unittest.TestCase):
    """What read() may return, as the protocol's bytes."""

    def test_bits_floats_and_bytes(self):
        bits = payload_bits(0, [1, 2], 2, 2)
        want = struct.pack("<8I", *flat(bits))
        self.assertEqual(rows_bytes(bits), want)
        self.assertEqual(rows_bytes([[[bits_to_float(x) for x in row] for row in layer] for layer in bits]), want)
        self.assertEqual(rows_bytes(want), want)
        self.assertEqual(rows_bytes([]), b"")

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_arrays(self):
        bits = payload_bits(0, [1, 2], 2, 2)
        want = struct.pack("<8I", *flat(bits))
        self.assertEqual(rows_bytes(numpy.array(bits, dtype=numpy.uint32)), want)
        values = numpy.array(bits, dtype=numpy.uint32).view(numpy.float32)
        self.assertEqual(rows_bytes(values), want)
        self.assertEqual(rows_bytes(values.astype(numpy.float16)), want)

    def test_rows_that_are_not_rows(self):
        for bad in ([[[-1]]], [[[1 << 32]]], [[["x"]]], [1, 2], [[[True]]]):
            with self.assertRaises(kvcheck.AdapterError):
                rows_bytes(bad)


class Declarations(unittest.TestCase):
    def test_hello_of_every_op_defined(self):
        s = Session()
        self.assertEqual(
            s.hello,
            {
                "hello": {
                    "protocol": "kvcheck-subject/1",
                    "name": "naive",
                    "family": "prefix",
                    "capabilities": {
                        "ops": ["start", "compute", "extend", "fork", "rollback", "finish",
                                "preempt", "resume", "read", "evict", "clear"],
                        "hit": ["leave_one", "whole"],
                        "policy": "own",
                        "steps": "free",
                    },
                }
            },
        )

    def test_declared_ops_block_sizes_policy_and_steps(self):
        subject = Minimal()
        subject.block_sizes, subject.policy, subject.steps = (1, 2, 4), "contract", "whole"
        caps = PrefixSession(subject).handle(HELLO)["hello"]["capabilities"]
        # read() is required (the probe), so the read op is declared too.
        self.assertEqual(caps, {"ops": ["start", "compute", "finish", "read"], "hit": ["leave_one"], "block_sizes": [1, 2, 4],
                                "policy": "contract", "steps": "whole"})
        self.assertEqual(PrefixSession(Minimal()).handle(HELLO)["hello"]["name"], "Minimal")
        narrowed = Naive()
        narrowed.ops = ("start", "finish", "compute", "read")
        self.assertEqual(narrowed.declared_ops(), ["start", "compute", "finish", "read"])

    def test_bad_declarations_are_named(self):
        cases = [
            ("ops", ("start", "compute"), "must implement finish"),
            ("ops", ("start", "compute", "finish", "fork"), "declares fork but does not define fork()"),
            ("ops", ("start", "compute", "finish", "jump"), "Minimal.ops"),
            ("hit", ("all",), "Minimal.hit"),
            ("hit", (), "declare at least one"),
            ("block_sizes", (0,), "Minimal.block_sizes"),
            ("policy", "lru", "Minimal.policy"),
            ("steps", "some", "Minimal.steps"),
        ]
        for attr, value, message in cases:
            subject = Minimal()
            setattr(subject, attr, value)
            with self.subTest(attr=attr, value=value), self.assertRaisesRegex(ValueError, message):
                subject.validate()

    def test_required_methods(self):
        class NoCounts(Minimal):
            counts = PrefixSubject.counts

        class NoRead(Minimal):
            read = PrefixSubject.read

        for cls, method in ((NoCounts, "counts"), (NoRead, "read")):
            with self.assertRaisesRegex(ValueError, "must define %s" % method):
                PrefixSession(cls())


class Open(unittest.TestCase):
    def test_ok_with_the_fresh_counts_and_every_field_filled_in(self):
        s = Session(cfg={"variant": "prefix", "blocks": 3})
        self.assertEqual(s.opened, {"ok": {"in_use": 0, "cached": 0, "free": 3}})
        self.assertEqual(s.subject.config, {"variant": "prefix", "blocks": 3, "block_size": 1, "layers": 1,
                                            "row_width": 1, "hit": "leave_one", "seed": 0,
                                            "window": None})
        self.assertEqual(s.subject.requests, {})

    def test_invalid_configs_name_the_field(self):
        cases = [
            (dict(blocks=0), "blocks must be at least 1, got 0"),
            (dict(block_size=-1), "block_size must be at least 1, got -1"),
            (dict(layers=0), "layers must be at least 1"),
            (dict(row_width=1.5), "row_width must be at least 1, got 1.5"),
            (dict(blocks=True), "blocks must be at least 1, got true"),
            (dict(hit="most"), 'hit must be "leave_one" or "whole", got "most"'),
            (dict(seed=-1), "seed must be an integer in [0, 2^64), got -1"),
            (dict(variant="dense"), 'variant must be "prefix"'),
            (dict(blocks=1 << 20, block_size=1 << 10, layers=2, row_width=2), "blocks 1048576 x block_size 1024 x layers 2 "
             "x row_width 2 = 4294967296 elements exceeds the size rule 2^31"),
            (dict(extra=1), "extra is not a field"),
        ]
        for fields, message in cases:
            with self.subTest(fields=fields):
                err = Session(cfg=config(**fields)).opened["err"]
                self.assertEqual(err["kind"], "invalid_config")
                self.assertIn(message, err["message"])
        session = PrefixSession(Naive())
        self.assertEqual(session.handle({"open": {}})["err"]["kind"], "invalid_config")
        self.assertIn("blocks is missing", session.handle({"open": {"config": {"variant": "prefix"}}})["err"]["message"])

    def test_the_size_rule_is_inclusive(self):
        self.assertIn("ok", Session(cfg=config(blocks=1 << 19, block_size=1 << 10, layers=2, row_width=2)).opened)

    def test_outside_the_capabilities(self):
        subject = Minimal()
        subject.block_sizes = (1, 4)
        self.assertEqual(Session(subject, config(block_size=2)).opened,
                         {"outside": {"reason": "block size 2 is not opened by Minimal (block_sizes: 1, 4)"}})
        self.assertIn("outside", Session(Minimal(), config(block_size=1, hit="whole")).opened)
        # A broken rule is invalid_config before it is outside.
        self.assertIn("err", Session(Minimal(), config(blocks=0, hit="whole")).opened)

    def test_the_hooks_refusals(self):
        s = Session(cfg=config(blocks=99))
        self.assertEqual(s.opened, {"err": {"kind": "invalid_config", "message": "99 blocks is unlucky"}})
        # No cache is open after a refused open.
        self.assertTrue(s.op({"start": {"request": 0, "tokens": [1]}})["exception"]["adapter"])
        self.assertEqual(Session(cfg=config(blocks=98)).opened, {"outside": {"reason": "no pools of 98"}})

    def test_open_resets_the_record(self):
        s = Session()
        s.op({"start": {"request": 0, "tokens": [1, 2]}})
        self.assertEqual(s.session.handle({"open": {"config": config()}}), {"ok": {"in_use": 0, "cached": 0, "free": 8}})
        self.assertEqual(s.subject.requests, {})


class Ops(unittest.TestCase):
    """The §15 checks in the contract's order, the hooks' arguments, the record."""

    def test_a_request_through_every_op(self):
        s = Session(cfg=config(layers=2))
        self.assertEqual(s.op({"start": {"request": 0, "tokens": [1, 2, 3]}}),
                         {"ok": {"hit": 0, "in_use": 2, "cached": 0, "free": 6}})
        self.assertEqual(s.subject.requests, {0: Request([1, 2, 3], 0, False)})
        self.assertEqual(s.op({"compute": {"request": 0, "count": 2}}), {"ok": {"in_use": 2, "cached": 0, "free": 6}})
        self.assertEqual(s.subject.calls[-1], ("compute", 0, 0, payload_bits(0, [1, 2, 3], 2, 2, 0, 2)))
        s.op({"compute": {"request": 0, "count": 1}})
        # The rows of the later positions chain over the earlier tokens.
        self.assertEqual(s.subject.calls[-1], ("compute", 0, 2, payload_bits(0, [1, 2, 3], 2, 2, 2, 1)))
        ok = s.op({"read": {"request": 0}})["ok"]
        self.assertEqual(list(ok), ["read", "rows", "in_use", "cached", "free"])
        self.assertEqual((ok["read"], decode(ok["rows"])), (3, flat(payload_bits(0, [1, 2, 3], 2, 2))))
        self.assertEqual(s.read(0), {"ok": {"read": 3, "rows": ok["rows"]}})
        self.assertEqual(s.op({"fork": {"request": 0, "into": 5}})["ok"]["in_use"], 4)
        self.assertEqual(s.subject.requests[5], Request([1, 2, 3], 3, False))
        s.op({"extend": {"request": 5, "tokens": [4, 5]}})
        self.assertEqual(s.subject.requests[5], Request([1, 2, 3, 4, 5], 3, False))
        s.op({"rollback": {"request": 5, "count": 3}})
        self.assertEqual(s.subject.requests[5], Request([1, 2], 2, False))
        s.op({"preempt": {"request": 5}})
        self.assertEqual(s.subject.requests[5], Request([1, 2], 0, True))
        self.assertEqual(s.op({"resume": {"request": 5}})["ok"]["hit"], 0)
        self.assertEqual(s.subject.requests[5], Request([1, 2], 0, False))
        s.op({"finish": {"request": 5}})
        self.assertNotIn(5, s.subject.requests)
        self.assertEqual(s.op({"evict": {"blocks": 0}}), {"ok": {"in_use": 2, "cached": 0, "free": 6}})
        self.assertEqual(s.op("clear"), {"ok": {"in_use": 2, "cached": 0, "free": 6}})
        self.assertEqual([c[0] for c in s.subject.calls],
                         ["start", "compute", "compute", "fork", "extend", "rollback", "preempt", "resume", "finish", "clear"])
        # The index of the op is the hook's time stamp (probes have none).
        self.assertEqual(s.subject.calls[0][3], 0)
        self.assertEqual(s.subject.index, 11)

    def test_ops_that_change_nothing_call_no_hook(self):
        s = Session()
        s.op({"start": {"request": 0, "tokens": [1, 2]}})
        calls = list(s.subject.calls)
        for op in ({"compute": {"request": 0, "count": 0}}, {"extend": {"request": 0, "tokens": []}},
                   {"rollback": {"request": 0, "count": 0}}, {"evict": {"blocks": 0}}):
            self.assertEqual(s.op(op), {"ok": {"in_use": 1, "cached": 0, "free": 7}})
        self.assertEqual(s.subject.calls, calls)
        self.assertEqual(s.subject.requests[0], Request([1, 2], 0, False))

    def state(self):
        """r0 running [1, 2, 3] computed 1, r1 preempted, r2 running and computed."""
        s = Session()
        s.op({"start": {"request": 0, "tokens": [1, 2, 3]}})
        s.op({"compute": {"request": 0, "count": 1}})
        s.op({"start": {"request": 1, "tokens": [7]}})
        s.op({"preempt": {"request": 1}})
        s.op({"start": {"request": 2, "tokens": [8]}})
        s.op({"compute": {"request": 2, "count": 1}})
        return s

    # (op, kind): each refusal of §15, including where two apply and the
    # contract's order decides.
    REFUSALS = [
        ({"compute": {"request": 9, "count": -1}}, "invalid_argument"),
        ({"rollback": {"request": 1, "count": -2}}, "invalid_argument"),
        ({"evict": {"blocks": -1}}, "invalid_argument"),
        ({"compute": {"request": 9, "count": 1}}, "unknown_request"),
        ({"extend": {"request": 9, "tokens": []}}, "unknown_request"),
        ({"fork": {"request": 9, "into": 1}}, "unknown_request"),
        ({"rollback": {"request": 9, "count": 1}}, "unknown_request"),
        ({"finish": {"request": 9}}, "unknown_request"),
        ({"preempt": {"request": 9}}, "unknown_request"),
        ({"resume": {"request": 9}}, "unknown_request"),
        ({"read": {"request": 9}}, "unknown_request"),
        ({"start": {"request": 1, "tokens": []}}, "duplicate_request"),
        ({"start": {"request": 0, "tokens": [1]}}, "duplicate_request"),
        ({"fork": {"request": 2, "into": 1}}, "duplicate_request"),
        ({"fork": {"request": 0, "into": 0}}, "duplicate_request"),
        ({"start": {"request": 9, "tokens": []}}, "empty_prompt"),
        ({"compute": {"request": 1, "count": 5}}, "preempted"),
        ({"extend": {"request": 1, "tokens": []}}, "preempted"),
        ({"fork": {"request": 1, "into": 0}}, "preempted"),
        ({"rollback": {"request": 1, "count": 9}}, "preempted"),
        ({"preempt": {"request": 1}}, "preempted"),
        ({"read": {"request": 1}}, "preempted"),
        ({"resume": {"request": 0}}, "not_preempted"),
        ({"compute": {"request": 0, "count": 3}}, "compute_past_end"),
        ({"rollback": {"request": 0, "count": 4}}, "rollback_too_far"),
        ({"fork": {"request": 0, "into": 9}}, "not_computed"),
        ({"evict": {"blocks": 1}}, "evict_too_many"),
        ({"extend": {"request": 0, "tokens": [1] * 20}}, "no_room"),
        ({"start": {"request": 9, "tokens": [1] * 20}}, "no_room"),
    ]

    def test_every_refusal_in_the_contracts_order_changes_no_record(self):
        self.assertEqual(sorted({kind for _, kind in self.REFUSALS}), sorted(ERROR_KINDS))
        for op, kind in self.REFUSALS:
            with self.subTest(op=op):
                s = self.state()
                requests = {r: Request(list(q.tokens), q.computed, q.preempted) for r, q in s.subject.requests.items()}
                calls = len(s.subject.calls)
                err = s.op(op)["err"]
                self.assertEqual(err["kind"], kind)
                self.assertEqual(list(err), ["kind", "message", "in_use", "cached", "free"])
                self.assertEqual((err["in_use"], err["cached"], err["free"]), (3, 0, 5))
                self.assertEqual(s.subject.requests, requests)
                # The base refuses before the hook; no_room is the hook's own.
                self.assertEqual(len(s.subject.calls), calls + (kind == "no_room"))

    def test_messages_carry_the_numbers(self):
        s = self.state()
        self.assertEqual(s.op({"compute": {"request": 0, "count": 3}})["err"]["message"],
                         "compute 3 of request 0 would pass its 3 tokens (1 computed)")
        self.assertEqual(s.op({"rollback": {"request": 0, "count": -2}})["err"]["message"], "count = -2 is negative")
        self.assertEqual(s.op({"resume": {"request": 9}})["err"]["message"], "resume names request 9, which does not exist")
        self.assertEqual(s.op({"evict": {"blocks": 1}})["err"]["message"], "evict 1 but only 0 blocks are cached")
        self.assertEqual(s.op({"start": {"request": 9, "tokens": [1] * 20}})["err"]["message"], "needs 10")

    def test_finish_and_the_probe_of_a_preempted_request(self):
        s = self.state()
        self.assertEqual(s.read(1)["err"]["kind"], "preempted")
        self.assertEqual(s.read(9)["err"]["kind"], "unknown_request")
        self.assertIn("ok", s.op({"finish": {"request": 1}}))
        self.assertNotIn(1, s.subject.requests)

    def test_the_hooks_answers(self):
        s = Session()
        self.assertEqual(s.op({"start": {"request": 0, "tokens": [666]}}),
                         {"exception": {"type": "ValueError", "message": "the library refuses 666"}})
        self.assertEqual(s.op({"start": {"request": 0, "tokens": [667]}}), {"outside": {"reason": "never asked 667"}})
        bad_hit = s.op({"start": {"request": 0, "tokens": [668]}})["exception"]
        self.assertTrue(bad_hit["adapter"])
        self.assertIn("must return the hit", bad_hit["message"])
        # None of them started the request.
        self.assertEqual(s.subject.requests, {})

    def test_a_refusal_of_a_kind_the_contract_does_not_have(self):
        class Odd(Minimal):
            def start(self, request, tokens):
                raise kvcheck.Refused("non_sequential", "a streaming kind")

        response = Session(Odd()).op({"start": {"request": 0, "tokens": [1]}})
        self.assertTrue(response["exception"]["adapter"])
        self.assertIn("non_sequential", response["exception"]["message"])


class Malformed(unittest.TestCase):
    """Requests that are no request at all: answered by the adapter's
    exception naming the problem, and the session goes on."""

    CASES = [
        ({"op": {"start": {"request": -1, "tokens": [1]}}, "index": 0}, "request -1 is not a request id"),
        ({"op": {"start": {"request": 1 << 32, "tokens": [1]}}, "index": 0}, "is not a request id"),
        ({"op": {"start": {"request": 1.0, "tokens": [1]}}, "index": 0}, "is not a request id"),
        ({"op": {"start": {"request": "a", "tokens": [1]}}, "index": 0}, "is not a request id"),
        ({"op": {"start": {"request": 0, "tokens": [1, -2]}}, "index": 0}, "token 1, -2, is not an integer"),
        ({"op": {"start": {"request": 0, "tokens": [1 << 32]}}, "index": 0}, "is not an integer in [0, 2^32)"),
        ({"op": {"start": {"request": 0, "tokens": "12"}}, "index": 0}, "is not a list of tokens"),
        ({"op": {"start": {"request": 0}}, "index": 0}, "field tokens is missing"),
        ({"op": {"start": {"request": 0, "tokens": [1], "x": 1}}, "index": 0}, 'unknown field "x"'),
        ({"op": {"compute": {"request": 0, "count": 1.5}}, "index": 0}, "count 1.5 is not an integer"),
        ({"op": {"compute": {"request": 0, "count": None}}, "index": 0}, "count null is not an integer"),
        ({"op": {"evict": {"blocks": "2"}}, "index": 0}, 'blocks "2" is not an integer'),
        ({"op": {"fork": {"request": 0, "into": -3}}, "index": 0}, "into -3 is not a request id"),
        ({"op": {"finish": 0}, "index": 0}, "is not an object of its fields"),
        ({"op": {"jump": {}}, "index": 0}, 'unknown op "jump"'),
        ({"op": {"clear": {}}, "index": 0}, 'unknown op "clear"'),
        ({"op": "finish", "index": 0}, "is not an op object"),
        ({"op": {"start": {}, "finish": {}}, "index": 0}, "is not an op object"),
        ({"op": {"finish": {"request": 0}}}, "carries no index"),
        ({"op": {"finish": {"request": 0}}, "index": -1}, "carries no index"),
        ({"read": {"request": -1}}, "request -1 is not a request id"),
        ({"read": {}}, "field request is missing"),
        ({"view": {}}, "unknown request"),
        ([1, 2], "not a JSON object"),
    ]

    def test_each_is_named_and_the_session_goes_on(self):
        s = Session()
        for request, message in self.CASES:
            with self.subTest(request=request):
                response = s.session.handle(request)
                self.assertEqual(set(response), {"exception"}, response)
                self.assertTrue(response["exception"]["adapter"])
                self.assertIn(message, response["exception"]["message"])
                self.assertEqual(s.op({"evict": {"blocks": 0}}), {"ok": {"in_use": 0, "cached": 0, "free": 8}})

    def test_an_undeclared_op(self):
        s = Session(Minimal())
        response = s.op({"fork": {"request": 0, "into": 1}})
        self.assertEqual(response["exception"]["message"], "op fork is not declared (ops: start, compute, finish, read)")
        self.assertTrue(response["exception"]["adapter"])

    def test_before_open(self):
        session = PrefixSession(Naive())
        response = session.handle({"op": "clear", "index": 0})
        self.assertIn("no cache is open", response["exception"]["message"])
        self.assertIn("no cache is open", session.handle({"read": {"request": 0}})["exception"]["message"])

    def test_a_bug_of_the_subject_is_an_answer(self):
        class Broken(Minimal):
            def counts(self):
                return "three counts"

        response = Session(Broken()).opened
        self.assertTrue(response["exception"]["adapter"])
        self.assertIn("counts() must return three ints", response["exception"]["message"])


class Served(unittest.TestCase):
    """serve_prefix over text streams, and the module entry point."""

    def serve(self, lines, subject=Naive):
        out = io.StringIO()
        serve_prefix(subject, io.StringIO("".join(line + "\n" for line in lines)), out)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    def test_hello_open_op_read_close(self):
        lines = [
            json.dumps(HELLO),
            json.dumps({"open": {"config": config(blocks=4)}}),
            json.dumps({"op": {"start": {"request": 0, "tokens": [1, 2, 3]}}, "index": 0}),
            json.dumps({"op": {"compute": {"request": 0, "count": 3}}, "index": 1}),
            json.dumps({"read": {"request": 0}}),
            "",
            "not json",
            json.dumps({"op": "clear", "index": 2}),
            json.dumps({"close": {}}),
            json.dumps({"op": "clear", "index": 3}),  # after close: never answered
        ]
        responses = self.serve(lines)
        self.assertEqual(len(responses), 7)
        self.assertEqual(responses[0]["hello"]["family"], "prefix")
        self.assertEqual(responses[1:4], [
            {"ok": {"in_use": 0, "cached": 0, "free": 4}},
            {"ok": {"hit": 0, "in_use": 2, "cached": 0, "free": 2}},
            {"ok": {"in_use": 2, "cached": 0, "free": 2}},
        ])
        self.assertEqual(decode(responses[4]["ok"]["rows"]), flat(payload_bits(0, [1, 2, 3], 1, 2)))
        self.assertEqual(responses[5]["exception"]["type"], "ProtocolError")
        self.assertEqual(responses[6], {"ok": {"in_use": 2, "cached": 0, "free": 2}})

    def test_end_of_input_ends_the_loop(self):
        self.assertEqual(self.serve([json.dumps(HELLO)], Naive())[0]["hello"]["name"], "naive")

    def test_the_module_entry_point(self):
        process = subprocess.run(
            [sys.executable, "-m", "kvcheck.serve_prefix", HERE + ":Naive"],
            input="\n".join(json.dumps(r) for r in (
                HELLO,
                {"open": {"config": config()}},
                {"op": {"start": {"request": 0, "tokens": [1]}}, "index": 0},
                {"close": {}},
            )) + "\n",
            capture_output=True, universal_newlines=True, env=script_env(), timeout=60,
        )
        self.assertEqual((process.returncode, process.stderr), (0, ""))
        responses = [json.loads(line) for line in process.stdout.splitlines()]
        self.assertEqual(responses[2], {"ok": {"hit": 0, "in_use": 1, "cached": 0, "free": 7}})

    def test_a_target_that_is_not_a_prefix_subject(self):
        process = subprocess.run(
            [sys.executable, "-m", "kvcheck.serve_prefix", HERE + ":Payload"],
            capture_output=True, universal_newlines=True, env=script_env(), timeout=60, stdin=subprocess.DEVNULL,
        )
        self.assertEqual(process.returncode, 2)
        self.assertIn("is not a kvcheck.prefix.PrefixSubject subclass", process.stderr)



class WindowedNaive(Naive):
    """Naive with a window over layer 1 of two: reads it from the window's start."""

    window = {"sizes": [2, 3], "layers": [1]}
    groups = {"full": 1, "window": 1}

    def read(self, request):
        computed, start = self.requests[request].computed, self.window_start(request)
        return [[self.rows[request][p][layer] for p in range(start if layer == 1 else 0, computed)]
                for layer in range(self.config["layers"])]


class Windows(unittest.TestCase):
    """docs/contract.md §19 in the base: the config's window, the hello's
    declarations, where a window starts, and the configs outside them."""

    def windowed(self, size=2, layers=(1,)):
        return config(layers=2, row_width=1, window={"size": size, "layers": list(layers)})

    def test_the_hello_declares_window_and_groups_to_revision_six_only(self):
        s = Session(WindowedNaive(), self.windowed())
        caps = s.hello["hello"]["capabilities"]
        self.assertEqual(caps["window"], {"sizes": [2, 3], "layers": [1]})
        self.assertEqual(caps["groups"], {"full": 1, "window": 1})
        old = PrefixSession(WindowedNaive()).handle({"hello": dict(HELLO["hello"], revision=5)})
        self.assertNotIn("window", old["hello"]["capabilities"])
        self.assertNotIn("groups", old["hello"]["capabilities"])

    def test_a_window_that_breaks_a_rule_is_invalid_config_naming_it(self):
        cases = [
            ({"size": 0}, "window.size must be at least 1, got 0"),
            ({"size": 2, "layers": []}, "window.layers must be a non-empty list"),
            ({"size": 2, "layers": [2]}, "must be distinct layers below layers = 2"),
            ({"size": 2, "layers": [1, 1]}, "must be distinct layers below layers = 2"),
            ({"size": 2, "depth": 1}, "window.depth is not a field of a window"),
            (3, "window must be an object"),
        ]
        for window, message in cases:
            with self.subTest(window=window):
                err = Session(cfg=config(layers=2, window=window)).opened["err"]
                self.assertEqual(err["kind"], "invalid_config")
                self.assertIn(message, err["message"])

    def test_configs_its_windows_do_not_open_are_outside(self):
        cases = [
            (Naive(), self.windowed(), "opens no window"),
            (WindowedNaive(), config(layers=2), "opens only windowed configs"),
            (WindowedNaive(), self.windowed(size=4), "window size 4 is not opened"),
            (WindowedNaive(), self.windowed(layers=(0, 1)), "windowed layers [0, 1] are not"),
        ]
        for subject, cfg, message in cases:
            with self.subTest(message=message):
                self.assertIn(message, Session(subject, cfg).opened["outside"]["reason"])

    def test_the_window_starts_w_minus_one_keys_back_and_a_read_returns_it(self):
        s = Session(WindowedNaive(), self.windowed(size=2))
        self.assertEqual(s.subject.config["window"], {"size": 2, "layers": [1]})
        s.op({"start": {"request": 0, "tokens": [1, 2, 3, 4]}})
        s.op({"compute": {"request": 0, "count": 4}})
        self.assertEqual(s.subject.window_start(0), 3)
        rows = payload_bits(0, [1, 2, 3, 4], 2, 1)
        self.assertEqual(decode(s.read(0)["ok"]["rows"]), flat([rows[0], rows[1][3:]]))
        # A rollback of two drafts: the next query attends keys [1, 2].
        s.op({"rollback": {"request": 0, "count": 2}})
        self.assertEqual(s.subject.window_start(0), 1)
        self.assertEqual(decode(s.read(0)["ok"]["rows"]), flat([rows[0][:2], rows[1][1:2]]))
        s.op({"fork": {"request": 0, "into": 1}})
        self.assertEqual(s.subject.window_start(1), 1)
        s.op({"preempt": {"request": 1}})
        s.op({"resume": {"request": 1}})
        self.assertEqual(s.subject.window_start(1), 0)

    def test_bad_window_declarations_are_named(self):
        for window, groups in [({"sizes": []}, None), ({"sizes": [0]}, None), ({"layer": [1]}, None),
                               (None, {"full": 0}), (None, {"full": -1, "window": 2}), (None, {"swa": 1})]:
            subject = Minimal()
            subject.window, subject.groups = window, groups
            with self.subTest(window=window, groups=groups), self.assertRaises(ValueError):
                subject.validate()

if __name__ == "__main__":
    unittest.main()
