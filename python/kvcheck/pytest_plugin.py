"""The pytest plugin of kvcheck.

pytest loads it through the wheel's `pytest11` entry point wherever the
wheel is installed. A checkout's `python/` on PYTHONPATH has no entry
points: load it there with `pytest -p kvcheck.pytest_plugin` (or
`PYTEST_PLUGINS=kvcheck.pytest_plugin`, or `pytest_plugins =
["kvcheck.pytest_plugin"]` in a conftest.py). The entry point carries the
module's name, so both at once register it once.

`kvcheck.check(MyCache, ...)` works in any test; the plugin adds:

- the `kvcheck` fixture: `kvcheck(MyCache, time=5)` is `kvcheck.check` whose
  result is also listed in pytest's summary;
- a summary section listing the checked-op count of every passing check;
- the `--kvcheck-time SECONDS` option, which overrides the `time` of every
  check (e.g. a longer campaign in a nightly job).
"""

import pytest

from . import runner

RESULTS = []


def pytest_addoption(parser):
    group = parser.getgroup("kvcheck")
    group.addoption(
        "--kvcheck-time",
        type=float,
        default=None,
        help="seconds each kvcheck.check runs, overriding its `time` argument",
    )


def pytest_configure(config):
    runner.TIME_OVERRIDE = config.getoption("--kvcheck-time", default=None)
    runner.RESULTS = RESULTS


@pytest.fixture
def kvcheck():
    """`kvcheck.check`, as a fixture."""
    return runner.check


def pytest_terminal_summary(terminalreporter):
    if RESULTS:
        terminalreporter.write_sep("-", "kvcheck")
        for result in RESULTS:
            terminalreporter.write_line(result.summary())
