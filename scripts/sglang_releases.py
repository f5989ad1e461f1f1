#!/usr/bin/env python3
"""The clean protocol and the saved sglang findings, replayed on each release.

For every release given (each set up with adapters/sglang/setup.sh, which
this runs), replays with kvcheck:

- 300 clean-protocol traces (adapters/clean_protocol.py), drawn only from
  what that release's classes can express (its `hello`), exact error kinds;
- every finding of tests/external/sglang/findings.json, with the exact-kinds
  setting it was found with.

Writes a Markdown table release x class: `step N kind` where the release
diverges as the finding says, `agrees` where it does not diverge, another
divergence where it diverges differently, `n/a` where the release cannot
express the trace (a class or call it does not have yet).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAVED = os.path.join(ROOT, "tests", "external", "sglang")


def replay(kvcheck, subject, paths, exact):
    args = [kvcheck, "replay", "--json", "--subject-timeout", "120", "--subject", subject]
    if exact:
        args.append("--exact-kinds")
    proc = subprocess.run(
        args + paths, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
        env=dict(os.environ, RUST_BACKTRACE="0"),
    )
    return json.loads(proc.stdout)


def cell(result, entry):
    if result.get("skipped"):
        return "n/a"
    if result.get("setup_error"):
        return "n/a"
    d = result.get("divergence")
    if d is None:
        return "agrees"
    if d["step"] == entry["step"] and d["kind"] == entry["kind"]:
        return "step %d %s" % (d["step"], d["kind"])
    return "step %d %s (differs)" % (d["step"], d["kind"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvcheck", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--report", required=True)
    # Every release that ships the kvcache files (0.5.12.post1 and earlier
    # do not); the .post releases carry the same sources as their base.
    parser.add_argument(
        "releases",
        nargs="*",
        default=["0.5.%d" % minor for minor in range(13, 24)],
    )
    args = parser.parse_args(argv)
    with open(os.path.join(SAVED, "findings.json")) as f:
        findings = json.load(f)
    rows = []
    for version in args.releases:
        subprocess.run(
            [os.path.join(ROOT, "adapters", "sglang", "setup.sh")],
            env=dict(os.environ, SGLANG_VERSION=version),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subject_cmd = "%s %s --version %s" % (
            args.python,
            os.path.join(ROOT, "adapters", "sglang", "subject.py"),
            version,
        )
        clean_dir = os.path.join(args.work, version, "clean")
        subprocess.run(
            [sys.executable, os.path.join(ROOT, "adapters", "clean_protocol.py"), "--count", "300", "--seed", "1",
             "--out", clean_dir, "--subject", subject_cmd],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        clean = replay(args.kvcheck, "exec:" + subject_cmd, [clean_dir], True)
        passed = sum(1 for r in clean if r["passed"] and not r.get("skipped"))
        row = {"release": version, "clean": "%d/%d" % (passed, len(clean))}
        for entry in findings:
            path = os.path.join(SAVED, entry["file"])
            result = replay(args.kvcheck, "exec:" + subject_cmd, [path], entry.get("exact_kinds", False))[0]
            row[entry["id"]] = cell(result, entry)
        rows.append(row)
        print(version, json.dumps(row), flush=True)
    ids = [e["id"] for e in findings]
    classes = {e["id"]: e["class"] for e in findings}
    lines = [
        "| release | clean protocol | " + " | ".join("%s `%s`" % (classes[i], i) for i in ids) + " |",
        "|---|---|" + "---|" * len(ids),
    ]
    for row in rows:
        lines.append("| %s | %s | " % (row["release"], row["clean"]) + " | ".join(row[i] for i in ids) + " |")
    with open(args.report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
