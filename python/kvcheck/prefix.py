"""`kvcheck.prefix.PrefixSubject`: a prefix cache as a kvcheck-subject/1 process.

The prefix family of the protocol (docs/subject-protocol.md, "The prefix
family", revisions 5 and 6) checks a cache of docs/contract.md Part II: a pool of
blocks shared by requests through their common token prefixes (vLLM's
block pool, sglang's radix tree). A subclass implements the cache's
operations; this module owns the rest: the handshake, the config's rules,
the argument checks of every operation, the policy-free record of the
requests, the payload the subject writes, the encoding of what it reads,
and the response shapes.

    from kvcheck.prefix import NoRoom, PrefixSubject

    class MyCache(PrefixSubject):
        ops = ("start", "compute", "finish", "read")
        hit = ("leave_one",)

        def open(self, config):            # a fresh pool for this config
            ...
        def counts(self):                  # (in_use, cached, free), docs/contract.md §12
            ...
        def start(self, request, tokens):  # no room: raise NoRoom("...")
            return hit
        def compute(self, request, first, rows):
            ...                            # store rows of positions first, first + 1, ...
        def finish(self, request):
            ...
        def read(self, request):           # rows [layer][position][dim] of the computed positions
            ...

Serve it with `python -m kvcheck.serve_prefix mymodule:MyCache` (or
`serve_prefix(MyCache)` from a script), and check it with
`kvcheck prefix run --subject exec:'python -m kvcheck.serve_prefix mymodule:MyCache'`.

What the base class guarantees a hook (the subclass API, stable):

- Every argument check of docs/contract.md §15 is made before the hook is
  called, in the contract's order: `invalid_argument`, `unknown_request`,
  `duplicate_request`, `empty_prompt`, `preempted`, `not_preempted`,
  `compute_past_end`, `rollback_too_far`, `not_computed` and
  `evict_too_many` (the last from `counts()`). The base answers them
  itself; a hook is only ever called for an op the contract accepts on
  its arguments, so its one refusal is `raise NoRoom("why")` (from
  `start`, `extend`, `resume`: an allocation that finds too few free and
  cached blocks).
- An op the contract says changes nothing (`compute` of 0, `extend` with
  no tokens, `rollback` of 0, `evict` of 0) calls no hook: the answer is
  the counts.
- Inside a hook, `self.requests[r]` is request `r` as it was before the
  op (`Request(tokens, computed, preempted)`, read-only), `self.config`
  the open config (every field filled in: `variant`, `blocks`,
  `block_size`, `layers`, `row_width`, `hit`, `seed`, `window`: None or
  `{"size": W, "layers": [...]}` with the layers sorted) and `self.index` the
  op's index in the case (the time stamp of §14; None in `open` and
  `read` probes). After a hook succeeds the base updates the record:
  start `tokens = t, computed = hit`; compute `computed += k`; extend
  `tokens += u`; fork a copy; rollback drops the last `k` tokens and
  `computed = min(computed, n)`; finish deletes; preempt `computed = 0`,
  preempted; resume `computed = hit`, running.
- `compute(request, first, rows)` gets the payload (docs/contract.md §16)
  of positions `[first, first + len(rows[0]))`, laid out
  `[layer][position][dim]` as u32 bit patterns of f32 values
  (`payload_bits`): a cache on tensors converts them to its dtype (the
  values are exact in f32, f16 and bf16).
- `read(request)` returns the rows of positions `[0, computed)`,
  and for a windowed layer (docs/contract.md §19) those of
  `[self.window_start(request), computed)` only, `[layer][position][dim]`: nested sequences of u32 bit patterns (ints) or
  of float values (floats, numpy/torch arrays of any float dtype, which
  are converted to f32), or the little-endian f32 bytes themselves.
  They are sent as they are; kvcheck judges them.
- `start` and `resume` return the hit (an int).

Class attributes (the `hello` capabilities; an instance may override them
in `__init__`): `name` (for reports; default the class name), `ops` (None:
every op whose hook the class defines; or the §15 ops it implements,
`start`, `compute` and `finish` required), `hit` (the hit rules it opens,
§13: "leave_one", "whole"), `block_sizes` (None: any; or the block sizes
it opens), `policy` ("own": its library's accounting and eviction order,
judged by the invariants of §17; "contract": §12-§15 exactly, judged op by
op against the model), `steps` ("free": ops in any order; "whole": every
allocating op is followed by a compute of every uncomputed token).
`window` (None: it opens no window; or `{"sizes": [W, ...] or None,
"layers": [l, ...] or None}`: every config it opens carries a window of
one of those sizes over those layers, docs/contract.md §19) and `groups`
(None: the default; or `{"full": a, "window": b}`, the block tables of
each kind one request holds in the one pool).

Exceptions: `NoRoom(message)` is the `no_room` refusal; `Refused(kind,
message)` with another op kind of §15 is that refusal; `Outside(reason)`
is the `outside` answer (from `open` or any hook); `AdapterError` is the
adapter's own failure; any other exception is answered as an `exception`
(a library's ValueError and the like). From `open`, `Refused` and any
exception are `invalid_config`.
"""

import base64
import json
import operator
import struct
import sys
from dataclasses import dataclass

from .subject import PROTOCOL, AdapterError, Outside, Refused, exception, without_arguments

# The revision of kvcheck-subject/1 this module speaks: 5 added the prefix
# family, 6 its windows (the `window` config field, the `window` and
# `groups` capabilities).
REVISION = 6
FAMILY = "prefix"
# What a harness of this revision sends first: for tests and tools that
# drive a PrefixSession themselves.
HARNESS_HELLO = {"hello": {"protocol": PROTOCOL, "revision": REVISION, "family": FAMILY}}

# docs/contract.md §15, in the contract's order.
OPS = ("start", "compute", "extend", "fork", "rollback", "finish", "preempt", "resume", "read", "evict", "clear")
REQUIRED_OPS = ("start", "compute", "finish")
HIT_RULES = ("leave_one", "whole")
POLICIES = ("own", "contract")
STEPS = ("free", "whole")
ERROR_KINDS = (
    "invalid_argument",
    "unknown_request",
    "duplicate_request",
    "empty_prompt",
    "preempted",
    "not_preempted",
    "no_room",
    "compute_past_end",
    "rollback_too_far",
    "not_computed",
    "evict_too_many",
)

# docs/contract.md §11: the size rule, N · B · L · D elements at most.
MAX_POOL_ELEMENTS = 1 << 31
# Request ids and tokens are integers in [0, 2^32) (§15): anything else is
# no request at all, and the request that carries it is malformed.
ID_LIMIT = 1 << 32

# The fields of each op (kvtrace/1, crates/kvmodel/src/prefix/op.rs) and
# what each holds: "id" a request id, "tokens" a list of tokens, "count" a
# signed integer (a negative one is the contract's invalid_argument).
OP_FIELDS = {
    "start": (("request", "id"), ("tokens", "tokens")),
    "compute": (("request", "id"), ("count", "count")),
    "extend": (("request", "id"), ("tokens", "tokens")),
    "fork": (("request", "id"), ("into", "id")),
    "rollback": (("request", "id"), ("count", "count")),
    "finish": (("request", "id"),),
    "preempt": (("request", "id"),),
    "resume": (("request", "id"),),
    "read": (("request", "id"),),
    "evict": (("blocks", "count"),),
    "clear": (),
}

# The config of kvtrace/1 (docs/kvtrace.md "Prefix caches") with its
# defaults; `blocks` has none.
CONFIG_DEFAULTS = {"variant": "prefix", "block_size": 1, "layers": 1, "row_width": 1, "hit": "leave_one", "seed": 0,
                   "window": None}
CONFIG_FIELDS = ("variant", "blocks", "block_size", "layers", "row_width", "hit", "seed", "window")
WINDOW_FIELDS = ("size", "layers")

# ---------------------------------------------------------------------------
# The payload rule (docs/contract.md §16), bit for bit: crates/kvmodel's
# `kvmodel::prefix::payload` computes the same rows.

_M = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
PREFIX_SALT = 0x6B76707265666978  # "kvprefix"
LAYER_SALT = 0x6B766C6179657273  # "kvlayers"


def _mix(z):
    """splitmix64's finalizer on u64."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def _value_bits(e):
    """The f32 bits `±(1 + m/128) · 2^x`, x in [-6, 5], a hash stands for."""
    return ((e >> 63) << 31) | ((((e >> 32) % 12) + 121) << 23) | ((e & 0x7F) << 16)


def payload_bits(seed, tokens, layers, row_width, first=0, count=None):
    """The payload (docs/contract.md §16) of positions `[first, first +
    count)` of `tokens` (count None: to the end), as u32 bit patterns of
    f32 values laid out `[layer][position][dim]`. The prefix hash chains
    over every token before `first` too: a position's row depends on its
    whole prefix."""
    tokens = list(tokens)
    if count is None:
        count = len(tokens) - first
    if first < 0 or count < 0 or first + count > len(tokens):
        raise ValueError("positions [%d, %d) are not positions of %d tokens" % (first, first + count, len(tokens)))
    h = _mix((seed & _M) ^ PREFIX_SALT)
    hashes = []
    for p in range(first + count):
        h = _mix(h ^ ((tokens[p] * GOLDEN) & _M))
        if p >= first:
            hashes.append(h)
    # mix(h ^ LAYER_SALT ^ l·G) ^ d·G: the salts of each layer and dim once.
    layer_salts = [LAYER_SALT ^ ((l * GOLDEN) & _M) for l in range(layers)]
    dim_salts = [(d * GOLDEN) & _M for d in range(row_width)]
    return [
        [[_value_bits(_mix(row ^ d)) for d in dim_salts] for row in (_mix(h ^ salt) for h in hashes)]
        for salt in layer_salts
    ]


def bits_to_float(bits):
    """The f32 value of a u32 bit pattern (a payload element)."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _element_bits(x):
    """One element of what `read` returned, as u32 bits: an int is the bit
    pattern, a float (or a numpy/torch scalar of a float dtype) the value."""
    if isinstance(x, bool):
        raise AdapterError("a row element is a bool (%r), not u32 bits or a float" % x)
    try:
        bits = operator.index(x)
    except TypeError:
        try:
            return struct.unpack("<I", struct.pack("<f", float(x)))[0]
        except (TypeError, ValueError, OverflowError):
            raise AdapterError("a row element is %r, neither u32 bits (an int) nor a float" % (x,))
    if not 0 <= bits < ID_LIMIT:
        raise AdapterError("a row element is %d, not u32 bits (an int in [0, 2^32))" % bits)
    return bits


def rows_bytes(rows):
    """What `read` returned, as the little-endian f32 bytes of the protocol
    (`[layer][position][dim]`, flattened in that order). The rows are sent
    as they are, however many: kvcheck judges their shape and values."""
    if isinstance(rows, (bytes, bytearray, memoryview)):
        return bytes(rows)
    dtype = getattr(rows, "dtype", None)
    kind = getattr(dtype, "kind", None)
    if kind is not None and hasattr(rows, "astype") and hasattr(rows, "tobytes"):
        # numpy, without importing it: integer arrays are bits, float
        # arrays values (f16 and bf16 payloads convert to f32 exactly).
        if kind in "ui":
            return rows.astype("<u4").tobytes()
        if kind == "f":
            return rows.astype("<f4").tobytes()
    if hasattr(rows, "tolist"):  # torch tensors, numpy arrays of other dtypes
        rows = rows.tolist()
    try:
        flat = [_element_bits(x) for layer in rows for row in layer for x in row]
    except TypeError as error:
        raise AdapterError("read returned rows that are not [layer][position][dim] sequences: %s" % error)
    return struct.pack("<%dI" % len(flat), *flat)


# ---------------------------------------------------------------------------
# The subject.


@dataclass
class Request:
    """A request as the policy-free record keeps it (docs/contract.md §10):
    its tokens, how many leading ones are computed, and whether it is
    preempted (then `computed` is 0)."""

    tokens: list
    computed: int
    preempted: bool = False


class NoRoom(Refused):
    """The `no_room` refusal (docs/contract.md §15 allocation): the op needs
    more blocks than are free and evictable. The op must have changed
    nothing."""

    def __init__(self, message=""):
        super().__init__("no_room", message)


def _count_ok(value):
    return isinstance(value, int) and not isinstance(value, bool)


class PrefixSubject:
    """Base class of a prefix cache checked by kvcheck (see the module docs)."""

    name = None
    ops = None
    hit = ("leave_one",)
    block_sizes = None
    policy = "own"
    steps = "free"
    window = None
    groups = None

    # Set by the base: the open config, the op's index, the record.
    config = None
    index = None
    requests = None

    @classmethod
    def from_args(cls, argv):
        """The instance to serve, from the command line's extra arguments."""
        return without_arguments(cls, argv)

    # The hooks. `open`, `counts`, `read` and the hooks of `start`,
    # `compute` and `finish` are required; an op whose hook is not defined
    # is left out of the declared ops.

    def open(self, config):
        raise NotImplementedError("%s must define open(config)" % type(self).__name__)

    def counts(self):
        raise NotImplementedError("%s must define counts()" % type(self).__name__)

    def start(self, request, tokens):
        raise NotImplementedError

    def compute(self, request, first, rows):
        raise NotImplementedError

    def extend(self, request, tokens):
        raise NotImplementedError

    def fork(self, request, into):
        raise NotImplementedError

    def rollback(self, request, count):
        raise NotImplementedError

    def finish(self, request):
        raise NotImplementedError

    def preempt(self, request):
        raise NotImplementedError

    def resume(self, request):
        raise NotImplementedError

    def read(self, request):
        raise NotImplementedError

    def evict(self, count):
        raise NotImplementedError

    def clear(self):
        raise NotImplementedError

    # Declarations.

    def declared_ops(self):
        """The ops of the `hello`: the declared `ops`, or every op whose
        hook the class defines, in the contract's order."""
        if self.ops is not None:
            return [op for op in OPS if op in self.ops]
        return [op for op in OPS if defines(self, op)]

    def capabilities(self, revision=REVISION):
        """The `hello` capabilities (docs/subject-protocol.md, the prefix
        family); `window` and `groups` only to a harness of revision 6 or
        later (an older one refuses fields it does not know)."""
        caps = {"ops": self.declared_ops(), "hit": list(self.hit)}
        if self.block_sizes is not None:
            caps["block_sizes"] = [int(b) for b in self.block_sizes]
        caps["policy"] = self.policy
        caps["steps"] = self.steps
        if self.window is not None and revision >= 6:
            caps["window"] = {k: (None if v is None else [int(x) for x in v]) for k, v in self.window.items()}
        if self.groups is not None and revision >= 6:
            caps["groups"] = {k: int(v) for k, v in self.groups.items()}
        return caps

    def window_start(self, request):
        """Where request `request`'s window starts (docs/contract.md §19):
        a windowed layer's read returns the rows of positions
        `[window_start, computed)`; 0 without a window."""
        computed = self.requests[request].computed
        window = self.config["window"]
        if window is None:
            return 0
        return min(computed, max(0, computed - window["size"] + 1))

    def validate(self):
        """Checks the declarations; ValueError names a bad one."""
        cls = type(self).__name__
        for attr, allowed in (("ops", OPS), ("hit", HIT_RULES)):
            value = getattr(self, attr)
            if value is None and attr == "ops":
                continue
            if isinstance(value, str) or not all(v in allowed for v in value):
                raise ValueError("%s.%s = %r: expected a sequence of %s" % (cls, attr, value, ", ".join(allowed)))
        if not self.hit:
            raise ValueError("%s.hit = (): declare at least one of %s" % (cls, ", ".join(HIT_RULES)))
        if self.block_sizes is not None and (
            isinstance(self.block_sizes, str)
            or not self.block_sizes
            or not all(_count_ok(b) and b >= 1 for b in self.block_sizes)
        ):
            raise ValueError("%s.block_sizes = %r: expected None or a non-empty sequence of ints >= 1" % (cls, self.block_sizes))
        if self.policy not in POLICIES:
            raise ValueError("%s.policy = %r: expected one of %s" % (cls, self.policy, ", ".join(POLICIES)))
        if self.steps not in STEPS:
            raise ValueError("%s.steps = %r: expected one of %s" % (cls, self.steps, ", ".join(STEPS)))
        _check_window_caps(cls, self.window, self.groups)
        # read() too: kvcheck probes every running request after every op.
        for method in ("open", "counts", "read"):
            if not defines(self, method):
                raise ValueError("%s must define %s()" % (cls, method))
        declared = self.declared_ops()
        for op in REQUIRED_OPS:
            if op not in declared:
                raise ValueError("%s must implement %s (ops: %s)" % (cls, op, ", ".join(declared)))
        for op in declared:
            if not defines(self, op):
                raise ValueError("%s declares %s but does not define %s()" % (cls, op, op))

    # The machinery the session calls. A refusal is raised as `Refused`;
    # nothing of the record changes until the hook has returned.

    def _open(self, config):
        """Validates and fills in `config`, opens the cache, and returns the
        fresh pool's counts. Refused("invalid_config") for a config that
        breaks docs/contract.md §11, Outside for one the capabilities do
        not open."""
        self.requests = {}
        self.config = None
        self.index = None
        config = normalized_config(config)
        if config["hit"] not in self.hit:
            raise Outside("hit rule %r is not opened by %s (hit: %s)" % (config["hit"], self._name(), ", ".join(self.hit)))
        if self.block_sizes is not None and config["block_size"] not in self.block_sizes:
            raise Outside(
                "block size %d is not opened by %s (block_sizes: %s)"
                % (config["block_size"], self._name(), ", ".join(str(b) for b in self.block_sizes))
            )
        why = self._window_outside(config["window"])
        if why:
            raise Outside(why)
        self.config = config
        try:
            self.open(dict(config))
        except BaseException:
            self.config = None
            raise
        return self._counts()

    def _window_outside(self, window):
        """Why the capabilities do not open `window` (a normalized config's),
        or None."""
        if self.window is None:
            return None if window is None else "%s opens no window" % self._name()
        if window is None:
            return "%s opens only windowed configs (window: %s)" % (self._name(), json.dumps(self.window))
        sizes, layers = self.window.get("sizes"), self.window.get("layers")
        if sizes is not None and window["size"] not in sizes:
            return "window size %d is not opened by %s (sizes: %s)" % (window["size"], self._name(), json.dumps(sizes))
        if layers is not None and window["layers"] != sorted(layers):
            return "windowed layers %s are not %s's (%s)" % (json.dumps(window["layers"]), self._name(), json.dumps(sorted(layers)))
        return None

    def _name(self):
        return self.name or type(self).__name__

    def _counts(self):
        """The subject's counts as the response fields."""
        try:
            in_use, cached, free = self.counts()
            return {"in_use": operator.index(in_use), "cached": operator.index(cached), "free": operator.index(free)}
        except (TypeError, ValueError) as error:
            raise AdapterError("%s.counts() must return three ints (in_use, cached, free): %s" % (self._name(), error))

    def _check(self, op, a):
        """The argument checks of docs/contract.md §15, in its order; raises
        the first refusal."""
        for field in ("count", "blocks"):
            if field in a and a[field] < 0:
                raise Refused("invalid_argument", "%s = %d is negative" % (field, a[field]))
        r = a.get("request")
        record = self.requests.get(r) if r is not None else None

        def unknown():
            return Refused("unknown_request", "%s names request %d, which does not exist" % (op, r))

        def running():
            if record is None:
                raise unknown()
            if record.preempted:
                raise Refused("preempted", "%s names request %d, which is preempted (resume it first)" % (op, r))

        if op == "start":
            if record is not None:
                raise Refused("duplicate_request", "start would create request %d, which already exists" % r)
            if not a["tokens"]:
                raise Refused("empty_prompt", "start of request %d has no tokens" % r)
        elif op == "compute":
            running()
            n, c = len(record.tokens), record.computed
            if a["count"] > n - c:
                raise Refused(
                    "compute_past_end",
                    "compute %d of request %d would pass its %d tokens (%d computed)" % (a["count"], r, n, c),
                )
        elif op == "fork":
            running()
            if a["into"] in self.requests:
                raise Refused("duplicate_request", "fork would create request %d, which already exists" % a["into"])
            if record.computed < len(record.tokens):
                raise Refused(
                    "not_computed",
                    "fork of request %d, which has computed %d of its %d tokens" % (r, record.computed, len(record.tokens)),
                )
        elif op == "rollback":
            running()
            if a["count"] > len(record.tokens):
                raise Refused(
                    "rollback_too_far", "rollback %d of request %d, which has %d tokens" % (a["count"], r, len(record.tokens))
                )
        elif op == "finish":
            if record is None:
                raise unknown()
        elif op == "resume":
            if record is None:
                raise unknown()
            if not record.preempted:
                raise Refused("not_preempted", "resume names request %d, which is running" % r)
        elif op in ("extend", "preempt", "read"):
            running()
        elif op == "evict":
            cached = self._counts()["cached"]
            if a["blocks"] > cached:
                raise Refused("evict_too_many", "evict %d but only %d blocks are cached" % (a["blocks"], cached))
        return record

    def _hit(self, value, n):
        """A hit a hook returned, as an int; the record keeps it within the
        request's tokens (kvcheck judges the answer itself)."""
        if isinstance(value, bool):
            value = None
        try:
            hit = operator.index(value)
        except TypeError:
            raise AdapterError("%s must return the hit (an int), not %r" % (self._name(), value))
        return hit, max(0, min(hit, n))

    def _apply(self, op, a, index):
        """One op of docs/contract.md §15 whose arguments were parsed: the
        checks, the hook, the record; returns the `ok` effect."""
        record = self._check(op, a)
        r = a.get("request")
        self.index = index
        effect = {}
        if op == "start":
            answer, hit = self._hit(self.start(r, list(a["tokens"])), len(a["tokens"]))
            effect["hit"] = answer
            self.requests[r] = Request(list(a["tokens"]), hit, False)
        elif op == "compute":
            k = a["count"]
            if k > 0:
                first = record.computed
                cfg = self.config
                rows = payload_bits(cfg["seed"], record.tokens, cfg["layers"], cfg["row_width"], first, k)
                self.compute(r, first, rows)
                record.computed = first + k
        elif op == "extend":
            if a["tokens"]:
                self.extend(r, list(a["tokens"]))
                record.tokens = record.tokens + list(a["tokens"])
        elif op == "fork":
            self.fork(r, a["into"])
            self.requests[a["into"]] = Request(list(record.tokens), record.computed, False)
        elif op == "rollback":
            k = a["count"]
            if k > 0:
                self.rollback(r, k)
                kept = len(record.tokens) - k
                record.tokens = record.tokens[:kept]
                record.computed = min(record.computed, kept)
        elif op == "finish":
            self.finish(r)
            del self.requests[r]
        elif op == "preempt":
            self.preempt(r)
            record.computed, record.preempted = 0, True
        elif op == "resume":
            answer, hit = self._hit(self.resume(r), len(record.tokens))
            effect["hit"] = answer
            record.computed, record.preempted = hit, False
        elif op == "read":
            effect["read"] = record.computed
            effect["rows"] = base64.b64encode(rows_bytes(self.read(r))).decode("ascii")
        elif op == "evict":
            if a["blocks"] > 0:
                self.evict(a["blocks"])
        elif op == "clear":
            self.clear()
        effect.update(self._counts())
        return effect

    def _probe(self, r):
        """The read probe of docs/subject-protocol.md: `read` and `rows`, no
        index, nothing changes."""
        self.index = None
        record = self._check("read", {"request": r})
        return {"read": record.computed, "rows": base64.b64encode(rows_bytes(self.read(r))).decode("ascii")}


def normalized_window(window, layers):
    """A config's `window` (docs/contract.md §19) with its layers filled in
    (every layer by default) and sorted; None for none. Refused
    ("invalid_config") names what breaks the rules: a size of at least 1,
    and distinct layers below `layers`."""
    if window is None:
        return None
    if not isinstance(window, dict):
        raise Refused("invalid_config", "window must be an object {size, layers}, got %s" % _short(window))
    for field in window:
        if field not in WINDOW_FIELDS:
            raise Refused("invalid_config", "window.%s is not a field of a window (size, layers)" % field)
    size = window.get("size")
    if not _count_ok(size) or size < 1:
        raise Refused("invalid_config", "window.size must be at least 1, got %s" % json.dumps(size))
    chosen = window.get("layers")
    if chosen is None:
        chosen = list(range(layers))
    if not isinstance(chosen, list) or not chosen or not all(_count_ok(l) for l in chosen):
        raise Refused("invalid_config", "window.layers must be a non-empty list of layers, got %s" % _short(chosen))
    if len(set(chosen)) != len(chosen) or not all(0 <= l < layers for l in chosen):
        raise Refused(
            "invalid_config", "window.layers %s must be distinct layers below layers = %d" % (json.dumps(chosen), layers)
        )
    return {"size": size, "layers": sorted(chosen)}


def _check_window_caps(cls, window, groups):
    """ValueError naming a malformed `window` or `groups` declaration."""
    if window is not None:
        if not isinstance(window, dict) or not set(window) <= {"sizes", "layers"}:
            raise ValueError("%s.window = %r: expected None or {'sizes': [...] or None, 'layers': [...] or None}" % (cls, window))
        for key in ("sizes", "layers"):
            value = window.get(key)
            low = 1 if key == "sizes" else 0
            if value is not None and (
                isinstance(value, str) or not value or not all(_count_ok(v) and v >= low for v in value)
            ):
                raise ValueError("%s.window[%r] = %r: expected None or a non-empty list of ints >= %d" % (cls, key, value, low))
    if groups is not None:
        if (
            not isinstance(groups, dict)
            or not set(groups) <= {"full", "window"}
            or not all(_count_ok(v) and v >= 0 for v in groups.values())
            or sum(groups.values()) < 1
        ):
            raise ValueError("%s.groups = %r: expected {'full': a, 'window': b}, counts >= 0, one at least" % (cls, groups))


def defines(subject, method):
    """Whether `subject`'s class overrides PrefixSubject.`method`."""
    return getattr(type(subject), method, None) is not getattr(PrefixSubject, method)


def normalized_config(config):
    """The config with kvtrace/1's defaults filled in, checked against
    docs/contract.md §11; Refused("invalid_config", "FIELD ...") names the
    first field that breaks a rule (the size rule on `blocks`)."""
    if not isinstance(config, dict):
        raise Refused("invalid_config", "open carries no config object")
    for field in config:
        if field not in CONFIG_FIELDS:
            raise Refused("invalid_config", "%s is not a field of a prefix config (%s)" % (field, ", ".join(CONFIG_FIELDS)))
    if "blocks" not in config:
        raise Refused("invalid_config", "blocks is missing")
    config = dict(CONFIG_DEFAULTS, **config)
    if config["variant"] != "prefix":
        raise Refused("invalid_config", "variant must be \"prefix\", got %s" % json.dumps(config["variant"]))
    for field in ("blocks", "block_size", "layers", "row_width"):
        value = config[field]
        if not _count_ok(value) or value < 1:
            raise Refused("invalid_config", "%s must be at least 1, got %s" % (field, json.dumps(value)))
    if config["hit"] not in HIT_RULES:
        raise Refused("invalid_config", "hit must be \"leave_one\" or \"whole\", got %s" % json.dumps(config["hit"]))
    seed = config["seed"]
    if not _count_ok(seed) or not 0 <= seed < (1 << 64):
        raise Refused("invalid_config", "seed must be an integer in [0, 2^64), got %s" % json.dumps(seed))
    config["window"] = normalized_window(config["window"], config["layers"])
    elements = config["blocks"] * config["block_size"] * config["layers"] * config["row_width"]
    if elements > MAX_POOL_ELEMENTS:
        raise Refused(
            "invalid_config",
            "blocks %d x block_size %d x layers %d x row_width %d = %d elements exceeds the size rule 2^31"
            % (config["blocks"], config["block_size"], config["layers"], config["row_width"], elements),
        )
    return config


def parse_op(op):
    """A kvtrace/1 prefix op object -> (name, fields); AdapterError naming
    what is wrong with a malformed one (no such op, a missing or unknown
    field, a request id or token that is not an integer in [0, 2^32), a
    count that is not an integer)."""
    if op == "clear":
        return "clear", {}
    if not isinstance(op, dict) or len(op) != 1:
        raise AdapterError("op %s is not an op object of one key (or \"clear\")" % _short(op))
    ((name, body),) = op.items()
    if name not in OP_FIELDS or name == "clear":
        raise AdapterError("unknown op %s (expected one of %s)" % (json.dumps(name), ", ".join(OPS)))
    return name, parse_fields(name, body)


def parse_fields(name, body):
    """The fields of op `name` from its body, checked as `parse_op` says."""
    if not isinstance(body, dict):
        raise AdapterError("op %s: %s is not an object of its fields" % (name, _short(body)))
    fields = OP_FIELDS[name]
    known = [f for f, _ in fields]
    for field in body:
        if field not in known:
            raise AdapterError("op %s: unknown field %s (expected %s)" % (name, json.dumps(field), ", ".join(known)))
    out = {}
    for field, kind in fields:
        if field not in body:
            raise AdapterError("op %s: field %s is missing" % (name, field))
        value = body[field]
        if kind == "id":
            if not _count_ok(value) or not 0 <= value < ID_LIMIT:
                raise AdapterError("op %s: %s %s is not a request id (an integer in [0, 2^32))" % (name, field, _short(value)))
        elif kind == "tokens":
            if not isinstance(value, list):
                raise AdapterError("op %s: %s %s is not a list of tokens" % (name, field, _short(value)))
            for i, t in enumerate(value):
                if not _count_ok(t) or not 0 <= t < ID_LIMIT:
                    raise AdapterError("op %s: token %d, %s, is not an integer in [0, 2^32)" % (name, i, _short(t)))
        elif not _count_ok(value):
            raise AdapterError("op %s: %s %s is not an integer" % (name, field, _short(value)))
        out[field] = value
    return out


def _short(value):
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------
# The protocol.


class PrefixSession:
    """One subject process of the prefix family: answers each request of
    the harness, and never raises (every failure is a response)."""

    def __init__(self, subject):
        subject.validate()
        self.subject = subject
        self.opened = False
        self.revision = 1

    def handle(self, request):
        """One request -> its response object (None for close)."""
        try:
            return self._handle(request)
        except Exception as error:  # the loop outlives any bug of the subject or of this module
            return exception(type(error).__name__, "while answering the request: %s" % error, adapter=True)

    def _handle(self, request):
        if not isinstance(request, dict):
            return exception("ProtocolError", "request is not a JSON object", adapter=True)
        if "hello" in request:
            hello = request.get("hello")
            revision = hello.get("revision", 1) if isinstance(hello, dict) else 1
            self.revision = revision if _count_ok(revision) else 1
            s = self.subject
            return {
                "hello": {
                    "protocol": PROTOCOL,
                    "name": s._name(),
                    "family": FAMILY,
                    "capabilities": s.capabilities(self.revision),
                }
            }
        if "close" in request:
            return None
        if "open" in request:
            body = request.get("open")
            return self.open(body.get("config") if isinstance(body, dict) else None)
        if "op" not in request and "read" not in request:
            return exception("ProtocolError", "unknown request %s" % sorted(request), adapter=True)
        if not self.opened:
            return exception("ProtocolError", "no cache is open: send open first", adapter=True)
        return self.answer(lambda: self._op_or_probe(request))

    def open(self, config):
        self.opened = False
        try:
            counts = self.subject._open(config)
        except Refused as refusal:
            # A refusal from the open hook is the config's, whatever kind
            # the adapter named.
            message = refusal.message if refusal.kind == "invalid_config" else str(refusal)
            return {"err": {"kind": "invalid_config", "message": message}}
        except Outside as outside:
            return {"outside": {"reason": outside.reason}}
        except AdapterError as error:
            return exception("AdapterError", str(error), adapter=True)
        except Exception as error:
            return {"err": {"kind": "invalid_config", "message": "%s: %s" % (type(error).__name__, error)}}
        self.opened = True
        return {"ok": counts}

    def _op_or_probe(self, request):
        s = self.subject
        if "op" in request:
            name, fields = parse_op(request["op"])
            if name not in s.declared_ops():
                raise AdapterError("op %s is not declared (ops: %s)" % (name, ", ".join(s.declared_ops())))
            index = request.get("index")
            if not _count_ok(index) or index < 0:
                raise AdapterError("op %s carries no index (an integer >= 0), got %s" % (name, _short(index)))
            return s._apply(name, fields, index)
        fields = parse_fields("read", request["read"])
        return s._probe(fields["request"])

    def answer(self, call):
        """The response to an op or probe: `ok` with the effect, `err`
        with the counts after the refusal, `outside` or `exception`."""
        try:
            return {"ok": call()}
        except Refused as refusal:
            if refusal.kind not in ERROR_KINDS:
                message = "Refused(%r) is not a docs/contract.md §15 error kind (%s)" % (refusal.kind, ", ".join(ERROR_KINDS))
                return exception("AdapterError", message, adapter=True)
            # A refusal changes nothing (P7): the counts after it are
            # the subject's own, for kvcheck to compare with those before.
            try:
                counts = self.subject._counts()
            except AdapterError as error:
                return exception("AdapterError", str(error), adapter=True)
            return {"err": dict({"kind": refusal.kind, "message": refusal.message}, **counts)}
        except AdapterError as error:
            return exception("AdapterError", str(error), adapter=True)
        except Outside as outside:
            return {"outside": {"reason": outside.reason}}
        except Exception as error:
            return exception(type(error).__name__, str(error))


def serve_prefix(subject, stdin=None, stdout=None):
    """Answers requests from `stdin` until `close` or end of input.

    `subject` is a PrefixSubject subclass (instantiated with no
    arguments), an instance, or a PrefixSession wrapping one."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    if isinstance(subject, type):
        subject = subject()
    session = subject if isinstance(subject, PrefixSession) else PrefixSession(subject)
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError as error:
            response = exception("ProtocolError", "request is not JSON: %s" % error, adapter=True)
        else:
            response = session.handle(request)
            if response is None:
                return
        try:
            text = json.dumps(response, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            text = json.dumps(exception("AdapterError", "the response cannot be encoded: %s" % error, adapter=True))
        stdout.write(text + "\n")
        stdout.flush()
