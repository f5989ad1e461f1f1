"""What the library adapters of adapters/ share, beside `kvcheck.Subject`.

- `Background(load)`: runs `load()` (importing torch and a library takes
  seconds to a minute) in a background thread from start-up, so `hello` is
  answered at once and the first `open` waits only for what is left;
  `ready()` returns what `load` returned, or raises what it raised.
- `add_mask_option(parser, masks)`: the repeatable `--mask NAME` option of
  an adapter whose `masks` map a name to `(what it holds back, kind, test)`.
"""

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
