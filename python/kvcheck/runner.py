"""`kvcheck.check(MyCache)`: run the `kvcheck` binary against a Subject class.

The class is served in a subprocess (`python -m kvcheck.serve module:Class`,
with this interpreter and this process's import path), `kvcheck run` drives
it, and the result comes back as a `Result` (checked ops, seconds) or, on a
divergence, as a `Divergence` exception (an AssertionError, so a test fails
with it) carrying kvcheck's report, the saved minimized trace and the
command that replays it.
"""

import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ENV_BINARY = "KVCHECK_BIN"
# Set by the pytest plugin: --kvcheck-time, and where passing results go.
TIME_OVERRIDE = None
RESULTS = None


class Divergence(AssertionError):
    """The cache disagreed with the oracle. `report` is kvcheck's text,
    `trace` the saved minimized trace, `replay` the command that replays it."""

    def __init__(self, report, trace, replay):
        message = report.rstrip()
        if trace:
            message += "\n\nminimized trace: %s\nreplay it:       %s" % (trace, replay)
        super().__init__(message)
        self.report = report
        self.trace = trace
        self.replay = replay


class TooFewJudged(AssertionError):
    """No divergence, but kvcheck judged fewer ops than its floor
    (`min_judged`) because the subject answered `kvcheck.Outside` to most
    requests: a subject that is outside everywhere cannot pass. `output`
    is kvcheck's output, `outside_share` the share of drawn ops outside
    the subject's domain (None when kvcheck printed none)."""

    def __init__(self, output):
        line = next((l for l in output.splitlines() if "--min-judged" in l), "fewer ops judged than --min-judged")
        super().__init__(line.strip())
        self.output = output
        self.outside_share = outside_share(output)


class Result:
    """A passing run: how many ops were checked, in how many seconds.

    `outside_share`: the share of drawn ops that lay outside the subject's
    domain (0.0 when no case was cut there); `warnings`: kvcheck's
    `warning:` lines (a share over its threshold names the declaration
    that would keep the draws inside)."""

    def __init__(self, ops, seconds, subject, output):
        self.ops = ops
        self.seconds = seconds
        self.subject = subject
        self.output = output
        share = outside_share(output)
        self.outside_share = 0.0 if share is None else share
        self.warnings = warnings(output)

    def __repr__(self):
        return "Result(ops=%d, seconds=%.1f, outside_share=%.3f)" % (self.ops, self.seconds, self.outside_share)

    def summary(self):
        text = "%s ops checked in %.1f s, no divergence (%s)" % (format(self.ops, ","), self.seconds, self.subject)
        if self.outside_share:
            text += "; %.1f%% of the drawn ops outside its domain" % (100 * self.outside_share)
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


def serve_command(subject, args=()):
    """The command line that serves `subject` (a Subject subclass)."""
    module = subject.__module__
    if module == "__main__":
        target = "%s:%s" % (inspect.getsourcefile(subject), subject.__qualname__)
    else:
        target = "%s:%s" % (module, subject.__qualname__)
    return [sys.executable, "-m", "kvcheck.serve", target] + list(args)


def check(subject, time=20, oracle="model", profile=None, seed=None, args=(), out="kvcheck-failures", extra=(),
          strict_domain=False, min_judged=None):
    """Checks `subject` (a kvcheck.Subject subclass) for `time` seconds.

    `profile`: a profile name or a list of them (`kvcheck run --list`;
    "pipeline" draws a video pipeline's chunk loop); `seed`: the op
    generator's seed (default: kvcheck picks one and prints it); `args`:
    arguments for the class's `from_args`; `oracle`: what the subject is
    compared with ("model", the contract's reference model; other values
    go to `kvcheck run --oracle`); `out`: where divergence traces are
    saved; `strict_domain`: every `kvcheck.Outside` answer is a divergence
    (`--strict-domain`); `min_judged`: the fewest ops that must be judged
    when the subject answered outside (`--min-judged`, kvcheck's default
    when None); `extra`: more `kvcheck run` arguments.
    Returns a Result; raises Divergence when the subject diverges and
    TooFewJudged when it answered outside to so much that fewer than
    `min_judged` ops were judged.
    """
    __tracebackhide__ = True  # pytest shows the report, not this function
    if TIME_OVERRIDE is not None:
        time = TIME_OVERRIDE
    served = " ".join(shlex.quote(part) for part in serve_command(subject, args))
    spec = "exec:" + served
    command = [binary(), "run", "--subject", spec, "--time", str(time), "--out", str(out)]
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
    done = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env
    )
    output = done.stdout
    if done.returncode == 0:
        ops, seconds = checked(output)
        result = Result(ops, seconds, subject.__qualname__, output)
        print("kvcheck: " + result.summary())
        if RESULTS is not None:
            RESULTS.append(result)
        return result
    if done.returncode == 1 and first_trace(output) is None and "--min-judged" in output:
        raise TooFewJudged(output)
    if done.returncode == 1:
        trace = first_trace(output)
        text = report(output)
        if trace is not None:
            trace = os.path.abspath(trace)
            # The minimized trace's own report (run prints the first, unminimized one).
            with tempfile.TemporaryDirectory() as scratch:
                replayed = subprocess.run(
                    [command[0], "replay", trace, "--subject", spec] + replay_options(command),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    universal_newlines=True,
                    env=env,
                    cwd=scratch,
                ).stdout
            text = report(replayed) or text
        replay = " ".join(shlex.quote(p) for p in ["kvcheck", "replay", trace or "TRACE", "--subject", spec])
        raise Divergence(text or output, trace, replay)
    raise RuntimeError("kvcheck run failed (exit status %d):\n%s" % (done.returncode, output))


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


def checked(output):
    """(ops, seconds) from `kvcheck run`'s "N ops checked in T s" line."""
    match = re.search(r"^([\d,]+) ops checked in ([\d.]+) s", output, re.M)
    if match is None:
        raise RuntimeError("kvcheck run printed no op count:\n" + output)
    return int(match.group(1).replace(",", "")), float(match.group(2))


def outside_share(output):
    """The share of drawn ops outside the subject's domain that `kvcheck
    run` printed (its `outside ...: ... (12.3%) ...` line after the
    totals), or None."""
    for line in reversed(output.splitlines()):
        if line.lstrip().lower().startswith("outside"):
            match = re.search(r"([\d.]+)\s*%", line)
            if match:
                return float(match.group(1)) / 100
    return None


def warnings(output):
    """`kvcheck run`'s `warning:` lines, without the prefix."""
    return [line.strip()[len("warning:"):].strip() for line in output.splitlines() if line.strip().startswith("warning:")]


def first_trace(output):
    """The first trace `kvcheck run` lists after a divergence: the minimized one."""
    match = re.search(r"divergences?; traces:\n\s+(\S+)", output)
    return match.group(1) if match else None


def report(output):
    """kvcheck's framed divergence report in `output` (without its own
    trace and reproduce lines, which name other paths), or ""."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("──── kvcheck:")), None)
    if start is None:
        return ""
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = []
    for line in lines[start:]:
        line = line[indent:].rstrip()
        if not line or line.startswith("trace:"):
            break
        block.append(line)
    return "\n".join(block)
