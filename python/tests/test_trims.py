"""kvcheck.Subject's trim modes (docs/contract.md §3, trim modes): the
`trims` declaration, its `hello` capability (revision 4) and the `trim`
field of the config dict `open` receives.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import unittest

import kvcheck
from kvcheck.subject import Session

import echo_subjects


class Opened(echo_subjects.Echo):
    """Keeps the config dict it was opened with."""

    trims = ("after_read",)


def hello(session, revision):
    request = {"hello": {"protocol": kvcheck.PROTOCOL, "revision": revision}}
    return session.handle(request)["hello"]["capabilities"]


def config(**fields):
    base = {"variant": "dense", "batch": 1, "heads": 1, "head_dim": 1, "dtype": "f32", "capacity": 4}
    base.update(fields)
    return base


class TrimDeclarations(unittest.TestCase):
    def test_the_default_is_before_read_and_is_not_sent(self):
        self.assertEqual(kvcheck.TRIMS, ("before_read", "after_read"))
        self.assertEqual(kvcheck.Subject.trims, ("before_read",))
        self.assertNotIn("trims", hello(Session(echo_subjects.Echo()), 4))

    def test_a_declared_mode_is_sent_from_revision_4_on(self):
        session = Session(Opened())
        self.assertEqual(hello(session, 4)["trims"], ["after_read"])
        self.assertEqual(hello(session, kvcheck.subject.REVISION)["trims"], ["after_read"])
        # Older harnesses refuse unknown capability fields.
        for revision in (1, 2, 3):
            self.assertNotIn("trims", hello(session, revision))

    def test_both_modes_are_sent_as_declared(self):
        class Both(echo_subjects.Echo):
            trims = kvcheck.TRIMS

        self.assertEqual(hello(Session(Both()), 4)["trims"], ["before_read", "after_read"])

    def test_a_bad_declaration_is_named(self):
        class Sideways(echo_subjects.Echo):
            trims = ("sideways",)

        class Nothing(echo_subjects.Echo):
            trims = ()

        class Text(echo_subjects.Echo):
            trims = "after_read"

        for bad in (Sideways, Nothing, Text):
            with self.assertRaisesRegex(ValueError, "%s.trims" % bad.__name__):
                Session(bad())


class TrimInTheConfig(unittest.TestCase):
    def test_open_fills_the_default_and_passes_after_read_through(self):
        session = Session(Opened())
        hello(session, 4)
        self.assertIn("ok", session.handle({"open": {"config": config()}}))
        self.assertEqual(session.subject.config["trim"], "before_read")
        self.assertIn("ok", session.handle({"open": {"config": config(trim="after_read")}}))
        self.assertEqual(session.subject.config["trim"], "after_read")

    def test_the_harness_config_is_not_modified(self):
        sent = config()
        session = Session(Opened())
        session.handle({"open": {"config": sent}})
        self.assertNotIn("trim", sent)


if __name__ == "__main__":
    unittest.main()
