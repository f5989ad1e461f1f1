#!/usr/bin/env python3
"""The table of a front-door campaign, from the JSON reports of its runs.

    python3 scripts/campaign_table.py OUT

OUT holds one folder per run (its `report.json`, as `kvcheck run --json`
writes it). Prints, and writes to OUT/table.md, one markdown row per run:
cases, ops, requests (the writes the subject served), the share of drawn
ops outside the subject's domain, the seconds of search, and each distinct
finding with its count of divergences and its minimized length.
"""

import json
import os
import sys


def rows(out):
    lines = ["| row | cases | ops | requests | outside | search s | findings × divergences (minimized ops) |",
             "|---|---|---|---|---|---|---|"]
    for label in sorted(os.listdir(out)):
        path = os.path.join(out, label, "report.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            report = json.load(f)
        profiles = report["profiles"]
        found = "; ".join(
            # A finding whose rerun did not diverge again is not minimized.
            "%s × %d (%s)" % (f["signature"]["shape"], f["count"],
                              "not minimized" if f["minimized_ops"] is None else f["minimized_ops"])
            for f in report.get("findings", [])
        )
        drawn = sum(p["domain"]["drawn"] for p in profiles)
        outside = 100.0 * sum(p["domain"]["outside"] for p in profiles) / max(drawn, 1)
        lines.append("| %s | %d | %d | %d | %.1f %% | %.0f | %s |" % (
            label, sum(p["cases"] for p in profiles), sum(p["ops"] for p in profiles),
            sum(p["domain"]["served"] for p in profiles), outside, report["elapsed_s"], found or "none"))
    return lines


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: campaign_table.py OUT (a folder of runs, each with its report.json)", file=sys.stderr)
        return 2
    lines = rows(argv[0])
    with open(os.path.join(argv[0], "table.md"), "w") as table:
        table.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
