"""`kvcheck.torch`: the attention tap, for caches that are inline pipeline code.

Some KV caches are not a class with an `update()` but a dict of tensors that
the transformer's forward updates in place (Self-Forcing and the video
diffusion pipelines built like it). There is no call to wrap; what the cache
*does* is what attention reads. The tap observes exactly that:

    from kvcheck.torch import AttentionTap

    tap = AttentionTap()
    with tap:                                # records every attention call
        tap.produced(start, k_rows, v_rows)  # the rows this chunk produced
        pipeline.generate_chunk(...)
    seen = tap.observe()                     # the last call, identified
    seen.visible                             # positions attention read
    seen.unknown                             # keys that match no produced row

- Inside `with tap:` every `torch.nn.functional.scaled_dot_product_attention`
  call (seen through a `TorchFunctionMode`, however the function was
  imported) and every `torch.nn.attention.flex_attention.flex_attention`
  call (through the module attribute) is recorded: its query length, a copy
  of its K and V, its mask (`attn_mask`, `is_causal`, a flex `block_mask`).
- `tap.produced(start, k, v)` registers the rows the pipeline produced for
  positions `start, start+1, ...` at the current step (`tap.begin_step()`
  starts a new one; `tap.watch(module, start)` registers a module's `(k, v)`
  output through a forward hook). `k` and `v` are `[B, n, H, D]`
  (`layout="bhnd"`: `[B, H, n, D]`), as they reach attention.
- `tap.observe(call=-1)` identifies every key of a recorded call by the
  exact bytes of its K row and V row (all batch rows and heads of that key)
  against the produced rows: a key is the (position, step) whose rows have
  the same bytes, `unknown` when none has them (a corrupted row, a slot
  never written, a row of a video the tap has forgotten), `ambiguous` when
  rows of two positions have them. A key is *visible* when the mask lets
  the call's last query read it (in every batch row and head): `is_causal`
  as torch applies it (top-left aligned), a boolean `attn_mask` (True
  reads), a float one (a key at -inf or the dtype's lowest value is
  hidden), a flex `block_mask`'s `mask_mod`. `Observation.view()` returns
  the visible identified positions in the order attention holds them, with
  their K and V as `[B, n, H, D]`.

`TappedSubject` is a `kvcheck.Subject` whose writes are answered from the
tap: the subclass runs its pipeline for a write in `forward`, and the
visible positions and the K/V view come from the write's last attention
call.

Limits: attention the tap does not see (fused or custom kernels, code under
`torch.compile`, a flex_attention bound before the tap was entered) is not
observed; a `score_mod` that hides keys is not applied; rows must reach
attention with the bytes they were registered with and must be
byte-distinct between positions.

torch is imported when the tap is first used, so `import kvcheck.torch`
works without it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from .subject import AdapterError, Refused, Subject, defines

TORCH_MISSING = (
    "kvcheck.torch needs PyTorch: pip install torch "
    "(the rest of kvcheck works without it)"
)


def import_torch() -> Any:
    """torch, or ImportError naming what is missing."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(TORCH_MISSING) from error
    return torch


class UnknownRows(RuntimeError):
    """Attention read keys whose rows match no produced row: a corrupted
    row, a slot that was never written, or a row of a forgotten video."""

    def __init__(self, observation: "Observation") -> None:
        self.observation = observation
        unknown = observation.unknown
        super().__init__(
            "attention call %d read %d key%s matching no produced row (key index %s of %d)"
            % (
                observation.call,
                len(unknown),
                "" if len(unknown) == 1 else "s",
                ", ".join(str(key.index) for key in unknown),
                len(observation.keys),
            )
        )


class LayerMismatch(RuntimeError):
    """Two blocks of one forward read different rows
    (`AttentionTap.agreed_view`)."""


class Call:
    """One recorded attention call."""

    def __init__(
        self,
        kind: str,
        query_shape: tuple,
        k: Any,
        v: Any,
        attn_mask: Any = None,
        is_causal: bool = False,
        block_mask: Any = None,
        score_mod: Any = None,
    ) -> None:
        self.kind = kind  # "sdpa" or "flex"
        self.query_shape = query_shape
        self.k = k
        self.v = v
        self.attn_mask = attn_mask
        self.is_causal = is_causal
        self.block_mask = block_mask
        self.score_mod = score_mod

    @property
    def query_len(self) -> int:
        return int(self.query_shape[-2])

    @property
    def key_len(self) -> int:
        return int(self.k.shape[-2])

    def __repr__(self) -> str:
        return "Call(%s, q=%s, k=%s)" % (self.kind, list(self.query_shape), list(self.k.shape))


class Key:
    """One key of an observed call: what its rows are, and whether the last
    query reads it."""

    def __init__(self, index: int, candidates: Sequence[tuple], visible: bool, latest: dict) -> None:
        self.index = index  # along the call's key axis
        self.visible = visible
        positions = sorted({position for position, _ in candidates})
        self.ambiguous = len(positions) > 1
        self.candidates = list(candidates)
        if len(positions) == 1:
            self.position = positions[0]
            self.step = max(step for _, step in candidates)
            self.stale = latest.get(self.position, self.step) > self.step
        else:
            self.position = None
            self.step = None
            self.stale = False

    @property
    def unknown(self) -> bool:
        return not self.candidates

    def __repr__(self) -> str:
        if self.unknown:
            what = "unknown"
        elif self.ambiguous:
            what = "ambiguous %s" % sorted({p for p, _ in self.candidates})
        else:
            what = "position %d step %d%s" % (self.position, self.step, " (stale)" if self.stale else "")
        return "Key(%d: %s%s)" % (self.index, what, "" if self.visible else ", hidden")


class Observation:
    """One attention call, its keys identified by bytes (`AttentionTap.observe`)."""

    def __init__(self, call_index: int, call: Call, keys: list) -> None:
        self.call = call_index
        self.record = call
        self.keys = keys

    @property
    def visible(self) -> list:
        """Positions of the identified keys the last query reads, in key order."""
        return [key.position for key in self.keys if key.visible and key.position is not None]

    @property
    def unknown(self) -> list:
        """Keys the last query reads whose rows match no produced row."""
        return [key for key in self.keys if key.visible and key.unknown]

    @property
    def ambiguous(self) -> list:
        """Keys the last query reads whose rows match rows of several positions."""
        return [key for key in self.keys if key.visible and key.ambiguous]

    @property
    def stale(self) -> list:
        """Keys the last query reads that hold an older step's row of their position."""
        return [key for key in self.keys if key.visible and key.stale]

    @property
    def hidden(self) -> list:
        """Keys the mask hides from the last query."""
        return [key for key in self.keys if not key.visible]

    def view(self) -> tuple:
        """`(positions, k, v)`: the visible identified keys in key order, K
        and V as `[B, n, H, D]` (a 4-dimensional call's `[B, H, S, D]`
        transposed)."""
        torch = import_torch()
        index = [key.index for key in self.keys if key.visible and key.position is not None]
        picked = torch.tensor(index, dtype=torch.long)
        k = self.record.k.index_select(-2, picked)
        v = self.record.v.index_select(-2, picked)
        if k.dim() == 4:
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        return [key.position for key in self.keys if key.visible and key.position is not None], k, v

    def describe(self) -> str:
        return "call %d (%r): %s" % (self.call, self.record, ", ".join(repr(key) for key in self.keys))

    def __repr__(self) -> str:
        return "Observation(call=%d, visible=%s, unknown=%d, hidden=%d)" % (
            self.call,
            self.visible,
            len(self.unknown),
            len(self.hidden),
        )


class AttentionTap:
    """Records attention calls inside `with tap:` and identifies their keys
    against the rows registered with `produced` (see the module docs).

    `keep`: how many calls to keep (None: all; the oldest go first);
    `flex`: whether to record flex_attention too."""

    def __init__(self, keep: int | None = None, flex: bool = True) -> None:
        self.keep = keep
        self.flex = flex
        self.calls: list = []
        self.step = 0
        self.rows: dict = {}  # K row bytes + V row bytes -> [(position, step)]
        self.latest: dict = {}  # position -> its newest produced step
        self.active = 0
        self.mode: Any = None
        self.saved_flex: Any = None

    # -- recording ---------------------------------------------------------

    def __enter__(self) -> "AttentionTap":
        torch = import_torch()
        if self.active == 0:
            self.mode = sdpa_mode(torch, self)
            self.mode.__enter__()
            if self.flex:
                module = flex_module()
                if module is not None:
                    self.saved_flex = module.flex_attention
                    module.flex_attention = flex_wrapper(self, self.saved_flex)
        self.active += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active -= 1
        if self.active == 0:
            if self.saved_flex is not None:
                flex_module().flex_attention = self.saved_flex
                self.saved_flex = None
            mode, self.mode = self.mode, None
            mode.__exit__(*exc)

    def record(self, call: Call) -> None:
        self.calls.append(call)
        if self.keep is not None and len(self.calls) > self.keep:
            del self.calls[: len(self.calls) - self.keep]

    def clear_calls(self) -> None:
        self.calls.clear()

    # -- produced rows -----------------------------------------------------

    def begin_step(self) -> int:
        """Starts a new step (a write, a denoising pass): rows produced from
        now on carry its number, which is returned."""
        self.step += 1
        return self.step

    def produced(self, start: Any, k: Any, v: Any, step: int | None = None, layout: str = "bnhd") -> None:
        """Registers the K and V rows produced for positions `start, ...`
        (or, when `start` is a sequence, for the positions it lists, one per
        row): `[B, n, H, D]` (or `[B, H, n, D]` with `layout="bhnd"`), as
        attention will read them."""
        torch = import_torch()
        if layout not in ("bnhd", "bhnd"):
            raise ValueError("layout %r: expected bnhd or bhnd" % layout)
        axis = 1 if layout == "bnhd" else -2
        if k.shape != v.shape:
            raise ValueError("K %s and V %s differ in shape" % (list(k.shape), list(v.shape)))
        step = self.step if step is None else step
        count = k.shape[axis]
        positions = range(start, start + count) if isinstance(start, int) else [int(p) for p in start]
        if len(positions) != count:
            raise ValueError("%d positions for %d rows" % (len(positions), count))
        with torch.no_grad():
            rows = zip(row_bytes(torch, k, axis), row_bytes(torch, v, axis))
        for position, (k_row, v_row) in zip(positions, rows):
            entries = self.rows.setdefault(k_row + v_row, [])
            if (position, step) not in entries:
                entries.append((position, step))
            if step >= self.latest.get(position, step):
                self.latest[position] = step

    def watch(self, module: Any, start: Callable[[], Any], layout: str = "bnhd") -> Any:
        """Registers the `(k, v)` that `module` returns on every forward as
        produced at `start()` (a first position, or the positions of the
        rows; a forward hook; returns its handle)."""

        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            k, v = output
            self.produced(start(), k, v, layout=layout)

        return module.register_forward_hook(hook)

    def forget(self) -> None:
        """Forgets every produced row and recorded call (a new video: rows of
        the old one then read as unknown)."""
        self.rows.clear()
        self.latest.clear()
        self.calls.clear()

    # -- identification ----------------------------------------------------

    def observe(self, call: int = -1) -> Observation:
        """The recorded call `call` (default the last) with its keys
        identified by bytes and its mask applied for its last query."""
        torch = import_torch()
        if not self.calls:
            raise LookupError("the tap recorded no attention call")
        index = call % len(self.calls)
        record = self.calls[index]
        with torch.no_grad():
            k_rows = row_bytes(torch, record.k, -2)
            v_rows = row_bytes(torch, record.v, -2)
            readable = last_query_reads(torch, record)
        keys = [
            Key(j, self.rows.get(k_row + v_row, ()), readable[j], self.latest)
            for j, (k_row, v_row) in enumerate(zip(k_rows, v_rows))
        ]
        return Observation(index, record, keys)

    def observations(self) -> Iterator[Observation]:
        for index in range(len(self.calls)):
            yield self.observe(index)

    def agreed_view(self, calls: Sequence[int]) -> tuple:
        """`(positions, k, v)` as `Observation.view()` gives them for the
        last of `calls` (indices into the recorded calls: one per block of
        a forward whose blocks each keep a cache), after checking that
        every other one read exactly the same rows. Raises `AdapterError`
        when there is no call or the rows are not byte-distinct,
        `UnknownRows` when the last call reads a row no write produced,
        and `LayerMismatch` when another block read other rows (one
        block's bookkeeping went wrong where another's did not)."""
        if not calls:
            raise AdapterError("the write ran no attention call the tap could see")
        seen = [self.observe(i) for i in calls]
        last = seen[-1]
        if last.ambiguous:
            raise AdapterError("rows are not byte-distinct: %s" % last.ambiguous)
        if last.unknown:
            raise UnknownRows(last)
        positions, k, v = last.view()
        for block, other in enumerate(seen[:-1]):
            p, ok, ov = other.view()
            if p != positions or other.unknown or not (ok.equal(k) and ov.equal(v)):
                raise LayerMismatch("block %d read %s, block %d read %s" % (block, p, len(seen) - 1, positions))
        return positions, k, v


def row_bytes(torch: Any, tensor: Any, axis: int) -> list:
    """The bytes of every slice of `tensor` along `axis` (each the slice's
    elements in the order of the other axes)."""
    rows = tensor.detach().movedim(axis, 0).to("cpu").contiguous()
    count = rows.shape[0]
    if count == 0:
        return []
    flat = rows.reshape(-1)
    if flat.numel() == 0:
        return [b""] * count
    raw = flat.view(torch.uint8)
    try:
        data = raw.numpy().tobytes()
    except (RuntimeError, ImportError, TypeError):  # torch without numpy
        data = bytes(raw.tolist())
    size = len(data) // count
    return [data[i * size : (i + 1) * size] for i in range(count)]


def last_query_reads(torch: Any, call: Call) -> list:
    """For every key of `call`: whether its mask lets the last query read it
    in every batch row and head."""
    keys, queries = call.key_len, call.query_len
    if keys == 0:
        return []
    reads = torch.ones(keys, dtype=torch.bool)
    key_index = torch.arange(keys)
    if call.is_causal:
        # torch's is_causal: query i reads keys j <= i (top-left aligned).
        reads &= key_index <= queries - 1
    mask = call.attn_mask
    if mask is not None:
        if mask.dim() >= 2 and mask.shape[-2] != 1:
            # One row per query: the last query's (none when there is no query).
            row = mask[..., queries - 1, :] if queries > 0 else None
        elif mask.dim() >= 2:
            row = mask[..., 0, :]  # one row for every query
        else:
            row = mask.reshape(1) if mask.dim() == 0 else mask
        if row is None:
            reads &= False
        else:
            ok = row if row.dtype == torch.bool else row > torch.finfo(row.dtype).min
            reads &= ok.reshape(-1, ok.shape[-1]).all(dim=0).expand(keys)
    block_mask = call.block_mask
    if block_mask is not None and getattr(block_mask, "mask_mod", None) is not None:
        batch = int(call.query_shape[0]) if len(call.query_shape) >= 4 else 1
        heads = int(call.query_shape[1]) if len(call.query_shape) >= 4 else 1
        if queries == 0:
            reads &= False
        else:
            q_index = torch.tensor(queries - 1)
            for b in range(batch):
                for h in range(heads):
                    allowed = block_mask.mask_mod(torch.tensor(b), torch.tensor(h), q_index, key_index)
                    reads &= torch.as_tensor(allowed, dtype=torch.bool).expand(keys)
    return reads.tolist()


def copy(tensor: Any) -> Any:
    return None if tensor is None else tensor.detach().clone()


SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
FLEX_PARAMETERS = ("query", "key", "value", "score_mod", "block_mask")


def arguments(names: Sequence[str], args: Sequence, kwargs: dict) -> dict:
    bound = dict(zip(names, args))
    bound.update((name, kwargs[name]) for name in names if name in kwargs)
    return bound


def sdpa_mode(torch: Any, tap: AttentionTap) -> Any:
    """A TorchFunctionMode that records every scaled_dot_product_attention."""
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Sequence = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            if func is sdpa or func is torch.nn.functional.scaled_dot_product_attention:
                bound = arguments(SDPA_PARAMETERS, args, kwargs)
                tap.record(
                    Call(
                        "sdpa",
                        tuple(bound["query"].shape),
                        copy(bound["key"]),
                        copy(bound["value"]),
                        attn_mask=copy(bound.get("attn_mask")),
                        is_causal=bool(bound.get("is_causal", False)),
                    )
                )
            return func(*args, **kwargs)

    return Recorder()


def flex_module() -> Any:
    """torch.nn.attention.flex_attention, or None where this torch has none."""
    try:
        from torch.nn.attention import flex_attention as module
    except ImportError:
        return None
    return module


def flex_wrapper(tap: AttentionTap, original: Callable) -> Callable:
    def flex_attention(*args: Any, **kwargs: Any) -> Any:
        bound = arguments(FLEX_PARAMETERS, args, kwargs)
        tap.record(
            Call(
                "flex",
                tuple(bound["query"].shape),
                copy(bound["key"]),
                copy(bound["value"]),
                block_mask=bound.get("block_mask"),
                score_mod=bound.get("score_mod"),
            )
        )
        return original(*args, **kwargs)

    flex_attention.__wrapped__ = original  # type: ignore[attr-defined]
    return flex_attention


class TappedSubject(Subject):
    """A `kvcheck.Subject` answered by attention: `write` runs the
    subclass's `forward(start, length, k, v)` (the pipeline's forward for
    that chunk, which raises to refuse) inside the tap, and returns the
    positions and K/V that the write's last attention call read.

    The subclass builds its pipeline in `open(config)` (calling
    `self.tap.forget()`), registers the rows the pipeline produces (an
    explicit `self.tap.produced(...)` or a `self.tap.watch(module, ...)`
    hook) and defines whatever else it supports (`reset` usually forgets
    the rows too). A key that matches no produced row is raised as
    `UnknownRows` (the cache's failure, an exception to kvcheck); rows of
    two positions with the same bytes are the adapter's failure
    (`AdapterError`)."""

    arrays = "torch"
    variants = ("dense",)

    def __init__(self) -> None:
        self.tap = AttentionTap()

    def forward(self, start: int, length: int, k: Any, v: Any) -> None:
        raise NotImplementedError("%s must define forward(start, length, k, v)" % type(self).__name__)

    def write(self, start: int, length: int, heads: Any, recent_window: Any, k: Any, v: Any) -> tuple:
        if heads is not None or recent_window is not None:
            raise AdapterError("%s writes every head without a recent window" % type(self).__name__)
        if start < 0 or length < 0:
            raise Refused("invalid_argument", "write %d+%d" % (start, length))
        self.tap.begin_step()
        self.tap.clear_calls()
        self.outputs = None
        with self.tap:
            self.outputs = self.forward(start, length, k, v)
        if not self.tap.calls:
            raise AdapterError("write %d+%d ran no attention call the tap could see" % (start, length))
        seen = self.tap.observe()
        if seen.ambiguous:
            raise AdapterError(
                "rows are not byte-distinct: %s" % ", ".join(repr(key) for key in seen.ambiguous)
            )
        if seen.unknown:
            raise UnknownRows(seen)
        return seen.view()


class RecomputeSubject(TappedSubject):
    """A pipeline's cache-free path as a subject: the judge of its cached
    path when the cache's contract is not kvcheck's.

    Many pipelines can compute a chunk without their cache: a block-causal
    mask over the whole sequence (the Self-Forcing family's training
    forward), or a full forward. A `RecomputeSubject` keeps no cache, only
    each position's latest inputs (`history`: position -> the write's K and
    V rows, `[B, 1, H, D]`), and answers a write by recomputing the chunk
    over every kept position at once: `recompute(start, k, v, keys, k_rows,
    v_rows, end)` runs that path (the chunk's rows `k`, `v`; the kept
    positions `keys`, ascending, their rows stacked; `end` the global end
    after the write) and returns the chunk's output. The visible positions
    and K/V are what its last attention call read, as for any
    `TappedSubject`, so the subclass registers the rows it produces (the
    positions may be any list: `tap.produced(keys, k, v)`).

    `reads(position, end)` is the pipeline's mask as a rule: whether a
    chunk that brings the global end to `end` reads `position` (default:
    every position, full attention). After each write the positions no
    later chunk can read (`reads(position, end)` false, the end only
    growing) are forgotten, as a cache forgets an evicted row: a rewind
    does not bring them back.

    Writes must start at or before the global end (else `non_sequential`),
    may not rewrite a forgotten position (`evicted`) and must keep every
    row they write (else `chunk_too_large`: a chunk wider than the mask's
    window); `rewind(to)`
    forgets the positions from `to` on, `reset()` all of them. Served on
    its own it is the differential oracle of the cached subject
    (`kvcheck run --subject exec:CACHED --oracle exec:RECOMPUTE`: same
    positions, same K/V bytes, same refusals); `Recompared` also compares
    the outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict = {}
        self.end = 0

    def open(self, config: dict) -> None:
        self.history = {}
        self.end = 0
        self.tap.forget()
        self.build(config)

    def build(self, config: dict) -> None:
        """Builds the pipeline for `config` (required)."""
        raise NotImplementedError("%s must define build(config)" % type(self).__name__)

    def reads(self, position: int, end: int) -> bool:
        return True

    def recompute(self, start: int, k: Any, v: Any, keys: list, k_rows: Any, v_rows: Any, end: int) -> Any:
        raise NotImplementedError("%s must define recompute(...)" % type(self).__name__)

    def forward(self, start: int, length: int, k: Any, v: Any) -> Any:
        torch = import_torch()
        if start > self.end:
            raise Refused("non_sequential", "write starts at %d but the global end is %d" % (start, self.end))
        if k is None or v is None:
            raise AdapterError("write %d+%d came without a payload" % (start, length))
        gone = [p for p in range(start, min(start + length, self.end)) if p not in self.history]
        if gone:
            raise Refused("evicted", "positions %s are no longer kept" % kvranges(gone))
        end = max(self.end, start + length)
        dropped = [p for p in range(start, start + length) if not self.reads(p, end)]
        if dropped:
            # A cache cannot forget rows of the chunk it is writing.
            raise Refused("chunk_too_large", "positions %s of the chunk would not be kept" % kvranges(dropped))
        for offset in range(length):
            self.history[start + offset] = (k[:, offset : offset + 1], v[:, offset : offset + 1])
        self.end = max(self.end, start + length)
        for position in [p for p in self.history if not self.reads(p, self.end)]:
            del self.history[position]
        keys = sorted(self.history)
        if keys:
            k_rows = torch.cat([self.history[p][0] for p in keys], dim=1)
            v_rows = torch.cat([self.history[p][1] for p in keys], dim=1)
        else:
            k_rows, v_rows = k[:, :0], v[:, :0]
        return self.recompute(start, k, v, keys, k_rows, v_rows, self.end)

    def rewind(self, to: int) -> None:
        if to < 0:
            raise Refused("invalid_argument", "rewind to %d" % to)
        if to > self.end:
            raise Refused("rewind_ahead", "rewind to %d is past the global end %d" % (to, self.end))
        for position in [p for p in self.history if p >= to]:
            del self.history[position]
        self.end = to

    def reset(self) -> None:
        self.history = {}
        self.end = 0
        self.tap.forget()

    @property
    def global_end(self) -> int:
        return self.end


class RecomputeMismatch(RuntimeError):
    """The cached path read other rows, or gave other outputs, than its
    cache-free recompute: the cache's failure (`Recompared`)."""


# (rtol, atol) for outputs: the cached path and the recompute attend the same
# rows in another order and shape, so their sums round differently.
OUTPUT_TOLERANCE = {"f32": (1e-4, 1e-5), "f16": (1e-2, 1e-3), "bf16": (5e-2, 1e-2)}


class Recompared(Subject):
    """A cached `TappedSubject` checked against its `RecomputeSubject`, op by
    op, in one process: every op goes to both, and the cached path's answer
    is returned when both agree on it. They must accept the same ops, end
    at the same global end, read the same positions (as multisets: the key
    order of attention does not matter) with the same K/V rows, and give
    the same chunk outputs within the dtype's tolerance
    (`OUTPUT_TOLERANCE`, or `rtol`/`atol`). A difference raises
    `RecomputeMismatch`, which kvcheck reports as the cache's exception
    under any oracle, so every engine (run, explore, minimize, the
    relations) judges the cache by its recompute. An op the cached path
    refuses or raises on is passed on without running the recompute, which
    then still holds the state before it; the ops offered are those both
    define."""

    arrays = "torch"

    def __init__(self, cached: TappedSubject, recompute: RecomputeSubject,
                 rtol: float | None = None, atol: float | None = None) -> None:
        self.cached, self.recompute = cached, recompute
        self.rtol, self.atol = rtol, atol
        self.name = "%s against its recompute" % (cached.name or type(cached).__name__)
        self.variants = tuple(x for x in cached.variants if x in recompute.variants)
        self.dtypes = tuple(x for x in cached.dtypes if x in recompute.dtypes)
        self.features = tuple(x for x in cached.features if x in recompute.features)
        self.reports = cached.reports
        self.ops = tuple(op for op in ("rewind", "evict", "pin", "reset") if defines(cached, op) and defines(recompute, op))
        self.dtype = "f32"

    def open(self, config: dict) -> None:
        self.dtype = config["dtype"]
        self.cached.open(config)
        self.recompute.open(config)

    def write(self, start: int, length: int, heads: Any, recent_window: Any, k: Any, v: Any) -> tuple:
        answer = self.cached.write(start, length, heads, recent_window, k, v)
        op = "write %d+%d" % (start, length)
        try:
            expected = self.recompute.write(start, length, heads, recent_window, k, v)
        except Refused as refusal:
            raise RecomputeMismatch("%s: the cached path accepts it, the recompute refuses it (%s)" % (op, refusal))
        self.compare_ends(op)
        self.compare_views(op, answer, expected)
        self.compare_outputs(op, self.cached.outputs, self.recompute.outputs)
        return answer

    def rewind(self, to: int) -> None:
        self.both("rewind to %d" % to, lambda side: side.rewind(to))

    def evict(self, tokens: int) -> None:
        self.both("evict %d" % tokens, lambda side: side.evict(tokens))

    def pin(self, tokens: int) -> None:
        self.both("pin %d" % tokens, lambda side: side.pin(tokens))

    def reset(self) -> None:
        self.both("reset", lambda side: side.reset())

    def both(self, op: str, apply: Callable[[Subject], None]) -> None:
        apply(self.cached)
        try:
            apply(self.recompute)
        except Refused as refusal:
            raise RecomputeMismatch("%s: the cached path accepts it, the recompute refuses it (%s)" % (op, refusal))
        self.compare_ends(op)

    def compare_ends(self, op: str) -> None:
        if self.cached.global_end != self.recompute.global_end:
            raise RecomputeMismatch(
                "%s: the cached path's global end is %d, the recompute's %d"
                % (op, self.cached.global_end, self.recompute.global_end)
            )

    def compare_views(self, op: str, answer: tuple, expected: tuple) -> None:
        torch = import_torch()
        positions, k, v = answer
        want, k_want, v_want = expected
        if sorted(positions) != sorted(want):
            raise RecomputeMismatch(
                "%s: the cached path reads positions %s, the recompute %s"
                % (op, kvranges(positions, sort=False), kvranges(want, sort=False))
            )
        rows = {p: i for i, p in enumerate(want)}
        order = torch.tensor([rows[p] for p in positions], dtype=torch.long)
        for name, got, wanted in (("K", k, k_want), ("V", v, v_want)):
            wanted = wanted.index_select(1, order)
            if not self.close(got, wanted):
                raise RecomputeMismatch(
                    "%s: the cached path reads other %s rows than the recompute (max |difference| %g)"
                    % (op, name, float((got.float() - wanted.float()).abs().max()))
                )

    def compare_outputs(self, op: str, got: Any, wanted: Any) -> None:
        if got is None or wanted is None:
            if got is not wanted:
                raise AdapterError("%s: only one path returned outputs" % op)
            return
        if tuple(got.shape) != tuple(wanted.shape):
            raise RecomputeMismatch(
                "%s: outputs of shape %s, the recompute's %s" % (op, list(got.shape), list(wanted.shape))
            )
        if not self.close(got, wanted):
            rtol, atol = self.tolerance()
            raise RecomputeMismatch(
                "%s: the outputs differ from the recompute's by up to %g (tolerance %g + %g * |recompute|)"
                % (op, float((got.float() - wanted.float()).abs().max()), atol, rtol)
            )

    def tolerance(self) -> tuple:
        rtol, atol = OUTPUT_TOLERANCE[self.dtype]
        return (rtol if self.rtol is None else self.rtol, atol if self.atol is None else self.atol)

    def close(self, got: Any, wanted: Any) -> bool:
        torch = import_torch()
        rtol, atol = self.tolerance()
        if tuple(got.shape) != tuple(wanted.shape):
            return False
        return bool(torch.allclose(got.float(), wanted.float(), rtol=rtol, atol=atol))

    @property
    def global_end(self) -> int:
        return self.cached.global_end

    @property
    def capacity(self) -> int:
        return self.cached.capacity

    @property
    def resident_bytes(self) -> int:
        return self.cached.resident_bytes


def kvranges(positions: Sequence[int], sort: bool = True) -> str:
    """Positions as runs, `0..2 5..6` (kvcheck's notation: `a..b` holds a to b-1)."""
    items = sorted(positions) if sort else list(positions)
    runs: list = []
    for p in items:
        if runs and p == runs[-1][1]:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    return " ".join("%d..%d" % (a, b) for a, b in runs) or "-"


__all__ = [
    "AttentionTap",
    "Call",
    "Key",
    "LayerMismatch",
    "Observation",
    "Recompared",
    "RecomputeMismatch",
    "RecomputeSubject",
    "TappedSubject",
    "UnknownRows",
    "import_torch",
]
