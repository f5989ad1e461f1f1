#!/usr/bin/env python3
"""Finds, minimizes and saves sglang's divergences from the cache contract.

Run through scripts/sglang-findings.sh, which sets up the environment and
builds kvcheck first. Each search below runs an engine of kvcheck (explore or
run) in triage mode (`--keep-going`) on sglang's real caches through
adapters/sglang/subject.py: the engine records every divergence, groups them
by signature (kind, variant, op, the shape of the first difference, the
exception type) and minimizes one representative of each. Each finding is
then matched to a class of docs/contract.md §8 (CLASSES), replayed on the *unmasked*
subject, and saved when plain sglang still diverges there; a finding that
matches no class is reported as such.

Masks (adapters/sglang/subject.py --mask) hold back requests of the cheapest
findings, which otherwise end most cases of a `run` before the deeper ones
are reached, the way a fuzzer suppresses a known crash; the minimizer runs
with the same masks, and the replay without masks confirms that the
minimized trace shows plain sglang diverging.

Writes tests/external/sglang/<id>.kvtrace.json, tests/external/sglang/
findings.json (what the replay test checks) and a Markdown report.
"""

import argparse
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
DEEP = ["probe-at-end", "raises", "capacity-fit"]

# id, what it aims at, engine, engine arguments, masks, exact kinds.
SEARCHES = [
    ("dense", "dense C=4 S=1, no masks: gap writes, chunks beside the sink", "explore",
     ["--depth", "2", "--capacity", "4", "--sink", "1"], [], False),
    ("window", "window below capacity, argument findings masked", "explore",
     ["--depth", "2", "--config", "window.kvtrace.json"], ARGS, False),
    ("pins", "pins config, argument findings and chunks beside the sink masked, reads at the end", "explore",
     ["--depth", "3", "--small-alphabet", "--config", "pins.kvtrace.json"], ARGS + ["probe-at-end", "capacity-fit"], False),
    ("heads", "two heads, argument findings masked", "explore",
     ["--depth", "2", "--config", "heads.kvtrace.json"], ARGS, False),
    ("packed-heads", "packed, two heads", "explore",
     ["--depth", "2", "--config", "packed-heads.kvtrace.json"], ARGS + ["packed-zero-len"], False),
    ("packed-window", "packed, window below capacity, raising and fitting writes masked", "explore",
     ["--depth", "2", "--config", "packed-window.kvtrace.json"],
     ARGS + ["packed-zero-len", "window-fit"] + DEEP, False),
    ("packed-exact", "packed, exact kinds", "explore",
     ["--depth", "1", "--exact-kinds", "--config", "packed.kvtrace.json"],
     ["gap-probe", "gap", "head-range", "packed-zero-len"], True),
    ("head-ranges", "profile multi-head, no pins, every head range unmasked", "run",
     ["--profile", "multi-head", "--seed", "1", "--cases", "300", "--time", "120"],
     ["no-pin", "gap-probe", "gap", "negative"] + DEEP, False),
    ("multi-head", "profile multi-head, no pins, argument and raising findings masked", "run",
     ["--profile", "multi-head", "--seed", "2", "--cases", "300", "--time", "120"],
     ["no-pin"] + ARGS + DEEP, False),
    ("pin-roll", "profile pins, argument and raising findings masked", "run",
     ["--profile", "pins", "--seed", "3", "--cases", "300", "--time", "120"], ARGS + DEEP, False),
]


def ops_of(trace):
    return [next(iter(op)) if isinstance(op, dict) else op for op in trace["ops"]]


def head_write(trace):
    return any(isinstance(op, dict) and "write" in op and "heads" in op["write"] for op in trace["ops"])


# id, docs/contract.md §8 class, what sglang does, and the test a finding (its
# signature: kind, variant, op, shape; its minimized trace) must pass.
CLASSES = [
    ("d01-window-drops-sink", "D1", "`W < C` with a sink: the dense view drops the sink",
     lambda s, t: (s["kind"], s["variant"], s["shape"]) == ("visible", "dense", "missing sink")),
    ("d02-gap-write", "D2", "a write past the global end is accepted",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err non_sequential → ok")),
    ("d03-rewrite-below-window-start", "D3", "a rewrite below sglang's window start raises (\"Invalid … write range\"), or lands on an evicted position",
     lambda s, t: s["kind"] == "outcome" and s["shape"] in ("ok → exception RuntimeError", "err evicted → ok")),
    ("d04-chunk-beside-sink", "D4", "a chunk that does not fit beside the sink overwrites it",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err chunk_too_large → ok")),
    ("d05-failing-write-mutates", "D5", "a failing write has already changed the cache",
     lambda s, t: (s["kind"], s["variant"], s["op"]) == ("probe", "dense", "write")),
    ("d06-chunk-larger-than-window", "D6", "a chunk larger than its window is cut out of its own view",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err window_too_small → ok")),
    ("d07-pin-lost", "D7", "a pin not aligned with the roll is lost",
     lambda s, t: s["kind"] == "visible" and s["shape"] in ("missing pin", "duplicated")),
    ("d08-head-range-roll", "D8", "a head-range write rolls only its heads",
     lambda s, t: s["kind"] in ("visible", "values") and s["variant"] == "dense" and head_write(t)
     and "reset" not in ops_of(t) and s["shape"] not in ("missing pin", "missing sink")),
    ("d09-packed-window", "D9", "the packed cache retains whole chunks",
     lambda s, t: (s["kind"], s["variant"]) == ("visible", "packed")),
    ("d10-packed-head-range", "D10", "a packed head-range write returns every head",
     lambda s, t: (s["kind"], s["variant"]) == ("shape", "packed") and "heads" in s["shape"]),
    ("d11-zero-length-gap-write", "D11", "a zero-length write past the global end advances it",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err non_sequential (zero length) → ok")),
    ("d12-negative-recent-window", "D12", "a negative recent window raises after mutating",
     lambda s, t: s["kind"] == "exception" and s["shape"] == "err negative_window → exception ValueError"),
    ("d13-head-range-end-past-last-head", "D13", "a head range reaching past the last head is accepted",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err head_range (end past the last head) → ok")),
    ("d14-reset-keeps-head-rows", "D14", "reset keeps the old stream's rows in heads a head-range write leaves out",
     lambda s, t: (s["kind"], s["variant"], s["shape"]) == ("values", "dense", "a write where zeros")
     and "reset" in ops_of(t) and head_write(t)),
    ("d15-zero-head-range", "D15", "a head range of zero heads is accepted",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err head_range (zero heads) → ok")),
    # Not rows of docs/contract.md §8.
    ("n1-head-range-negative-start", "N1", "a head range with a negative start is accepted",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err head_range (negative start) → ok")),
    ("n2-head-range-start-past-last-head", "N2", "a head range starting past the last head is accepted",
     lambda s, t: (s["kind"], s["shape"]) == ("outcome", "err head_range (start past the last head) → ok")),
    ("n3-pin-range-accepted", "N3", "a pin the contract refuses (no sink, or past the global end) is accepted",
     lambda s, t: (s["kind"], s["op"], s["shape"]) == ("outcome", "pin", "err pin_range → ok")),
]


def held_back(finding, masks):
    """Whether a finding is a mask's own refusal where the contract accepts
    (a masked request answered with the contract's kind for the finding it
    holds back): the mask's doing, not sglang's."""
    shape = finding["signature"]["shape"]
    return finding["signature"]["kind"] == "outcome" and shape.startswith("ok → err ") and bool(masks)


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


def effort(engine, report):
    """The engine's own count of its work, from its --json report."""
    if engine == "run":
        cases = sum(p["cases"] for p in report["profiles"])
        ops = sum(p["ops"] for p in report["profiles"])
        diverged = sum(p["divergences"] for p in report["profiles"])
        return ops, "%d cases, %d ops checked, %d of the cases diverged" % (cases, ops, diverged)
    transitions = sum(c["transitions"] for c in report["configs"])
    depth = min((c["depth_completed"] for c in report["configs"]), default=0)
    return transitions, "depth %d of %d completed, %d transitions checked" % (depth, report["depth"], transitions)


def classify(finding):
    """The class a finding belongs to (by its signature and minimized
    trace), or None."""
    path = finding.get("minimized_trace")
    if not path:
        return None
    with open(path) as f:
        trace = json.load(f)
    for sid, klass, title, test in CLASSES:
        if test(finding["signature"], trace):
            return sid, klass, title
    return None


def signature_text(s):
    return "%s on %s %s%s" % (s["kind"], s["variant"], s["op"], ": " + s["shape"] if s["shape"] else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvcheck", required=True)
    parser.add_argument("--python", required=True, help="the sglang venv's interpreter")
    parser.add_argument("--version", default=os.environ.get("SGLANG_VERSION", "0.5.23"))
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--only", action="append", default=[], help="run only these search ids")
    parser.add_argument("--max-tests", default="300", help="minimizer candidates per finding")
    parser.add_argument("--report", required=True, help="Markdown report to write")
    args = parser.parse_args(argv)
    os.makedirs(SAVED, exist_ok=True)
    if not args.only:
        # A full run saves afresh: no trace of an earlier run stays behind.
        for name in os.listdir(SAVED):
            if name.endswith(".kvtrace.json"):
                os.remove(os.path.join(SAVED, name))
    timeout = ["--subject-timeout", "120"]
    plain = subject(args.python, args.version, [])
    saved, searches, other = {}, [], []
    findings_path = os.path.join(SAVED, "findings.json")
    for sid, aim, engine, engine_args, masks, exact in SEARCHES:
        if args.only and sid not in args.only:
            continue
        out_dir = os.path.join(args.work, sid)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        engine_args = [os.path.join(CONFIGS, a) if a.endswith(".kvtrace.json") else a for a in engine_args]
        if engine == "explore":
            engine_args = engine_args + ["--time-limit", "240", "--no-sometimes"]
        json_path = os.path.join(out_dir, "report.json")
        cmd = (
            [engine] + engine_args + timeout
            + ["--keep-going", "--max-tests", args.max_tests, "--json", json_path, "--out", out_dir]
            + ["--subject", subject(args.python, args.version, masks)]
        )
        code, output, seconds = kvcheck(args.kvcheck, cmd, timeout=1800)
        shown = " ".join(shlex.quote(a) for a in ["kvcheck"] + cmd).replace(ROOT + "/", "")
        with open(os.path.join(out_dir, "output.txt"), "w") as f:
            f.write(output)
        if not os.path.exists(json_path):
            print("== %s: %s, exit %d, %.1f s: no report\n%s" % (sid, engine, code, seconds, output[-3000:]), flush=True)
            continue
        with open(json_path) as f:
            report = json.load(f)
        ops, work = effort(engine, report)
        findings = report.get("findings", [])
        at = output.find("distinct findings in")
        table = output[output.rfind("\n", 0, at) + 1:] if at >= 0 else ""
        table = table[: table.find("minimized traces:")] if "minimized traces:" in table else table
        searches.append((sid, aim, engine, shown, seconds, ops, work, len(findings), table))
        print("== %s: %s, %.1f s, %s, %d distinct findings" % (sid, engine, seconds, work, len(findings)), flush=True)
        for finding in findings:
            match = classify(finding)
            text = signature_text(finding["signature"])
            if match is None and held_back(finding, masks):
                print("   held back by a mask: %s (%d)" % (text, finding["count"]))
                continue
            if match is None:
                other.append((sid, engine, finding))
                print("   unclassified: %s (%d)" % (text, finding["count"]))
                continue
            cid, klass, title = match
            if cid in saved:
                continue
            minimized = os.path.join(SAVED, cid + ".kvtrace.json")
            shutil.copyfile(finding["minimized_trace"], minimized)
            if "probe-at-end" in masks:
                probes_at_end(minimized)
            exact_flag = ["--exact-kinds"] if exact else []
            rcode, rout, _ = kvcheck(args.kvcheck, ["replay", minimized] + timeout + exact_flag + ["--subject", plain])
            block = first_block(rout)
            step = re.search(r"divergence at step (\d+)", block or "")
            kind = re.search(r"──── kvcheck: (\w+) divergence", block or "")
            if rcode != 1 or block is None or kind is None:
                print("   %s (%s): unmasked replay AGREES, not saved" % (klass, text))
                os.remove(minimized)
                continue
            print("   %s: %s, %d in this search, minimized to %s ops" % (klass, text, finding["count"], finding["minimized_ops"]))
            with open(minimized) as f:
                trace = json.load(f)
            trace["note"] = "sglang %s %s (%s), found by kvcheck %s --keep-going (search %s); minimized; see docs/sglang.md" % (
                args.version, klass, cid, engine, sid)
            with open(minimized, "w") as f:
                json.dump(trace, f, indent=1)
                f.write("\n")
            entry = {
                "id": cid,
                "file": cid + ".kvtrace.json",
                "class": klass,
                "kind": kind.group(1),
                "step": int(step.group(1)),
                "exact_kinds": exact,
            }
            message = re.search(r"exception \w+: (.*)", block)
            if message:
                entry["message"] = message.group(1).strip()[:60]
            saved[cid] = (entry, klass, title, sid, engine, finding, block)
    entries = sorted((v[0] for v in saved.values()), key=lambda e: e["id"])
    if args.only and os.path.exists(findings_path):
        with open(findings_path) as f:
            kept = [e for e in json.load(f) if e["id"] not in saved]
        entries = sorted(kept + entries, key=lambda e: e["id"])
    with open(findings_path, "w") as f:
        json.dump(entries, f, indent=1)
        f.write("\n")
    write_report(args.report, searches, saved, other)
    found = sorted(v[1] for v in saved.values())
    missing = [c[1] for c in CLASSES if c[1] not in found]
    print("%d of %d classes found and saved under tests/external/sglang/%s; %d unclassified findings; report in %s" % (
        len(found), len(CLASSES), " (not found: %s)" % ", ".join(missing) if missing else "", len(other), args.report))
    return 0


def write_report(path, searches, saved, other):
    lines = ["## Searches", "", "| search | engine | aim | seconds | effort | distinct findings |", "|---|---|---|---|---|---|"]
    total_s, total_ops = 0.0, 0
    for sid, aim, engine, shown, seconds, ops, work, n, _ in searches:
        lines.append("| %s | `%s` | %s | %.1f | %s | %d |" % (sid, engine, aim, seconds, work, n))
        total_s += seconds
        total_ops += ops
    lines += ["", "Total: %.1f s, %d ops checked (transitions for explore)." % (total_s, total_ops), ""]
    lines += ["## Classes", "", "| class | divergence | search | engine | count | first case | minimized | kind at step |",
              "|---|---|---|---|---|---|---|---|"]
    for cid, klass, title, _ in CLASSES:
        if cid not in saved:
            lines.append("| %s | %s | not found | | | | | |" % (klass, title))
            continue
        entry, _, _, sid, engine, finding, _ = saved[cid]
        lines.append("| %s | %s | %s | `%s` | %d | %s | %s ops | %s at %d |" % (
            klass, title, sid, engine, finding["count"], finding["first"], finding["minimized_ops"], entry["kind"], entry["step"]))
    if other:
        lines += ["", "## Findings of no class", "", "| search | signature | count | first case | minimized |", "|---|---|---|---|---|"]
        for sid, engine, f in other:
            lines.append("| %s | %s | %d | %s | %s ops |" % (sid, signature_text(f["signature"]), f["count"], f["first"], f["minimized_ops"]))
    lines += ["", "## Commands and tables", ""]
    for sid, aim, engine, shown, seconds, ops, work, n, table in searches:
        lines += ["### %s" % sid, "", "```sh", shown, "```", "", "%.1f s, %s." % (seconds, work), "", "```text", table.rstrip(), "```", ""]
    lines += ["## Replays on plain sglang", ""]
    for cid, klass, title, _ in CLASSES:
        if cid in saved:
            lines += ["### %s — %s" % (klass, title), "", "```text", saved[cid][6], "```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines).replace(ROOT + "/", ""))


if __name__ == "__main__":
    sys.exit(main())
