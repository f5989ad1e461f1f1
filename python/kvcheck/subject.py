"""`kvcheck.Subject`: a cache as a kvcheck-subject/1 process, in a few methods.

A subclass declares what it can express as class attributes and implements
the cache's operations; this module owns the protocol (docs/subject-protocol.md):
the handshake, base64, the dtype and layout of payloads, the response shapes,
flushing, and a clean exit at end of input.

    import kvcheck

    class MyCache(kvcheck.Subject):
        variants = ("dense",)
        dtypes = ("f32",)

        def open(self, config):            # a fresh cache for this config
            ...
        def write(self, start, length, heads, recent_window, k, v):
            ...                            # refuse: raise kvcheck.Refused("non_sequential", "...")
            return visible, k_view, v_view
        def reset(self):
            ...

Serve it with `python -m kvcheck.serve mymodule:MyCache`; check it with
`kvcheck run --subject exec:'python -m kvcheck.serve mymodule:MyCache'` or
`kvcheck.check(MyCache)` in a test.

The subclass API (stable):

- Class attributes (an instance may override them in `__init__`):
  `name` (for reports; default the class name), `variants` ("dense",
  "packed"), `dtypes` ("f32", "f16", "bf16"), `features` (any of
  `FEATURES`; default none), `values` (whether `write`/`view` return K/V;
  default True), `arrays` ("numpy" default, "torch" or "bytes": what `k`
  and `v` arrive as), `layout` ("bnhd" default, or "bhnd": the axis order
  of the arrays both ways), `ops` (None, or a subset of the implemented ops
  to declare), `reports` (() default, or any of "capacity",
  "resident_bytes": attributes read after every successful op and sent for
  kvcheck to compare with the model's, docs/contract.md §3 step 7, §6, §7),
  `domain` (None default: every request the contract allows may come; or
  a dict naming the requests the cache is ever asked in real use, each
  field optional: `rewrites` "any" | "latest" | "none", `chunks` "any" |
  {"lengths": [n, ...]} | {"multiple": n}, `probes` "any" |
  "after_append" | "none", `gaps`, `oversized`, `malformed` (booleans),
  `evict` and `pin` "any" | "scene_cut" | "held", `rewinds` "any" |
  "held", `configs` a dict of CONFIG_LIMITS (`min_room`, `min_window`:
  the least C - S and W - S; `batch`, `heads`, `head_dim`: the values it
  opens; `max_sink`: the most sink tokens, 0 for a cache without sinks;
  `growth`: true for a cache that only grows, false for one that never
  does), `after_read` a whole domain of its own for the cache's
  `after_read` configurations where it differs (a cache with both trim
  modes, refusing long chunks before the read and reading them after);
  revision 3, DOMAIN_FIELDS and docs/subject-protocol.md say what
  each admits). kvcheck then draws
  only inside it. `trims` (("before_read",) default: the trim modes the
  cache opens, any of `TRIMS`, docs/contract.md §3 "Trim modes"): a cache
  that reads a chunk beside the whole old view and trims to its capacity
  only afterwards (StreamingLLM, Hugging Face `SinkCache`) declares
  `trims = ("after_read",)`, or both modes if it implements both;
  revision 4, sent only when it is not the default.
- `global_end`: an attribute or property, read after every successful op.
- `open(config)`: required. `config` is the kvtrace/1 config dict with every
  field filled in (`"trim"` included: "before_read" unless the harness sent
  another mode). Called for every case; it must discard any previous cache.
- `write(start, length, heads, recent_window, k, v)`: required. `heads` is
  None (all heads) or the pair `(first, count)` as the op names it;
  `recent_window` is None or an int. `k` and `v` hold
  `[batch, length, count or heads, head_dim]` in the config dtype (bf16 as
  uint16 bit patterns with numpy), or None when no tensor of that shape
  came: a negative dimension, or a write the contract refuses that is too
  large to send (a bytes subject gets the bytes as sent). Check the
  arguments before the payload, as docs/contract.md §7 says. Returns `(visible, k, v)`:
  the view's positions in the order the returned K/V hold them, and K/V of
  shape `[batch, len(visible), heads written, head_dim]` (numpy array,
  torch tensor or bytes; float arrays are converted to the config dtype).
  Without `values` return just the positions (or `(visible, None, None)`).
- `rewind(to)`, `evict(tokens)`, `pin(tokens)`, `reset()`: optional, return
  nothing; `view()`: optional, returns `(visible, k, v)` of the whole view
  (no recent window, every head). An operation a subclass does not define
  is left out of the capabilities, so kvcheck never asks for it.
- `from_args(argv)`: classmethod building the instance from the arguments
  after `module:Class` on the `kvcheck.serve` command line (default: none
  allowed).
- Raise `Refused(kind, message)` for a docs/contract.md §3 refusal; any other
  exception is answered as the protocol's `exception` (most real caches
  raise ValueError and the like). Raise `AdapterError` when the adapter
  itself cannot turn a request into a call of the cache: kvcheck reports it
  as the adapter's failure and never as agreement with a refusal. Raise
  `Outside(reason)` (from `open`, an op or `view`) for a request the cache
  is never asked in real use: kvcheck judges the case up to there and
  cuts it (revision 3; an older kvcheck gets an exception of type
  "Outside"). Inside a declared `domain` it is a divergence.
"""

import base64
import json
import sys

from . import _arrays

PROTOCOL = "kvcheck-subject/1"
# Revision 2 of kvcheck-subject/1 adds `reports` (capacity, resident_bytes)
# and `adapter` exceptions; revision 3 the `outside` answer and the `domain`
# capability; revision 4 the `trims` capability. A harness says which
# revision it speaks in hello.
REVISION = 4

ERROR_KINDS = (
    "invalid_argument",
    "negative_window",
    "head_range",
    "unsupported",
    "non_sequential",
    "evicted",
    "chunk_too_large",
    "window_too_small",
    "rewind_ahead",
    "evict_too_many",
    "pin_range",
    "invalid_config",
)
VARIANTS = ("dense", "packed")
DTYPES = ("f32", "f16", "bf16")
FEATURES = ("growth", "head_ranges", "recent_window", "window", "global_sink", "quant")
OPTIONAL_OPS = ("rewind", "evict", "pin", "reset")
REPORTS = ("capacity", "resident_bytes")
# The trim modes of docs/contract.md §3 (revision 4); the first is the
# default, the only mode of a subject that declares nothing.
TRIMS = ("before_read", "after_read")
# The fields of a `domain` declaration (revision 3) and the values each
# takes: a tuple of strings, bool, "chunks" (any, {"lengths": [n, ...]},
# {"multiple": n}) or "configs" (a dict of CONFIG_LIMITS).
DOMAIN_FIELDS = {
    "rewrites": ("any", "latest", "none"),
    "chunks": "chunks",
    "probes": ("any", "after_append", "none"),
    "gaps": bool,
    "oversized": bool,
    "malformed": bool,
    "evict": ("any", "scene_cut", "held"),
    "pin": ("any", "scene_cut", "held"),
    "rewinds": ("any", "held"),
    "configs": "configs",
    "after_read": "domain",
}

# The limits of a domain's "configs" (each optional): least numbers
# (C - S and W - S beside the sink), lists of the values opened, the most
# sink tokens (0: no sink) and whether configurations grow (true: only
# growing ones, false: none).
CONFIG_LIMITS = {
    "min_room": "least",
    "min_window": "least",
    "batch": "list",
    "heads": "list",
    "head_dim": "list",
    "max_sink": "least",
    "growth": "bool",
}


class Refused(Exception):
    """A refusal the contract names: `kind` is a docs/contract.md §3 error kind."""

    def __init__(self, kind, message=""):
        super().__init__("%s: %s" % (kind, message) if message else kind)
        self.kind = kind
        self.message = message or kind


class AdapterError(Exception):
    """The adapter could not express the request to the cache it wraps (a
    payload of the wrong size, a dimension no tensor can have): the
    adapter's failure, never the cache's refusal."""


class Outside(Exception):
    """A request that lies outside the cache's domain: it is never asked in
    real use (a gap, a rewrite of anything but the chunk being denoised, a
    chunk length the pipeline never makes). kvcheck judges the case up to
    this request and cuts it there; it is no divergence unless the
    subject's declared `domain` admits the request (or kvcheck runs with
    --strict-domain)."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = reason


def domain_problem(domain):
    """What is wrong with a `domain` declaration, or None when it is valid."""
    if not isinstance(domain, dict):
        return "expected a dict of %s" % ", ".join(DOMAIN_FIELDS)
    for field, value in domain.items():
        allowed = DOMAIN_FIELDS.get(field)
        if allowed is None:
            return "unknown field %r (expected %s)" % (field, ", ".join(DOMAIN_FIELDS))
        if allowed is bool:
            if not isinstance(value, bool):
                return "%r: %r is not true or false" % (field, value)
        elif allowed == "chunks":
            if value == "any":
                continue
            if not isinstance(value, dict) or len(value) != 1:
                return '"chunks": %r: expected "any", {"lengths": [n, ...]} or {"multiple": n}' % (value,)
            ((kind, arg),) = value.items()
            if kind == "lengths":
                if isinstance(arg, (str, bytes)) or not isinstance(arg, (list, tuple)) or not arg or not all(
                    positive(n) for n in arg
                ):
                    return '"chunks": {"lengths": %r}: expected a non-empty list of positive ints' % (arg,)
            elif kind == "multiple":
                if not positive(arg):
                    return '"chunks": {"multiple": %r}: expected a positive int' % (arg,)
            else:
                return '"chunks": %r: expected "any", {"lengths": [n, ...]} or {"multiple": n}' % (value,)
        elif allowed == "configs":
            problem = configs_problem(value)
            if problem is not None:
                return problem
        elif allowed == "domain":
            # The domain of the cache's after_read configurations, where
            # it differs: a whole declaration of its own.
            problem = domain_problem(value)
            if problem is not None:
                return '"%s": %s' % (field, problem)
        elif value not in allowed:
            return "%r: %r is not one of %s" % (field, value, ", ".join(allowed))
    return None


def configs_problem(limits):
    """What is wrong with a domain's "configs" limits, or None."""
    if not isinstance(limits, dict):
        return '"configs": %r: expected a dict of %s' % (limits, ", ".join(CONFIG_LIMITS))
    for name, value in limits.items():
        kind = CONFIG_LIMITS.get(name)
        if kind is None:
            return '"configs": unknown limit %r (expected %s)' % (name, ", ".join(CONFIG_LIMITS))
        if kind == "least" and not (positive(value) or (value == 0 and not isinstance(value, bool))):
            return '"configs": {"%s": %r}: expected an int >= 0' % (name, value)
        if kind == "bool" and not isinstance(value, bool):
            return '"configs": {"%s": %r}: expected true or false' % (name, value)
        if kind == "list" and (
            isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value
            or not all(positive(n) for n in value)
        ):
            return '"configs": {"%s": %r}: expected a non-empty list of positive ints' % (name, value)
    return None


def positive(n):
    return isinstance(n, int) and not isinstance(n, bool) and n > 0



def without_arguments(cls, argv):
    """An instance of `cls` from a command line that must carry no extra
    arguments: the default `from_args` of a subject class."""
    if argv:
        raise SystemExit(
            "%s takes no arguments (got %s); define from_args(argv) to accept some" % (cls.__name__, " ".join(argv))
        )
    return cls()

class Subject:
    """Base class of a cache checked by kvcheck (see the module docs)."""

    name = None
    variants = VARIANTS
    dtypes = DTYPES
    features = ()
    values = True
    arrays = "numpy"
    layout = "bnhd"
    ops = None
    reports = ()
    domain = None
    trims = ("before_read",)

    @classmethod
    def from_args(cls, argv):
        """The instance to serve, from the command line's extra arguments."""
        return without_arguments(cls, argv)

    def open(self, config):
        raise NotImplementedError("%s must define open(config)" % type(self).__name__)

    def write(self, start, length, heads, recent_window, k, v):
        raise NotImplementedError("%s must define write(...)" % type(self).__name__)

    def rewind(self, to):
        raise NotImplementedError

    def evict(self, tokens):
        raise NotImplementedError

    def pin(self, tokens):
        raise NotImplementedError

    def reset(self):
        raise NotImplementedError

    def view(self):
        raise NotImplementedError

    def capabilities(self, revision=REVISION):
        """The `hello` capabilities: the declared attributes, with the
        operations this class does not define left out."""
        implemented = [op for op in OPTIONAL_OPS if defines(self, op)]
        if self.ops is not None:
            implemented = [op for op in implemented if op in self.ops]
        caps = {
            "variants": list(self.variants),
            "dtypes": list(self.dtypes),
            "ops": ["write"] + implemented,
            "features": list(self.features),
            "values": bool(self.values),
            "view": defines(self, "view"),
        }
        if self.reports and revision >= 2:
            caps["reports"] = list(self.reports)
        if self.domain is not None and revision >= 3:
            caps["domain"] = json_domain(self.domain)
        # Absent means before_read alone, which is also all an older
        # harness (revision 3 or less) can send: it refuses the field.
        if tuple(self.trims) != TRIMS[:1] and revision >= 4:
            caps["trims"] = list(self.trims)
        return caps

    def validate(self):
        """Checks the declarations; ValueError names a bad one."""
        for attr, allowed in (
            ("variants", VARIANTS),
            ("dtypes", DTYPES),
            ("features", FEATURES),
            ("ops", ("write",) + OPTIONAL_OPS),
            ("reports", REPORTS),
            ("trims", TRIMS),
        ):
            value = getattr(self, attr)
            if value is None and attr == "ops":
                continue
            if isinstance(value, str) or not all(v in allowed for v in value):
                raise ValueError("%s.%s = %r: expected a sequence of %s" % (type(self).__name__, attr, value, ", ".join(allowed)))
        if not self.trims:
            raise ValueError("%s.trims = (): declare at least one of %s" % (type(self).__name__, ", ".join(TRIMS)))
        if self.arrays not in _arrays.ARRAYS:
            raise ValueError("%s.arrays = %r: expected one of %s" % (type(self).__name__, self.arrays, ", ".join(_arrays.ARRAYS)))
        if self.layout not in _arrays.LAYOUTS:
            raise ValueError("%s.layout = %r: expected one of %s" % (type(self).__name__, self.layout, ", ".join(_arrays.LAYOUTS)))
        for op in ("open", "write"):
            if not defines(self, op):
                raise ValueError("%s must define %s" % (type(self).__name__, op))
        if self.domain is not None:
            problem = domain_problem(self.domain)
            if problem is not None:
                raise ValueError("%s.domain = %r: %s" % (type(self).__name__, self.domain, problem))


def json_domain(domain):
    """A valid `domain` declaration as the JSON object of the capability."""
    out = dict(domain)
    chunks = out.get("chunks")
    if isinstance(chunks, dict) and "lengths" in chunks:
        out["chunks"] = {"lengths": [int(n) for n in chunks["lengths"]]}
    if isinstance(out.get("configs"), dict):
        out["configs"] = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in out["configs"].items()}
    return out


def defines(subject, method):
    """Whether `subject`'s class overrides Subject.`method`."""
    return getattr(type(subject), method, None) is not getattr(Subject, method)


def exception(kind, message, adapter=False):
    body = {"type": kind, "message": message}
    if adapter:
        body["adapter"] = True
    return {"exception": body}


class Session:
    """One subject process: answers each request of the harness."""

    def __init__(self, subject):
        subject.validate()
        self.subject = subject
        self.config = None
        self.revision = 1

    def handle(self, request):
        """One request -> its response object (None for close)."""
        if not isinstance(request, dict):
            return exception("ProtocolError", "request is not a JSON object")
        if "hello" in request:
            self.revision = (request.get("hello") or {}).get("revision", 1)
            s = self.subject
            return {
                "hello": {
                    "protocol": PROTOCOL,
                    "name": s.name or type(s).__name__,
                    "capabilities": s.capabilities(self.revision),
                }
            }
        if "close" in request:
            return None
        if "open" in request:
            return self.open((request.get("open") or {}).get("config"))
        if self.config is None:
            return exception("ProtocolError", "no cache is open: send open first")
        try:
            if "view" in request:
                if not defines(self.subject, "view"):
                    raise AdapterError("%s has no view()" % type(self.subject).__name__)
                return {"ok": self.view_body(self.subject.view(), self.config["heads"])}
            if "op" in request:
                return {"ok": self.apply(request)}
        except Refused as refusal:
            if refusal.kind not in ERROR_KINDS:
                message = "Refused(%r) is not a docs/contract.md error kind (%s)" % (refusal.kind, ", ".join(ERROR_KINDS))
                return exception("AdapterError", message, adapter=True)
            return {"err": {"kind": refusal.kind, "message": refusal.message}}
        except AdapterError as error:
            return exception("AdapterError", str(error), adapter=True)
        except Outside as outside:
            return self.outside(outside)
        except Exception as error:
            return exception(type(error).__name__, str(error))
        return exception("ProtocolError", "unknown request %s" % sorted(request))

    def outside(self, outside):
        """The answer to a request the subject raised Outside for: revision
        3's `outside`, an exception of type Outside to an older harness."""
        if self.revision >= 3:
            return {"outside": {"reason": outside.reason}}
        return exception("Outside", outside.reason)

    def open(self, config):
        self.config = None
        if not isinstance(config, dict):
            return {"err": {"kind": "invalid_config", "message": "open carries no config object"}}
        # kvtrace/1 leaves the default trim mode unwritten; the subject
        # gets every field filled in.
        config = dict(config)
        config.setdefault("trim", TRIMS[0])
        try:
            if self.subject.arrays == "numpy":
                _arrays.import_numpy()
            elif self.subject.arrays == "torch":
                _arrays.import_torch()
            self.subject.open(config)
        except Refused as refusal:
            return {"err": {"kind": "invalid_config", "message": refusal.message}}
        except Outside as outside:
            if self.revision >= 3:
                return self.outside(outside)
            return {"err": {"kind": "invalid_config", "message": "Outside: %s" % outside.reason}}
        except Exception as error:
            return {"err": {"kind": "invalid_config", "message": "%s: %s" % (type(error).__name__, error)}}
        self.config = config
        try:
            return {"ok": self.reported()}
        except Exception as error:
            self.config = None
            return exception(type(error).__name__, str(error), adapter=True)

    def apply(self, request):
        op = request.get("op")
        s = self.subject
        if op == "reset":
            name, body = "reset", {}
        elif isinstance(op, dict) and len(op) == 1:
            ((name, body),) = op.items()
        else:
            raise AdapterError("unknown op %r" % (op,))
        if name == "write":
            return self.write(body, request)
        if name not in OPTIONAL_OPS or not defines(s, name):
            raise AdapterError("%s is not an operation of %s" % (name, type(s).__name__))
        if name == "reset":
            s.reset()
        else:
            getattr(s, name)(body.get({"rewind": "to"}.get(name, "tokens")))
        return self.state()

    def write(self, body, request):
        c = self.config
        start, length = body.get("start"), body.get("len")
        heads = body.get("heads")
        if heads is not None:
            heads = (heads[0], heads[1])
        count = c["heads"] if heads is None else heads[1]
        shape = (c["batch"], length, count, c["head_dim"])
        if min(shape) < 0:
            shape = None
        k = self.payload(request, "k", shape)
        v = self.payload(request, "v", shape)
        written = self.subject.write(start, length, heads, body.get("recent_window"), k, v)
        return self.view_body(written, count)

    def payload(self, request, which, shape):
        text = request.get(which)
        data = None if text is None else base64.b64decode(text, validate=True)
        s, c = self.subject, self.config
        if data is not None and shape is not None:
            want = shape[0] * shape[1] * shape[2] * shape[3] * _arrays.DTYPE_SIZE[c["dtype"]]
            if len(data) != want:
                # kvcheck sends an empty payload for a write the contract
                # refuses that would be too large to build: no tensor.
                shape = None
        return _arrays.decode(data, shape, c["dtype"], s.arrays, s.layout)

    def view_body(self, result, heads):
        """A write's or view's `ok` body from what the subject returned."""
        if isinstance(result, tuple) and len(result) == 3:
            visible, k, v = result
        else:
            visible, k, v = result, None, None
        if visible is None:
            raise AdapterError("%s returned no visible positions" % type(self.subject).__name__)
        body = self.state()
        body["visible"] = [int(p) for p in (visible.tolist() if hasattr(visible, "tolist") else visible)]
        if self.subject.values:
            c, layout = self.config, self.subject.layout
            for name, value in (("k", k), ("v", v)):
                if value is None:
                    raise AdapterError(
                        "%s declares values but returned no %s" % (type(self.subject).__name__, name.upper())
                    )
                try:
                    data = _arrays.encode(value, c["dtype"], layout)
                except TypeError as error:
                    raise AdapterError("%s: %s" % (name.upper(), error))
                body[name] = base64.b64encode(data).decode("ascii")
        return body

    def state(self):
        """global_end and the reported fields, read from the subject."""
        s = self.subject
        end = getattr(s, "global_end", None)
        if end is None:
            raise AdapterError("%s has no global_end attribute" % type(s).__name__)
        body = {"global_end": int(end)}
        body.update(self.reported())
        return body

    def reported(self):
        """The declared `reports`, read from the subject (revision 2)."""
        if self.revision < 2:
            return {}
        return {field: int(getattr(self.subject, field)) for field in self.subject.reports}


def serve(subject, stdin=None, stdout=None):
    """Answers requests from `stdin` until `close` or end of input.

    `subject` is a Subject instance, or a Session (wrapping one) whose
    `handle` a test harness has overridden."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    session = subject if isinstance(subject, Session) else Session(subject)
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError as error:
            response = exception("ProtocolError", "request is not JSON: %s" % error)
        else:
            response = session.handle(request)
            if response is None:
                return
        stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
        stdout.flush()
