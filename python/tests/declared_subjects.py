"""The reference cache (adapters/reference_subject.py) declaring a domain
a test chooses, and answering outside where a test needs it."""

import json
import os

import kvcheck
from kvcheck.adapter import shared

reference_subject = shared("reference_subject")


class Declared(reference_subject.Reference):
    """The reference cache declaring the domain that $ECHO_DOMAIN holds as
    JSON (none when unset), so that a test can declare any domain."""

    domain = json.loads(os.environ.get("ECHO_DOMAIN", "null"))


class RefusesRewrites(Declared):
    """The reference cache answering outside to every rewrite (the latest
    chunk's too), declaring $ECHO_DOMAIN: a test declares what a warning
    suggested."""

    def write(self, start, length, heads, recent_window, k, v):
        if length > 0 and 0 <= start < self.global_end:
            raise kvcheck.Outside("this cache only appends")
        return super().write(start, length, heads, recent_window, k, v)
