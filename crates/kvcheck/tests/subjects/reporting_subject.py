#!/usr/bin/env python3
"""adapters/reference_subject.py on kvcheck.Subject with one thing changed,
for kvcheck's tests of revision 2 of kvcheck-subject/1:

  --resident-off-by N   report resident bytes N too many
  --fixed-capacity      report the configured capacity, even after growth
  --no-reports          declare no reports (a revision-1 subject)
  --strict-payload      an adapter that refuses (AdapterError) any write
                        whose payload is not [B, len, hc, D] with hc the
                        request's head count (all heads when it names none)
  --adapter-refuses-head-ranges
                        an adapter that refuses (AdapterError) every write
                        with a head range the contract refuses, instead of
                        passing it on to the cache
"""

import argparse
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "adapters"))

import reference_subject  # noqa: E402  (it finds kvcheck in python/ when not installed)

kvcheck = reference_subject.kvcheck


class Reporting(reference_subject.Reference):
    def __init__(self, args):
        super().__init__()
        self.args = args
        if args.no_reports:
            self.reports = ()

    @classmethod
    def from_args(cls, argv):
        parser = argparse.ArgumentParser()
        parser.add_argument("--resident-off-by", type=int, default=0)
        parser.add_argument("--fixed-capacity", action="store_true")
        parser.add_argument("--no-reports", action="store_true")
        parser.add_argument("--strict-payload", action="store_true")
        parser.add_argument("--adapter-refuses-head-ranges", action="store_true")
        return cls(parser.parse_args(argv))

    def write(self, start, length, heads, recent_window, k, v):
        c = self.cache.config
        count = c["heads"] if heads is None else heads[1]
        if self.args.adapter_refuses_head_ranges and heads is not None:
            if heads[0] < 0 or count < 1 or heads[0] + count > c["heads"]:
                raise kvcheck.AdapterError("heads %s: no such slice of the cache's heads" % (list(heads),))
        if self.args.strict_payload and length >= 0 and count >= 0:
            want = c["batch"] * length * count * self.cache.row_bytes
            if len(k) != want or len(v) != want:
                raise kvcheck.AdapterError("payload of %d bytes, expected %d" % (len(k), want))
        return super().write(start, length, heads, recent_window, k, v)

    @property
    def capacity(self):
        return self.cache.config["capacity"] if self.args.fixed_capacity else self.cache.capacity

    @property
    def resident_bytes(self):
        return self.cache.resident_bytes() + self.args.resident_off_by


if __name__ == "__main__":
    kvcheck.serve(Reporting.from_args(sys.argv[1:]))
