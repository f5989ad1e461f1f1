#!/usr/bin/env python3
"""Finds, minimizes and saves sglang's divergences from the cache contract.

Run through scripts/sglang-findings.sh, which sets up the environment and
builds kvcheck first. For every search below, an engine of kvcheck (explore
or run) checks sglang's real caches through adapters/sglang/subject.py; the
first divergence it saves is minimized with `kvcheck minimize` and replayed
on the *unmasked* subject, whose report is what docs/sglang.md quotes.

Masks (adapters/sglang/subject.py --mask) hold back requests of findings
already made, the way a fuzzer suppresses a known crash, so that each search
reports a new class; the minimizer runs with the same masks so it cannot
drift back to an earlier finding, and the replay without masks confirms that
the minimized trace shows plain sglang diverging.

Writes tests/external/sglang/<id>.kvtrace.json, tests/external/sglang/
findings.json (what the replay test checks) and a Markdown report.
"""

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "scripts", "sglang-configs")
SAVED = os.path.join(ROOT, "tests", "external", "sglang")

ARGS = ["gap-probe", "gap", "negative", "head-range", "pin-args"]

# id, SPEC.md §8 class, what the search aims at, engine, engine arguments,
# masks, exact kinds, which saved divergence to keep (a regex on its file
# name and, optionally, on its ops).
SEARCHES = [
    ("d11-zero-length-gap-write", "D11", "any dense cache", "explore",
     ["--depth", "3", "--capacity", "4", "--sink", "1"], [], False, r"outcome", None),
    ("d02-gap-write", "D2", "same, zero-length gap writes masked", "explore",
     ["--depth", "3", "--capacity", "4", "--sink", "1"], ["gap-probe"], False, r"outcome", None),
    ("d04-chunk-beside-sink", "D4", "same, argument findings masked", "explore",
     ["--depth", "3", "--capacity", "4", "--sink", "1"], ARGS, False, r"outcome", None),
    ("d06-chunk-larger-than-window", "D6", "window below capacity", "explore",
     ["--depth", "3", "--config", "window.kvtrace.json"], ARGS, False, r"outcome", None),
    ("d01-window-drops-sink", "D1", "window below capacity, D4/D6 and raising writes masked", "explore",
     ["--depth", "3", "--config", "window.kvtrace.json"],
     ARGS + ["probe-at-end", "own-view", "window-fit", "capacity-fit", "raises"], False, r"visible", None),
    ("d03-rewrite-of-sink-raises", "D3", "pins config, D4 masked, reads at the end", "explore",
     ["--depth", "3", "--small-alphabet", "--config", "pins.kvtrace.json"],
     ARGS + ["probe-at-end", "capacity-fit"], False, r"outcome", None),
    ("d05-failing-write-mutates", "D5", "two heads, argument findings masked", "explore",
     ["--depth", "3", "--config", "heads.kvtrace.json"], ARGS, False, r"probe", None),
    ("d12-negative-recent-window-packed", "D12", "packed, exact kinds", "explore",
     ["--depth", "2", "--exact-kinds", "--config", "packed.kvtrace.json"],
     ["gap-probe", "gap", "head-range", "packed-zero-len"], True, r"exception", None),
    ("d10-packed-head-range", "D10", "packed, two heads", "explore",
     ["--depth", "2", "--config", "packed-heads.kvtrace.json"], ARGS + ["packed-zero-len"], False, r"shape", None),
    ("d09-packed-window", "D9", "packed, window below capacity", "explore",
     ["--depth", "3", "--config", "packed-window.kvtrace.json"],
     ARGS + ["packed-zero-len", "window-fit", "capacity-fit", "raises", "probe-at-end"], False, r"visible", None),
    ("d07-pin-lost", "D7", "profile pins, raising and argument findings masked", "run",
     ["--profile", "pins", "--seed", "3", "--cases", "300", "--time", "120"],
     ARGS + ["probe-at-end", "raises", "capacity-fit"], False, r"visible", r'"pin"'),
    ("d13-head-range-start-ignored", "D13", "profile multi-head, no pins, gap, zero-head and raising findings masked",
     "run", ["--profile", "multi-head", "--seed", "1", "--cases", "300", "--time", "120"],
     ["no-pin", "gap-probe", "gap", "negative", "empty-heads", "probe-at-end", "raises", "capacity-fit"], False,
     r"outcome", r'"heads"'),
    ("d08-head-range-roll", "D8", "profile multi-head, no pins, no resets, argument and raising findings masked", "run",
     ["--profile", "multi-head", "--seed", "2", "--cases", "300", "--time", "120"],
     ["no-pin", "no-reset"] + ARGS + ["probe-at-end", "raises", "capacity-fit"], False, r"(values|visible)",
     r'"heads"'),
    # Not a row of SPEC.md §8: found by the D8 search before resets were
    # masked there. reset_indices() keeps the buffers, so a head-range write
    # after a reset shows the old stream's rows in the heads it leaves out
    # (SPEC.md §7: zeros, writer null).
    ("x01-reset-keeps-head-rows", "X1", "profile multi-head, no pins, argument and raising findings masked", "run",
     ["--profile", "multi-head", "--seed", "2", "--cases", "300", "--time", "120"],
     ["no-pin"] + ARGS + ["probe-at-end", "raises", "capacity-fit"], False, r"values", r'"reset"'),
]


def subject(python, version, masks):
    parts = [python, os.path.join(ROOT, "adapters", "sglang", "subject.py"), "--version", version]
    for mask in masks:
        parts += ["--mask", mask]
    return "exec:" + " ".join(shlex.quote(p) for p in parts)


def kvcheck(binary, args, timeout=900):
    started = time.monotonic()
    proc = subprocess.run(
        [binary] + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        timeout=timeout,
        env=dict(os.environ, RUST_BACKTRACE="0"),
    )
    return proc.returncode, proc.stdout, time.monotonic() - started


def first_block(text):
    """The first divergence report block of kvcheck's output, without the
    trace/reproduce lines (which name temporary paths)."""
    lines = [l[6:] if l.startswith("      ") else l for l in text.splitlines()]
    start = next((i for i, l in enumerate(lines) if l.startswith("──── kvcheck:")), None)
    if start is None:
        return None
    block = []
    for line in lines[start:]:
        if line.strip().startswith(("trace:", "reproduce:")):
            break
        if block and line.startswith("──── kvcheck:"):
            break
        block.append(line.rstrip())
    return "\n".join(block)


def pick(out_dir, pattern, ops_pattern):
    files = sorted(glob.glob(os.path.join(out_dir, "*.kvtrace.json")), key=os.path.getmtime)
    for path in files:
        if not re.search(pattern, os.path.basename(path)):
            continue
        with open(path) as f:
            text = f.read()
        if ops_pattern and not re.search(ops_pattern, json.dumps(json.loads(text)["ops"])):
            continue
        return path
    return None


def probes_at_end(path):
    """Writes the zero-length reads of a trace the way the probe-at-end mask
    asked them, at the global end (the contract's view is the same), so the
    unmasked replay shows the finding and not the raising read."""
    with open(path) as f:
        trace = json.load(f)
    global_end = 0
    for op, outcome in zip(trace["ops"], trace.get("expect") or []):
        w = op.get("write") if isinstance(op, dict) else None
        if w and w["len"] == 0 and w.get("recent_window") is None and 0 <= w["start"] < global_end:
            w["start"] = global_end
        if "ok" in outcome:
            global_end = outcome["ok"]["global_end"]
    with open(path, "w") as f:
        json.dump(trace, f, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvcheck", required=True)
    parser.add_argument("--python", required=True, help="the sglang venv's interpreter")
    parser.add_argument("--version", default=os.environ.get("SGLANG_VERSION", "0.5.23"))
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--only", action="append", default=[], help="run only these search ids")
    parser.add_argument("--report", required=True, help="Markdown report to write")
    args = parser.parse_args(argv)
    os.makedirs(SAVED, exist_ok=True)
    timeout = ["--subject-timeout", "120"]
    findings, report = [], []
    findings_path = os.path.join(SAVED, "findings.json")
    if args.only and os.path.exists(findings_path):
        with open(findings_path) as f:
            findings = [e for e in json.load(f) if e["id"] not in args.only]
    for sid, klass, aim, engine, engine_args, masks, exact, pattern, ops_pattern in SEARCHES:
        if args.only and sid not in args.only:
            continue
        out_dir = os.path.join(args.work, sid)
        shutil.rmtree(out_dir, ignore_errors=True)
        engine_args = [
            os.path.join(CONFIGS, a) if a.endswith(".kvtrace.json") else a for a in engine_args
        ]
        masked = subject(args.python, args.version, masks)
        cmd = [engine] + engine_args + timeout + ["--subject", masked, "--out", out_dir]
        code, output, seconds = kvcheck(args.kvcheck, cmd)
        found = pick(out_dir, pattern, ops_pattern)
        shown = " ".join(shlex.quote(a) for a in ["kvcheck"] + cmd).replace(ROOT + "/", "")
        print("== %s (%s): %s, exit %d, %.1f s" % (sid, klass, engine, code, seconds), flush=True)
        if found is None:
            print("   no divergence of the kind searched for")
            report.append("### %s — %s: not found\n\n`%s` (%.1f s) saved no matching divergence.\n" % (klass, sid, shown, seconds))
            continue
        cases = re.findall(r"(\d+) ops checked in ([\d.]+) s", output)
        # run's final table: profile, cache, cases, ops, ops/s, divergences.
        table = re.search(r"^\S+ +\S+ +(\d+) +(\d+) +\d+ +(\d+)\b", output, re.M)
        depth = re.search(r"shortest counterexample \((\d+) ops\), after (\d+) nodes expanded", output)
        effort = (
            "shortest counterexample at depth %s after %s nodes expanded (breadth first: every shorter sequence agreed)"
            % depth.groups()
            if depth
            else (
                "%s cases, %s ops checked, %s of the cases diverged" % table.groups()
                if table
                else ("%s ops checked" % cases[-1][0] if cases else "")
            )
        )
        minimized = os.path.join(SAVED, sid + ".kvtrace.json")
        exact_flag = ["--exact-kinds"] if exact else []
        mcode, mout, mseconds = kvcheck(
            args.kvcheck,
            ["minimize", found, "--max-tests", "600", "-o", minimized] + timeout + exact_flag + ["--subject", masked],
        )
        if "probe-at-end" in masks:
            probes_at_end(minimized)
        plain = subject(args.python, args.version, [])
        rcode, rout, _ = kvcheck(args.kvcheck, ["replay", minimized] + timeout + exact_flag + ["--subject", plain])
        block = first_block(rout)
        confirmed = rcode == 1 and block is not None
        step = re.search(r"divergence at step (\d+)", block or "")
        kind = re.search(r"──── kvcheck: (\w+) divergence", block or "")
        print("   minimized in %.1f s; unmasked replay %s" % (mseconds, "diverges" if confirmed else "AGREES"))
        with open(minimized) as f:
            trace = json.load(f)
        trace["note"] = "sglang %s %s (%s), found by kvcheck %s; minimized; see docs/sglang.md" % (
            args.version,
            klass,
            sid,
            engine,
        )
        with open(minimized, "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")
        if confirmed:
            entry = {
                "id": sid,
                "file": sid + ".kvtrace.json",
                "class": klass,
                "kind": kind.group(1),
                "step": int(step.group(1)),
                "exact_kinds": exact,
            }
            message = re.search(r"exception \w+: (.*)", block)
            if message:
                entry["message"] = message.group(1).strip()[:60]
            findings.append(entry)
        else:
            os.remove(minimized)
        report.append(
            "### %s — `%s`\n\nSearch: %s. Engine: `%s`\n(%.1f s, %s).\n"
            "Minimized in %.1f s to `tests/external/sglang/%s.kvtrace.json`; replayed on the unmasked subject:\n\n```text\n%s\n```\n"
            % (klass, sid, aim, shown, seconds, effort, mseconds, sid, block or rout[-2000:])
        )
    findings.sort(key=lambda e: e["id"])
    with open(findings_path, "w") as f:
        json.dump(findings, f, indent=1)
        f.write("\n")
    with open(args.report, "w") as f:
        f.write("\n".join(report).replace(ROOT + "/", ""))
    print("%d findings saved under tests/external/sglang/; report in %s" % (len(findings), args.report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
