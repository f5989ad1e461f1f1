#!/usr/bin/env python3
"""adapters/reference_subject.py with misbehaviour on demand, for kvcheck's
own tests of the exec subject: each option makes the subject fail in one
way that the harness must report as its own divergence kind.

  --fault NAME              a planted bug of the reference subject
  --raise-on-refusal        answer every contract refusal with an exception
  --raise-on-overlap        raise ValueError on writes that overlap the
                            global end (where the contract succeeds)
  --misbehave KIND --at N   at op request N (0-based, over the process's
                            life): sleep (forever), exit (status 3),
                            garbage (a line that is not JSON), short (a K
                            payload one byte short), raise (an uncaught
                            RuntimeError: the process dies with a traceback)
  --slow-start S            take S seconds over the first open (an
                            adapter importing a framework)
  --caps NAME               declare fewer capabilities: positions-only
                            (no K/V bytes), dense-writes-only
  --log-index PATH          append a line per op request to PATH: the op's
                            name and the index it carries (what kvcheck
                            sends as each op's writer id)
"""

import argparse
import base64
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "adapters"))

import reference_subject  # noqa: E402

CAPS = {
    "positions-only": dict(reference_subject.capabilities(), values=False),
    "dense-writes-only": {"variants": ["dense"], "dtypes": ["f32"], "ops": ["write"],
                          "features": [], "values": True, "view": False},
}


class Misbehaving(reference_subject.Session):
    def __init__(self, args):
        super().__init__(args.fault)
        self.args = args
        self.requests = 0

    def handle(self, request):
        args = self.args
        if "hello" in request:
            response = super().handle(request)
            if args.caps in CAPS:
                response["hello"]["capabilities"] = CAPS[args.caps]
            return response
        if "open" in request and args.slow_start:
            time.sleep(args.slow_start)
            args.slow_start = 0
        if "op" not in request and "view" not in request:
            return super().handle(request)
        if args.log_index and "op" in request:
            op = request["op"]
            name = op if isinstance(op, str) else next(iter(op))
            with open(args.log_index, "a") as log:
                log.write("%s %s\n" % (name, request.get("index")))
        at_turn = args.misbehave and self.requests == args.at
        self.requests += 1
        if at_turn:
            print("about to misbehave: %s" % args.misbehave, file=sys.stderr, flush=True)
            if args.misbehave == "sleep":
                time.sleep(3600)
            if args.misbehave == "exit":
                sys.exit(3)
            if args.misbehave == "garbage":
                return "this is not json"
            if args.misbehave == "raise":
                raise RuntimeError("planted: the adapter itself is broken")
        write = request.get("op", {}).get("write") if isinstance(request.get("op"), dict) else None
        if args.raise_on_overlap and write and write["start"] < self.cache.global_end < write["start"] + write["len"]:
            return reference_subject.exception("ValueError", "overlapping write")
        response = super().handle(request)
        if args.raise_on_refusal and "err" in response:
            return reference_subject.exception("ValueError", response["err"]["message"])
        if "ok" in response and args.caps == "positions-only":
            response["ok"].pop("k", None)
            response["ok"].pop("v", None)
        if at_turn and args.misbehave == "short":
            k = base64.b64decode(response["ok"]["k"])[:-1]
            response["ok"]["k"] = base64.b64encode(k).decode()
        return response


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=sorted(reference_subject.FAULTS))
    parser.add_argument("--raise-on-refusal", action="store_true")
    parser.add_argument("--raise-on-overlap", action="store_true")
    parser.add_argument("--misbehave", choices=["sleep", "exit", "garbage", "short", "raise"])
    parser.add_argument("--at", type=int, default=0)
    parser.add_argument("--slow-start", type=float, default=0)
    parser.add_argument("--caps", default="full", choices=["full"] + sorted(CAPS))
    parser.add_argument("--log-index")
    session = Misbehaving(parser.parse_args())

    class Out:
        """Writes a garbage line verbatim, everything else as the reference does."""

        def write(self, text):
            if text.startswith('"this is not json"'):
                text = "this is not json\n"
            sys.stdout.write(text)

        def flush(self):
            sys.stdout.flush()

    reference_subject.serve(session, sys.stdin, Out())


if __name__ == "__main__":
    main()
