"""`kvcheck.check(MyCache)`: run the `kvcheck` binary against a Subject class.

The class is served in a subprocess (`python -m kvcheck.serve module:Class`,
with this interpreter and this process's import path), `kvcheck run` drives
it and writes its report as JSON (`--json`), and the result comes back, read
from that report, as a `Result` (checked ops, seconds) or, on a divergence,
as a `Divergence` exception (an AssertionError, so a test fails with it)
carrying kvcheck's report, the saved minimized trace and the command that
replays it. Nothing is read from what kvcheck prints, so a reworded
message cannot break a test.
"""

import importlib.machinery
import inspect
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings

ENV_BINARY = "KVCHECK_BIN"
# Set by the pytest plugin: --kvcheck-time, and where passing results go.
TIME_OVERRIDE = None
RESULTS = None
# Whether the missing plugin was already pointed out (once per process).
PLUGIN_HINTED = False


class Divergence(AssertionError):
    """The cache disagreed with the oracle. `report` is kvcheck's text,
    `trace` the saved minimized trace, `replay` the command that replays it."""

    def __init__(self, report, trace, replay):
        message = report.rstrip()
        if trace and trace not in message:
            message += "\n\ntrace:    %s\nreproduce: %s" % (trace, replay)
        super().__init__(message)
        self.report = report
        self.trace = trace
        self.replay = replay


class TooFewJudged(AssertionError):
    """No divergence, but the subject served fewer judged ops with state
    (appends and rewrites the contract accepts) than kvcheck's floor
    (`min_judged`) because it answered `kvcheck.Outside` to most writes: a
    subject that is outside everywhere cannot pass on the refusals, reads
    and resets it still answers. `output` is kvcheck's output,
    `outside_share` the share of drawn ops outside the subject's domain,
    `judged` the ops judged, `served` those served with state and
    `min_judged` the floor."""

    def __init__(self, judged, min_judged, outside_share, output="", served=0):
        super().__init__(
            "kvcheck judged %d ops, of which %d were served with state (appends and rewrites), fewer than "
            "--min-judged %d: %.1f%% of the drawn ops were outside the subject's domain"
            % (judged, served, min_judged, 100 * outside_share)
        )
        self.judged = judged
        self.served = served
        self.min_judged = min_judged
        self.outside_share = outside_share
        self.output = output


class MostlyOutside(AssertionError):
    """No divergence, but more of the drawn ops than `max_outside` lay
    outside the subject's domain: the run judged too little of what it
    drew to pass. `outside_share` is the share, `max_outside` the limit,
    `warnings` kvcheck's warnings (they name the declarations that would
    keep the draws inside), `output` what kvcheck printed."""

    def __init__(self, outside_share, max_outside, warnings=(), output=""):
        message = "%.1f%% of the drawn ops were outside the subject's domain, more than max_outside %.0f%%" % (
            100 * outside_share, 100 * max_outside)
        for warning in warnings:
            message += "\nwarning: " + warning
        super().__init__(message)
        self.outside_share = outside_share
        self.max_outside = max_outside
        self.warnings = list(warnings)
        self.output = output


class Result:
    """A passing run: how many ops were checked, in how many seconds.

    `outside_share`: the share of drawn ops that lay outside the subject's
    domain (0.0 when no case was cut there); `warnings`: kvcheck's
    warnings (a share over its threshold names the declaration that would
    keep the draws inside); `output`: what kvcheck printed; `op_counts`:
    the judged ops by kind (OP_KINDS: appends, rewrites, probes, gaps,
    rewinds, evicts, pins, resets, oversized chunks, refusals), so that a
    test can see its cache's ops were exercised."""

    def __init__(self, ops, seconds, subject, output="", outside_share=0.0, warnings=(), op_counts=None):
        self.ops = ops
        self.seconds = seconds
        self.subject = subject
        self.output = output
        self.outside_share = outside_share
        self.warnings = list(warnings)
        self.op_counts = dict(op_counts or {})

    def __repr__(self):
        return "Result(ops=%d, seconds=%.1f, outside_share=%.3f)" % (self.ops, self.seconds, self.outside_share)

    def summary(self):
        text = "%s ops checked in %.1f s, no divergence (%s)" % (format(self.ops, ","), self.seconds, self.subject)
        if self.outside_share:
            text += "; %.1f%% of the drawn ops outside its domain" % (100 * self.outside_share)
        if self.op_counts:
            text += "\nops judged: " + ", ".join("%d %s" % (self.op_counts.get(name, 0), name) for _, name in OP_KINDS)
        return text


def binary():
    """The `kvcheck` binary: $KVCHECK_BIN, else the one installed next to
    this interpreter (the wheel's), else the first on PATH."""
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        return explicit
    name = "kvcheck.exe" if os.name == "nt" else "kvcheck"
    beside = os.path.join(sysconfig.get_path("scripts"), name)
    if os.path.isfile(beside):
        return beside
    found = shutil.which("kvcheck")
    if found is None:
        raise FileNotFoundError(
            "no kvcheck binary: pip install kvcheck, or set %s to its path" % ENV_BINARY
        )
    return found


def _importable(name):
    """Whether sys.path imports the loaded module `name` as this process
    has it (not so for a file loaded by path, kvcheck.adapter.load_file's)."""
    path = getattr(sys.modules.get(name), "__file__", None)
    if path is None:
        return True
    try:
        found = importlib.machinery.PathFinder.find_spec(name.partition(".")[0])
    except (ImportError, ValueError):
        found = None
    if found is None or "." in name:
        return found is not None
    origin = found.origin
    return origin is not None and os.path.exists(origin) and os.path.samefile(origin, path)


def serve_command(subject, args=()):
    """The command line that serves `subject` (a Subject subclass): by its
    module's name where sys.path imports that module, else by its file (a
    script's `__main__`, a file loaded by path)."""
    module = subject.__module__
    if module == "__main__" or not _importable(module):
        target = "%s:%s" % (inspect.getsourcefile(subject), subject.__qualname__)
    else:
        target = "%s:%s" % (module, subject.__qualname__)
    return [sys.executable, "-m", "kvcheck.serve", target] + list(args)


def check(subject, time=20, oracle="model", profile=None, seed=None, args=(), out="kvcheck-failures", extra=(),
          strict_domain=False, min_judged=None, max_outside=0.5):
    """Checks `subject` (a kvcheck.Subject subclass) for `time` seconds.

    `profile`: a profile name or a list of them (`kvcheck run --list`;
    "pipeline" draws a video pipeline's chunk loop); `seed`: the op
    generator's seed (default: kvcheck picks one and prints it); `args`:
    arguments for the class's `from_args`; `oracle`: what the subject is
    compared with ("model", the contract's reference model; other values
    go to `kvcheck run --oracle`); `out`: where divergence traces are
    saved; `strict_domain`: every `kvcheck.Outside` answer is a divergence
    (`--strict-domain`); `min_judged`: the fewest ops that must be judged
    when the subject answered outside, counting only the writes it served
    with state (`--min-judged`, kvcheck's default when None);
    `max_outside`: the largest share of drawn ops that may lie outside the
    subject's domain (0.5; 1.0 turns it off); `extra`: more `kvcheck run`
    arguments.
    The binary run is $KVCHECK_BIN when set (a checkout without the
    wheel: `cargo build --release -p kvcheck`, then KVCHECK_BIN naming
    target/release/kvcheck and PYTHONPATH the checkout's python/), else the
    wheel's. Reports write visible positions as half-open ranges:
    `visible 0..2 6..12` is positions 0, 1 and 6 to 11.
    Returns a Result; raises Divergence when the subject diverges,
    TooFewJudged when it answered outside to so much that fewer than
    `min_judged` writes were served, and MostlyOutside when more than
    `max_outside` of the drawn ops lay outside its domain.
    """
    __tracebackhide__ = True  # pytest shows the report, not this function
    if TIME_OVERRIDE is not None:
        time = TIME_OVERRIDE
    served = " ".join(shlex.quote(part) for part in serve_command(subject, args))
    spec = "exec:" + served
    # An absolute folder, so that the trace paths and the replay command in
    # the report work from any directory.
    command = [binary(), "run", "--subject", spec, "--time", str(time), "--out", os.path.abspath(str(out))]
    if seed is not None:
        command += ["--seed", str(seed)]
    if oracle != "model":
        command += ["--oracle", str(oracle)]
    for name in [profile] if isinstance(profile, str) else (profile or []):
        command += ["--profile", name]
    if strict_domain:
        command += ["--strict-domain"]
    if min_judged is not None:
        command += ["--min-judged", str(min_judged)]
    command += list(extra)
    env = dict(os.environ)
    env.pop("RUST_BACKTRACE", None)  # candle errors are 25x slower with it
    # The served class is imported as this process imports it.
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    with tempfile.TemporaryDirectory() as scratch:
        report_path = json_option(extra)
        if report_path is None:
            report_path = os.path.join(scratch, "report.json")
            command += ["--json", report_path]
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env
        )
        report = load_report(report_path)
    output = done.stdout
    if report is None or done.returncode not in (0, 1):
        raise RuntimeError("kvcheck run failed (exit status %d):\n%s" % (done.returncode, output))
    ops, seconds, share = totals(report)
    if done.returncode == 0 and share > max_outside:
        raise MostlyOutside(share, max_outside, report.get("warnings", ()), output)
    if done.returncode == 0:
        result = Result(ops, seconds, subject.__qualname__, output, share, report.get("warnings", ()), op_counts(report))
        print("kvcheck: " + result.summary())
        if RESULTS is not None:
            RESULTS.append(result)
        else:
            hint_plugin()
        return result
    found = report.get("divergence")
    if found is None and report.get("findings"):
        found = finding_divergence(report["findings"])
    if found is not None:
        trace = found.get("trace")
        replay = found.get("reproduce") or " ".join(
            shlex.quote(p) for p in ["kvcheck", "replay", trace or "TRACE", "--subject", spec]
        )
        options = replay_options(command)
        if options:
            replay += " " + " ".join(shlex.quote(o) for o in options)
        raise Divergence(found.get("report") or found.get("summary", ""), trace, replay)
    served = sum(p.get("domain", {}).get("served", 0) for p in report.get("profiles", []))
    if served < report.get("min_judged", 0):
        raise TooFewJudged(ops, report["min_judged"], share, output, served)
    raise RuntimeError("kvcheck run failed (exit status %d):\n%s" % (done.returncode, output))


def hint_plugin():
    """Under pytest without the plugin (a checkout on PYTHONPATH has no
    entry point that loads it), says once, as a warning pytest lists, how
    to get its summary of checked ops."""
    global PLUGIN_HINTED
    if PLUGIN_HINTED or "PYTEST_CURRENT_TEST" not in os.environ:
        return
    PLUGIN_HINTED = True
    warnings.warn(
        "kvcheck's pytest plugin is not loaded, so the summary of checked ops is not shown: "
        "run pytest with -p kvcheck.pytest_plugin (the installed wheel loads it by itself)",
        stacklevel=3,
    )


def json_option(extra):
    """The report file that `extra` names with `--json`, or None."""
    extra = list(extra)
    for i, arg in enumerate(extra):
        if arg == "--json" and i + 1 < len(extra):
            return extra[i + 1]
        if arg.startswith("--json="):
            return arg[len("--json="):]
    return None


def load_report(path):
    """The `kvcheck run --json` report at `path` (a dict), or None when
    kvcheck wrote none (it stopped before running: bad arguments)."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("kind") == "run" else None


# The kinds of judged op a run counts (the `op:KIND` labels of a profile's
# coverage in the report) and their names, in report order.
OP_KINDS = (
    ("op:append", "appends"),
    ("op:rewrite", "rewrites"),
    ("op:probe", "probes"),
    ("op:gap", "gaps"),
    ("op:rewind", "rewinds"),
    ("op:evict", "evicts"),
    ("op:pin", "pins"),
    ("op:reset", "resets"),
    ("op:oversized", "oversized chunks"),
    ("op:refused", "refusals"),
)


def op_counts(report):
    """The judged ops of a run report by kind: {name: count} over OP_KINDS."""
    profiles = report.get("profiles", [])
    return {name: sum(p.get("coverage", {}).get(label, 0) for p in profiles) for label, name in OP_KINDS}


def totals(report):
    """(ops judged, seconds, share of drawn ops outside the subject's
    domain) of a run report."""
    profiles = report.get("profiles", [])
    ops = sum(p.get("ops", 0) for p in profiles)
    drawn = sum(p.get("domain", {}).get("drawn", 0) for p in profiles)
    outside = sum(p.get("domain", {}).get("outside", 0) for p in profiles)
    return ops, float(report.get("elapsed_s", 0.0)), (outside / drawn if drawn else 0.0)


def finding_divergence(findings):
    """A triage run's (`extra=["--keep-going"]`) findings as the fields of
    one divergence: every finding's summary, the first one's trace."""
    first = findings[0]
    lines = ["kvcheck: %d distinct findings" % len(findings)]
    for f in findings:
        lines.append("  %s (%d times; %s)" % (f.get("summary", ""), f.get("count", 0),
                                             f.get("minimized_trace") or f.get("trace") or "not saved"))
    return {"report": "\n".join(lines), "trace": first.get("minimized_trace") or first.get("trace")}


def replay_options(command):
    """The options of a `kvcheck run` command line that decide how its
    subject is asked, for the replay of its trace: a replay under a
    shorter timeout than the run's would report the subject's slowness
    instead of the divergence."""
    options, args = [], list(command)
    for i, arg in enumerate(args):
        if arg == "--subject-timeout" and i + 1 < len(args):
            options += [arg, args[i + 1]]
        elif arg.startswith("--subject-timeout=") or arg in ("--exact-kinds", "--strict-domain"):
            options.append(arg)
    return options
