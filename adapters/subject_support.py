"""What the library adapters of adapters/ share, beside `kvcheck.Subject`.

- `Background(load)`: runs `load()` (importing torch and a library takes
  seconds to a minute) in a background thread from start-up, so `hello` is
  answered at once and the first `open` waits only for what is left;
  `ready()` returns what `load` returned, or raises what it raised.
- `add_mask_option(parser, masks)`: the repeatable `--mask NAME` option of
  an adapter whose `masks` map a name to `(what it holds back, kind, test)`.
- `Checkout(...)`: where an adapter finds a library that is a source
  checkout, not a registry release (setup.sh's marker, or `$<NAME>_SRC`).
"""

import os
import threading


class Background:
    """`load()` running in a daemon thread; `ready()` waits for its result."""

    def __init__(self, load):
        self._load = load
        self._result = None
        self._error = None
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            self._result = self._load()
        except Exception as error:  # raised again by ready(), on the first open
            self._error = error
        finally:
            self._done.set()

    def ready(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


def add_mask_option(parser, masks):
    """Adds `--mask NAME` (repeatable, choices `masks`, help from their descriptions)."""
    parser.add_argument(
        "--mask",
        action="append",
        default=[],
        choices=sorted(masks),
        help="hold back requests of a known difference (repeatable): %s"
        % "; ".join("%s: %s" % (name, masks[name][0]) for name in sorted(masks)),
    )


class Checkout:
    """A library an adapter loads from a source checkout rather than the
    package registry. Its `setup.sh` copies the checkout into the venv and
    writes the marker `$VENV/<marker>` (`key: value` lines: `src`, the
    copy; `commit`; a patch; the installed versions); `$<env>` names
    another tree instead. `required` is a file every usable tree holds."""

    def __init__(self, adapter, marker, env, required, project):
        self.adapter, self.marker_name, self.env = adapter, marker, env
        self.required, self.project = required, project

    def marker_path(self, venv=None):
        venv = venv or os.environ.get("VENV") or os.path.join(self.adapter, ".venv")
        return os.path.join(venv, self.marker_name)

    def is_ready(self, venv=None):
        """Whether setup.sh has completed for the venv (its marker exists)."""
        return os.path.isfile(self.marker_path(venv))

    def marker(self, venv=None):
        """The marker's `key: value` lines as a dict."""
        fields = {}
        with open(self.marker_path(venv)) as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition(": ")
                if value:
                    fields[key] = value
        return fields

    def source_dir(self):
        """The tree to load: `$<env>`, else the copy setup.sh prepared."""
        src = os.environ.get(self.env)
        if not src and self.is_ready():
            src = self.marker().get("src")
        if not src or not os.path.isfile(os.path.join(src, self.required)):
            raise RuntimeError(
                "no %s checkout: run adapters/%s/setup.sh with %s=checkout"
                % (self.project, os.path.basename(self.adapter), self.env)
            )
        return os.path.abspath(src)

