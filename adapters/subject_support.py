"""What the library adapters of adapters/ share, beside `kvcheck.Subject`.

- `Background(load)`: runs `load()` (importing torch and a library takes
  seconds to a minute) in a background thread from start-up, so `hello` is
  answered at once and the first `open` waits only for what is left;
  `ready()` returns what `load` returned, or raises what it raised.
- `add_mask_option(parser, masks)`: the repeatable `--mask NAME` option of
  an adapter whose `masks` map a name to `(what it holds back, kind, test)`.
- `Checkout(...)`: where an adapter finds a library that is a source
  checkout, not a registry release (setup.sh's marker, or `$<NAME>_SRC`).
- `Conversation`, `FRONT_DOOR_DOMAIN`, `front_door_config`: what a subject
  of a library's entry point (a server, `generate()`) shares: the prompt
  each op makes of a conversation, the requests a client sends, the
  configs that describe attending every token.
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



# What a client of an entry point sends: follow-ups, edits of any earlier
# turn, regenerates and new conversations; never a gap, never an empty
# prompt (a probe of an empty conversation), never a cut past the
# conversation's end.
FRONT_DOOR_DOMAIN = {"gaps": False, "oversized": True, "malformed": False, "probes": "after_append", "rewinds": "held"}


def front_door_config(config, what):
    """Raises `kvcheck.Outside` unless `config` keeps every position visible
    (growth, no window below the capacity): `what` attends every token of
    a prompt."""
    import kvcheck

    if not config.get("growth") or (config.get("window") or config["capacity"]) < config["capacity"]:
        raise kvcheck.Outside(
            "%s attends every token of a prompt: only configs with growth and no window below the "
            "capacity describe it (kvcheck run --profile growth)" % what
        )


class Conversation:
    """The tokens of one conversation with an entry point, as kvcheck's ops
    edit it: a write is the next prompt (`prompt`), a rewind cuts it, a reset
    starts another. Tokens are 1 .. `content`, a function of position and
    writer, so an edited turn differs from the one it replaces."""

    def __init__(self, content):
        self.content = content
        self.tokens, self.writer, self.reply = [], 0, None

    def token(self, position, writer):
        return 1 + (position * 7 + writer * 13 + (position * writer) % 5) % self.content

    def prompt(self, start, length, heads, recent_window, follow=True):
        """The prompt of write `start+length`: the first `start` tokens,
        `length` new ones, then the rest as it was. An append begins with the
        entry point's last answer when `follow` (a client continuing the
        conversation sends it back). Raises `kvcheck.Outside` for what no
        client sends."""
        import kvcheck

        if heads is not None or recent_window is not None:
            raise kvcheck.Outside("a request carries every head and no per-request window")
        if start < 0 or length < 0:
            raise kvcheck.Outside("write %d+%d: no request has a negative start or length" % (start, length))
        if start > len(self.tokens):
            raise kvcheck.Outside("a gap: no request leaves positions %d..%d unwritten" % (len(self.tokens), start))
        self.writer += 1
        new = [self.token(p, self.writer) for p in range(start, start + length)]
        if follow and self.reply is not None and self.reply[0] == start == len(self.tokens):
            answer = self.reply[1][:length]
            new[: len(answer)] = answer
        tokens = self.tokens[:start] + new + self.tokens[start + length:]
        if not tokens:
            raise kvcheck.Outside("an empty prompt: no request carries one")
        return tokens

    def answered(self, tokens, generated):
        """`tokens` was sent and answered with `generated`."""
        self.tokens, self.reply = tokens, (len(tokens), generated)

    def rewind(self, to):
        import kvcheck

        if to < 0 or to > len(self.tokens):
            raise kvcheck.Outside("rewind to %d: a conversation of %d tokens has no such prefix" % (to, len(self.tokens)))
        self.tokens = self.tokens[:to]

    def reset(self):
        self.tokens, self.reply = [], None
