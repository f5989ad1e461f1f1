"""kvcheck.Subject and kvcheck.serve, through kvcheck-subject/1.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
(numpy cases skip without numpy; none needs the network or the binary).
"""

import base64
import json
import os
import struct
import subprocess
import sys
import unittest

import kvcheck
from kvcheck.adapter import script_env
from kvcheck.subject import Session

import echo_subjects

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import numpy
except ImportError:  # the conversions are then checked where numpy is
    numpy = None

needs_numpy = unittest.skipIf(numpy is None, "numpy is not installed")


def config(**fields):
    base = {
        "variant": "dense",
        "batch": 1,
        "heads": 2,
        "head_dim": 2,
        "dtype": "f32",
        "capacity": 8,
        "sink": 0,
        "window": None,
        "growth": False,
        "global_sink": 0,
        "packed": None,
        "seed": 0,
    }
    base.update(fields)
    return base


def b64(data):
    return base64.b64encode(data).decode("ascii")


def write(start, length, payload, index=0, **extra):
    body = dict({"start": start, "len": length}, **extra)
    return {"op": {"write": body}, "index": index, "k": b64(payload), "v": b64(payload)}


def floats(*values):
    return struct.pack("<%df" % len(values), *values)


class Served:
    """`python -m kvcheck.serve TARGET` as a child process."""

    def __init__(self, target, *args):
        env = script_env(HERE)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kvcheck.serve", target] + list(args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            env=env,
        )

    def request(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def finish(self, close=True):
        if close:
            self.process.stdin.write('{"close": {}}\n')
        out, err = self.process.communicate(timeout=30)
        self.process.stdout.close()
        self.process.stderr.close()
        return self.process.returncode, out, err


class Protocol(unittest.TestCase):
    """The handshake, the response shapes and the exit, over a real pipe."""

    def test_hello_open_write_reset_close(self):
        served = Served("echo_subjects:Echo")
        hello = served.request({"hello": {"protocol": "kvcheck-subject/1", "revision": 2}})["hello"]
        self.assertEqual(hello["protocol"], "kvcheck-subject/1")
        self.assertEqual(hello["name"], "Echo")
        # rewind, evict, pin and view are not defined, so not declared.
        self.assertEqual(hello["capabilities"]["ops"], ["write", "reset"])
        self.assertFalse(hello["capabilities"]["view"])
        self.assertNotIn("reports", hello["capabilities"])
        self.assertEqual(served.request({"open": {"config": config()}}), {"ok": {}})
        data = floats(1.0, 2.0, 3.0, 4.0)
        ok = served.request(write(0, 1, data))["ok"]
        self.assertEqual(ok, {"global_end": 1, "visible": [0], "k": b64(data), "v": b64(data)})
        self.assertEqual(served.request({"op": "reset", "index": 1}), {"ok": {"global_end": 0}})
        self.assertEqual(served.finish(), (0, "", ""))

    def test_end_of_input_exits_cleanly(self):
        served = Served("echo_subjects:Echo")
        # communicate() without `close` only closes stdin: end of input.
        self.assertEqual(served.finish(close=False), (0, "", ""))

    def test_stdout_of_the_subject_goes_to_stderr(self):
        served = Served("echo_subjects:Echo", "--chatty")
        served.request({"hello": {"protocol": "kvcheck-subject/1"}})
        served.request({"open": {"config": config()}})
        self.assertIn("ok", served.request(write(0, 1, floats(1, 2, 3, 4))))
        status, out, err = served.finish()
        self.assertEqual((status, out), (0, ""))
        self.assertIn("a library printing to stdout", err)

    def test_garbage_line_and_op_before_open(self):
        served = Served("echo_subjects:Echo")
        served.process.stdin.write("not json\n")
        served.process.stdin.flush()
        self.assertEqual(json.loads(served.process.stdout.readline())["exception"]["type"], "ProtocolError")
        response = served.request({"op": "reset", "index": 0})
        self.assertEqual(response["exception"]["type"], "ProtocolError")
        served.finish()

    def test_a_class_without_write_is_refused_at_start(self):
        status, out, err = Served("echo_subjects:NoWrite").finish(close=False)
        self.assertEqual((status, out), (2, ""))
        self.assertIn("NoWrite must define write", err)

    def test_a_target_that_is_not_a_subject_is_refused_at_start(self):
        status, _, err = Served("echo_subjects:config").finish(close=False)
        self.assertEqual(status, 2)
        self.assertIn("not a kvcheck.Subject subclass", err)
        status, _, err = Served("echo_subjects:Echo", "--chatty", "x").finish()
        self.assertEqual(status, 0)

    def test_a_file_path_target(self):
        served = Served(os.path.join(HERE, "echo_subjects.py") + ":Echo")
        self.assertEqual(served.request({"hello": {}})["hello"]["name"], "Echo")
        self.assertEqual(served.finish()[0], 0)


class Outcomes(unittest.TestCase):
    """What the subclass raises or returns, as the harness reads it."""

    def session(self, cls=echo_subjects.Echo, revision=2, **fields):
        session = Session(cls())
        session.handle({"hello": {"protocol": "kvcheck-subject/1", "revision": revision}})
        self.assertIn("ok", session.handle({"open": {"config": config(**fields)}}))
        return session

    def test_open_refusal_is_invalid_config(self):
        session = Session(echo_subjects.Echo())
        response = session.handle({"open": {"config": config(heads=5)}})
        self.assertEqual(response, {"err": {"kind": "invalid_config", "message": "at most 4 heads"}})
        # No cache is open after a refused open.
        self.assertEqual(session.handle({"op": "reset", "index": 0})["exception"]["type"], "ProtocolError")

    def test_refused_is_err_and_other_exceptions_are_exception(self):
        session = self.session()
        response = session.handle(write(3, 1, floats(1, 2, 3, 4)))
        self.assertEqual(response, {"err": {"kind": "non_sequential", "message": "gap at 3"}})
        response = session.handle(write(-1, 1, floats(1, 2, 3, 4)))
        self.assertEqual(response, {"exception": {"type": "ValueError", "message": "start must be >= 0"}})

    def test_a_kind_spec_does_not_have_is_the_adapters_error(self):
        response = self.session().handle(write(0, 1, floats(1, 2, 3, 4), recent_window=99))
        self.assertTrue(response["exception"]["adapter"])
        self.assertIn("no_such_kind", response["exception"]["message"])

    def test_an_undeclared_op_is_the_adapters_error(self):
        response = self.session().handle({"op": {"evict": {"tokens": 1}}, "index": 0})
        self.assertTrue(response["exception"]["adapter"])

    def test_bytes_subjects_get_the_bytes_as_sent(self):
        session = self.session()
        session.handle(write(0, 1, b"xx", heads=[1, 1]))
        self.assertEqual(session.subject.last, (0, 1, (1, 1), None, b"xx", b"xx"))

    @needs_numpy
    def test_numpy_declares_what_it_defines_and_reports_with_revision_2(self):
        caps = echo_subjects.EchoNumpy().capabilities()
        self.assertEqual(caps["ops"], ["write", "rewind", "reset"])
        self.assertEqual(caps["reports"], ["capacity", "resident_bytes"])
        self.assertNotIn("reports", echo_subjects.EchoNumpy().capabilities(revision=1))
        session = Session(echo_subjects.EchoNumpy())
        session.handle({"hello": {"protocol": "kvcheck-subject/1", "revision": 2}})
        # The fresh cache's state comes with the open.
        ok = session.handle({"open": {"config": config()}})["ok"]
        self.assertEqual(ok, {"capacity": 8, "resident_bytes": 7})
        ok = session.handle({"op": {"rewind": {"to": 0}}, "index": 0})["ok"]
        self.assertEqual(ok, {"global_end": 0, "capacity": 8, "resident_bytes": 7})
        old = self.session(echo_subjects.EchoNumpy, revision=1)
        self.assertEqual(old.handle({"view": {}})["ok"], {"global_end": 0, "visible": [], "k": "", "v": ""})

    @needs_numpy
    def test_numpy_payloads_have_the_write_shape_and_dtype(self):
        session = self.session(echo_subjects.EchoNumpy, batch=2, heads=3)
        data = floats(*range(2 * 2 * 1 * 2))
        ok = session.handle(write(0, 2, data, heads=[2, 1]))["ok"]
        k = session.subject.last[4]
        self.assertEqual((k.shape, str(k.dtype)), ((2, 2, 1, 2), "float32"))
        self.assertTrue(k.flags.writeable and k.flags.c_contiguous)
        self.assertEqual(base64.b64decode(ok["k"]), data)

    @needs_numpy
    def test_numpy_float64_answers_are_converted_to_the_dtype(self):
        for dtype, raw in (
            ("f32", floats(1.5, -2.25)),
            ("f16", struct.pack("<2e", 1.5, -2.25)),
            ("bf16", struct.pack("<2H", 0x3FC0, 0xC010)),
        ):
            with self.subTest(dtype=dtype):
                session = self.session(echo_subjects.EchoNumpy, heads=1, dtype=dtype)
                ok = session.handle(write(0, 1, raw, recent_window=1))["ok"]
                self.assertEqual(base64.b64decode(ok["k"]), raw)

    @needs_numpy
    def test_arrays_numpy_can_convert_are_accepted(self):
        session = self.session(echo_subjects.EchoNumpy)
        data = floats(1, 2, 3, 4)
        ok = session.handle(write(0, 1, data, recent_window=3))["ok"]
        self.assertEqual(base64.b64decode(ok["k"]), data)

    @needs_numpy
    def test_bf16_rounds_to_nearest_even(self):
        from kvcheck import _arrays

        values = numpy.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, float("nan"), -0.0], dtype="float32")
        bits = _arrays.bf16_bits(numpy, values).tolist()
        self.assertEqual(bits[:2], [0x3F80, 0x3F82])
        self.assertEqual(bits[2] & 0x7FC0, 0x7FC0)
        self.assertEqual(bits[3], 0x8000)

    @needs_numpy
    def test_a_payload_of_another_size_arrives_as_none(self):
        session = self.session(echo_subjects.EchoNumpy)
        session.handle(write(0, 1, b"xx"))
        self.assertEqual(session.subject.last[4:], (None, None))

    @needs_numpy
    def test_an_answer_of_an_unknown_type_is_the_adapters_error(self):
        session = self.session(echo_subjects.EchoNumpy)
        response = session.handle(write(0, 1, floats(1, 2, 3, 4), recent_window=2))
        self.assertTrue(response["exception"]["adapter"])
        self.assertIn("type list", response["exception"]["message"])

    @needs_numpy
    def test_negative_dimensions_arrive_as_none(self):
        session = self.session(echo_subjects.EchoNumpy)
        session.handle(write(0, -1, b""))
        self.assertEqual(session.subject.last[4:], (None, None))

    @needs_numpy
    def test_bhnd_layout_both_ways(self):
        session = self.session(echo_subjects.EchoBhnd, heads=2, head_dim=1)
        data = floats(1, 2, 3, 4)  # [B=1, n=2, H=2, D=1]: (pos 0: 1 2) (pos 1: 3 4)
        ok = session.handle(write(0, 2, data))["ok"]
        self.assertEqual(session.subject.shape, (1, 2, 2, 1))
        self.assertEqual(session.subject.last[4][0, :, :, 0].tolist(), [[1, 3], [2, 4]])
        self.assertEqual(base64.b64decode(ok["k"]), data)


class OutsideAnswers(unittest.TestCase):
    """kvcheck.Outside: revision 3's `outside` answer, an exception before."""

    def session(self, revision):
        session = Session(echo_subjects.Pipeline())
        hello = session.handle({"hello": {"protocol": "kvcheck-subject/1", "revision": revision}})
        self.assertIn("ok", session.handle({"open": {"config": config()}}))
        return session, hello["hello"]["capabilities"]

    def test_revision_3_answers_outside_and_declares_the_domain(self):
        session, caps = self.session(3)
        self.assertEqual(caps["domain"], {"rewrites": "latest", "gaps": False})
        self.assertEqual(session.handle(write(2, 1, floats(1, 2, 3, 4))), {"outside": {"reason": "gap at 2"}})
        self.assertIn("ok", session.handle(write(0, 2, floats(*range(8)))))
        self.assertIn("ok", session.handle(write(0, 2, floats(*range(8)))))
        self.assertEqual(session.handle(write(1, 1, floats(1, 2, 3, 4))), {"outside": {"reason": "rewrite of 1+1"}})
        # A contract refusal is still an err, and the answer moves nothing.
        self.assertEqual(session.subject.global_end, 2)

    def test_an_older_harness_gets_an_exception_and_no_domain(self):
        for revision in (1, 2):
            session, caps = self.session(revision)
            self.assertNotIn("domain", caps)
            response = session.handle(write(5, 1, floats(1, 2, 3, 4)))
            self.assertEqual(response, {"exception": {"type": "Outside", "message": "gap at 5"}})

    def test_an_open_outside_the_domain(self):
        for revision, answer in (
            (3, {"outside": {"reason": "the loop reads the whole buffer"}}),
            (2, {"err": {"kind": "invalid_config", "message": "Outside: the loop reads the whole buffer"}}),
        ):
            session = Session(echo_subjects.Pipeline())
            session.handle({"hello": {"protocol": "kvcheck-subject/1", "revision": revision}})
            self.assertEqual(session.handle({"open": {"config": config(window=4)}}), answer)
            self.assertEqual(session.handle({"op": "reset", "index": 0})["exception"]["type"], "ProtocolError")

    def test_outside_from_view_and_the_other_ops(self):
        class Everywhere(echo_subjects.Echo):
            def rewind(self, to):
                raise kvcheck.Outside("the loop never rewinds")

            def view(self):
                raise kvcheck.Outside("no probe")

        session = Session(Everywhere())
        session.handle({"hello": {"protocol": "kvcheck-subject/1", "revision": 3}})
        self.assertIn("ok", session.handle({"open": {"config": config()}}))
        self.assertEqual(session.handle({"op": {"rewind": {"to": 0}}, "index": 0}), {"outside": {"reason": "the loop never rewinds"}})
        self.assertEqual(session.handle({"view": {}}), {"outside": {"reason": "no probe"}})

    def test_a_served_subject_answers_outside_over_the_wire(self):
        served = Served("echo_subjects:Pipeline")
        hello = served.request({"hello": {"protocol": "kvcheck-subject/1", "revision": 3}})["hello"]
        self.assertEqual(hello["capabilities"]["domain"]["rewrites"], "latest")
        self.assertIn("ok", served.request({"open": {"config": config()}}))
        self.assertEqual(served.request(write(4, 1, floats(1, 2, 3, 4))), {"outside": {"reason": "gap at 4"}})
        self.assertEqual(served.finish()[0], 0)


class Domains(unittest.TestCase):
    """The `domain` declaration: checked at start, sent as declared."""

    def declared(self, domain):
        class Declared(echo_subjects.Echo):
            pass

        Declared.domain = domain
        return Declared()

    def test_every_field_of_the_protocol_is_accepted(self):
        domain = {
            "rewrites": "latest",
            "chunks": {"lengths": [3, 6]},
            "probes": "after_append",
            "gaps": False,
            "oversized": False,
            "malformed": False,
            "evict": "scene_cut",
            "pin": "held",
            "rewinds": "held",
            "configs": {
                "min_room": 3,
                "min_window": 3,
                "batch": [1],
                "heads": [1, 2],
                "head_dim": [4],
                "max_sink": 0,
                "growth": True,
            },
            "after_read": {"oversized": True, "configs": {"max_sink": 2}},
        }
        self.assertEqual(sorted(domain), sorted(kvcheck.DOMAIN_FIELDS))
        self.assertEqual(sorted(domain["configs"]), sorted(kvcheck.subject.CONFIG_LIMITS))
        subject = self.declared(domain)
        Session(subject)
        self.assertEqual(subject.capabilities(revision=3)["domain"], domain)
        self.assertNotIn("domain", subject.capabilities(revision=2))
        for chunks in ("any", {"multiple": 3}, {"lengths": (2,)}):
            caps = self.declared({"chunks": chunks}).capabilities(revision=3)
            self.assertEqual(json.loads(json.dumps(caps))["domain"]["chunks"], chunks if chunks != {"lengths": (2,)} else {"lengths": [2]})
        self.assertNotIn("domain", echo_subjects.Echo().capabilities(revision=3))

    def test_a_bad_field_is_named(self):
        for domain, named in (
            ({"gap": False}, "unknown field 'gap'"),
            ({"gaps": "no"}, "'gaps': 'no' is not true or false"),
            ({"rewrites": "oldest"}, "'rewrites': 'oldest' is not one of any, latest, none"),
            ({"probes": None}, "'probes'"),
            ({"evict": "always"}, "'evict'"),
            ({"chunks": {"lengths": []}}, "chunks"),
            ({"chunks": {"lengths": [3, 0]}}, "positive"),
            ({"chunks": {"multiple": True}}, "positive"),
            ({"chunks": {"sizes": [3]}}, "chunks"),
            ({"chunks": 3}, "chunks"),
            ({"configs": {"growth": 1}}, "expected true or false"),
            ({"after_read": {"gap": False}}, "\"after_read\": unknown field 'gap'"),
            ({"configs": {"max_sink": -1}}, "expected an int >= 0"),
            ({"configs": {"max_sink": False}}, "expected an int >= 0"),
            (["gaps"], "expected a dict"),
        ):
            with self.assertRaisesRegex(ValueError, "Declared.domain") as caught:
                Session(self.declared(domain))
            self.assertIn(named, str(caught.exception))


class Declarations(unittest.TestCase):
    def test_unknown_declarations_are_named(self):
        class Bad(echo_subjects.Echo):
            features = ("growth", "telepathy")

        with self.assertRaisesRegex(ValueError, "Bad.features"):
            Session(Bad())

    def test_ops_attribute_narrows_the_defined_ops(self):
        class Narrow(echo_subjects.EchoNumpy):
            ops = ("write",)

        self.assertEqual(Narrow().capabilities()["ops"], ["write"])

    def test_refused_carries_kind_and_message(self):
        refusal = kvcheck.Refused("evicted", "position 3 is gone")
        self.assertEqual((refusal.kind, refusal.message, str(refusal)), ("evicted", "position 3 is gone", "evicted: position 3 is gone"))


if __name__ == "__main__":
    unittest.main()
