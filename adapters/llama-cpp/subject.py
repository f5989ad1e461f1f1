#!/usr/bin/env python3
"""llama.cpp's KV cache (through llama-cpp-python) as a kvcheck-subject/1 process.

Drives a tiny randomly initialised GGUF model (tinymodel.py, written at
start-up, no download) with llama.cpp's own calls, through llama_cpp's
low-level bindings, the way an application using the C API does
(llama-server's context shift, speculative decoding's rollback):

| kvtrace op | llama.cpp calls (one sequence per batch row b) |
|---|---|
| open | `llama_init_from_model` with `n_seq_max = B`, `kv_unified = false` (a stream of its own per sequence), `type_k = type_v` = the config dtype, `n_ctx` = B times the capacity rounded up to 256 (llama.cpp pads it) |
| write `G+n` (append) | one `llama_decode` of a batch holding, for every b, n tokens of sequence b at the next positions |
| write `s+n`, `s < G` (rewrite) | `llama_memory_seq_rm(mem, b, p(s), -1)`, then `llama_decode` of the new tokens and of the resident tokens after `s+n` again (the batch API takes consecutive positions only) |
| a write past the capacity, `evict k` | the context shift: `llama_memory_seq_rm(mem, b, n_keep, n_keep + k)`, `llama_memory_seq_add(mem, b, n_keep + k, -1, -k)`, with `n_keep` the resident sink tokens and `k` the contract's count |
| rewind `to` | `llama_memory_seq_rm(mem, b, p(to), -1)` |
| reset | `llama_memory_clear(mem, true)` |
| write `s+0` (probe), view | no call but the read below |

Positions. llama.cpp numbers a sequence's cells 0, 1, 2, ... and the
context shift renumbers them (seq_add), so a cell's position is its rank
among the resident tokens, not the stream position. The adapter keeps the
stream positions it decoded, in order, and maps a cell's position p to the
p-th of them.

What is read back. After every op the adapter reads each sequence's state
with `llama_state_seq_get_data` and parses it (a magic and the sequence
id, then the format of `llama_kv_cache::state_write` in the vendored `src/llama-kv-cache.cpp`:
streams, cells with their positions and sequences, then per layer the K
rows and the V rows, V possibly transposed). For a sliding-window model
the state leaves out the cells the window masks for the sequence's last
position, so it holds what the next query reads. The cells of layer 0 are
the view: layer 0's K and V depend on a cell's token and position only.

Payloads. The model computes K and V from tokens, so a payload row cannot
be stored as such: every payload row (one batch row, one position, all
heads) is given a token of its own, and a cell's token is recognised from
its layer-0 V row (nearest of the vocabulary's, within a tolerance), then
its K row is checked against that token's K rotated to the cell's
position (RoPE computed here, within a tolerance; this is what checks the
K shift of the context shift). The view returns, for each visible cell,
the payload row that token was given. So the bytes kvcheck compares say
which token each cell holds and at which position; a cell whose rows match
no written token, or whose K is rotated for another position, is answered
as an exception (`UnknownRows`, `KRotation`).

With `--check-logits` (the one-layer llama model) every decode is also
checked against a cache-free oracle: a second context decodes each
sequence's resident tokens afresh at positions 0..n-1, and the next-token
logits must agree within the tolerance (`LogitsMismatch`). With one layer
the cache is a function of tokens and positions, so this is exactly the
relation "the cache after seq_rm + seq_add equals a fresh decode of the
kept tokens at the shifted positions", through attention and V too.

After every op llama.cpp's own bookkeeping is compared too:
`llama_memory_seq_pos_max` must be the number of resident tokens minus
one (`PositionMismatch` otherwise), and every batch row must show the
same positions (`BatchRowsDisagree`).

Left out of `hello`: `pin` (no such call), head ranges (a token writes
every head), recent windows (a model's window is fixed), growth, the
global sink and the packed variant. A write past the global end has no
call (the batch API takes consecutive positions only), nor has a rewrite
of a token the context shift dropped, nor a rewind outside `[0, G]`: they
are answered as outside the adapter's domain (`kvcheck.Outside`: kvcheck
cuts the case there), changing nothing. A write
that cannot fit, or an evict of more than the evictable tokens, is what an
application refuses before calling llama.cpp (`ContextFull`).

    adapters/llama-cpp/.venv/bin/python adapters/llama-cpp/subject.py [--arch llama|gemma2] [--layers N]
        [--flash-attn on|off] [--swa-full] [--dtypes f32,f16,bf16] [--settle-shift] [--check-logits]
"""

import bisect
import ctypes
import struct
import sys
import tempfile

import kvcheck
from kvcheck import adapter as kit

import tinymodel

STATE_MAGIC = 0xAF143CD8  # io_magic of src/llama-context.cpp
GGML_TYPES = {"f32": 0, "f16": 1, "bf16": 30}
# Relative tolerance of a recognised row: f32 rows differ from the numpy
# tables by summation order only; half-precision caches round every value,
# and each context shift re-rounds the rotated K.
TOLERANCE = {"f32": 1e-3, "f16": 2e-2, "bf16": 6e-2}



class ContextFull(Exception):
    """What an application refuses before calling llama.cpp: the write does
    not fit next to the kept tokens, or there are not that many tokens to
    discard."""


class DecodeError(Exception):
    """`llama_decode` returned non-zero."""


class UnknownRows(Exception):
    """A cell whose layer-0 rows are those of no token written in this case."""


class KRotation(Exception):
    """A cell whose K row is its token's, rotated for another position."""


class PositionMismatch(Exception):
    """llama.cpp's own positions of a sequence disagree with the tokens decoded."""


class LogitsMismatch(Exception):
    """--check-logits: the next-token logits differ from a fresh decode of the resident tokens."""


class BatchRowsDisagree(Exception):
    """Two sequences (batch rows) driven alike show different cells."""


def ggml_rows(data, ggml_type, count, width):
    """`count` rows of `width` values of a ggml type, as float64."""
    import numpy as np

    if ggml_type == 0:
        out = np.frombuffer(data, dtype="<f4", count=count * width)
    elif ggml_type == 1:
        out = np.frombuffer(data, dtype="<f2", count=count * width)
    elif ggml_type == 30:
        bits = np.frombuffer(data, dtype="<u2", count=count * width).astype(np.uint32) << 16
        out = bits.view(np.float32)
    else:
        raise kvcheck.AdapterError("cache type %d is not f32, f16 or bf16" % ggml_type)
    return out.astype(np.float64).reshape(count, width)


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def raw(self, n):
        out = self.data[self.at : self.at + n]
        if len(out) != n:
            raise kvcheck.AdapterError("sequence state ends early (%d bytes short)" % (n - len(out)))
        self.at += n
        return out


def parse_cache(reader, width):
    """One `llama_kv_cache::state_write` for one sequence: a list of
    (positions, [(K rows, V rows) per layer]) per non-empty stream."""
    streams = []
    for _ in range(reader.take("I")):
        cells = reader.take("I")
        if cells == 0:
            continue
        positions = []
        for _ in range(cells):
            pos, n_seq = reader.take("iI")
            reader.raw(4 * n_seq)
            positions.append(pos)
        v_trans, n_layer = reader.take("II")
        keys = []
        for _ in range(n_layer):
            k_type, row = reader.take("iQ")
            keys.append(ggml_rows(reader.raw(row * cells), k_type, cells, width))
        values = []
        for _ in range(n_layer):
            if not v_trans:
                v_type, row = reader.take("iQ")
                values.append(ggml_rows(reader.raw(row * cells), v_type, cells, width))
            else:
                v_type, size, n_embd = reader.take("iII")
                values.append(ggml_rows(reader.raw(size * cells * n_embd), v_type, n_embd, cells).T.copy())
        streams.append((positions, list(zip(keys, values))))
    return streams


class Runtime:
    """llama_cpp and the tiny models, loaded once per process."""

    def __init__(self):
        import llama_cpp
        import numpy

        self.ll, self.np = llama_cpp, numpy
        self.directory = tempfile.mkdtemp(prefix="kvcheck-llama-cpp-")
        self.models = {}

        # llama.cpp logs every load and context to stderr; keep its errors only.
        @llama_cpp.llama_log_callback
        def log(level, text, _user):
            if level == 4 and text:  # GGML_LOG_LEVEL_ERROR
                sys.stderr.write(text.decode("utf-8", "replace"))

        self._log = log
        llama_cpp.llama_log_set(log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()

    def model(self, arch, layers, window):
        key = (arch, layers, window)
        if key not in self.models:
            tiny = tinymodel.build(self.directory, arch, layers, window)
            params = self.ll.llama_model_default_params()
            params.use_mmap = False
            handle = self.ll.llama_model_load_from_file(tiny.path.encode(), params)
            if not handle:
                raise RuntimeError("llama_model_load_from_file refused %s" % tiny.path)
            self.models[key] = (tiny, handle)
        return self.models[key]


class LlamaCpp(kvcheck.Subject):
    variants = ("dense",)
    dtypes = ("f32", "f16", "bf16")
    ops = ("write", "rewind", "evict", "reset")

    def __init__(self, arch="llama", layers=None, flash_attn=False, swa_full=False, dtypes=None, settle_shift=False,
                 check_logits=False):
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("llama_cpp_python")
        except PackageNotFoundError:
            raise ImportError("llama-cpp-python is needed: run adapters/llama-cpp/setup.sh and use its venv")
        self.arch = arch
        self.layers = layers or (1 if arch == "llama" else 2)
        self.flash_attn = flash_attn
        self.swa_full = swa_full
        self.settle_shift = settle_shift
        self.check_logits = check_logits
        if check_logits and (arch != "llama" or self.layers != 1):
            raise ValueError("--check-logits needs the one-layer llama model (its cache is a function of tokens and positions)")
        if dtypes:
            self.dtypes = tuple(dtypes)
        self.features = ("window",) if arch == "gemma2" else ()
        parts = ["llama-cpp-python", release, arch, "%d layers" % self.layers, "flash-attn " + ("on" if flash_attn else "off")]
        if swa_full:
            parts.append("swa-full")
        if dtypes:
            parts.append("dtypes " + ",".join(dtypes))
        if settle_shift:
            parts.append("settle-shift")
        if check_logits:
            parts.append("check-logits")
        self.name = " ".join(parts)
        self.rt = None
        self.ctx = None
        self.fresh = None
        self.config = None

    @classmethod
    def from_args(cls, argv):
        parser = kit.parser(__doc__)
        parser.add_argument("--arch", choices=tinymodel.ARCHS, default="llama",
                            help="llama (full attention; default) or gemma2 (layer 0 slides over the config's window)")
        parser.add_argument("--layers", type=int, default=None, help="layers of the tiny model (default 1 for llama, 2 for gemma2)")
        parser.add_argument("--flash-attn", choices=("on", "off"), default="off", help="flash attention (off: V is stored transposed)")
        parser.add_argument("--swa-full", action="store_true", help="gemma2: size the sliding-window cache like the full one (swa_full; a cell the window masks is still reused)")
        parser.add_argument("--dtypes", default=None,
                            help="comma-separated cache dtypes to declare (default f32,f16,bf16)")
        parser.add_argument("--settle-shift", action="store_true",
                            help="after a context shift that no decode follows (evict), apply the pending K shift by"
                            " decoding one throwaway token in a spare sequence and removing it")
        parser.add_argument("--check-logits", action="store_true",
                            help="after every decode, compare each sequence's next-token logits with a fresh context"
                            " decoding its resident tokens at positions 0.. (one-layer llama model only)")
        args = parser.parse_args(argv)
        dtypes = None
        if args.dtypes:
            dtypes = args.dtypes.split(",")
            unknown = [d for d in dtypes if d not in GGML_TYPES]
            if unknown:
                parser.error("--dtypes: %s not one of %s" % (",".join(unknown), ",".join(GGML_TYPES)))
        if args.check_logits and (args.arch != "llama" or (args.layers or 1) != 1):
            parser.error("--check-logits needs --arch llama with one layer")
        return cls(args.arch, args.layers, args.flash_attn == "on", args.swa_full, dtypes, args.settle_shift,
                   args.check_logits)

    # -- lifecycle -------------------------------------------------------

    def open(self, config):
        if self.rt is None:
            self.rt = Runtime()
        self.close_context()
        self.config = None
        c = config
        if c.get("growth") or c.get("global_sink", 0) or c.get("variant", "dense") != "dense":
            raise kvcheck.Refused("invalid_config", "growth, global sinks and the packed variant have no llama.cpp counterpart")
        if c["dtype"] not in self.dtypes:
            raise kvcheck.Refused("invalid_config", "dtype %s is not among --dtypes %s" % (c["dtype"], ",".join(self.dtypes)))
        window = c.get("window")
        if window is None:
            window = c["capacity"]
        if self.arch == "llama" and window != c["capacity"]:
            raise kvcheck.Refused("invalid_config", "a full-attention model has no window below the capacity")
        self.tiny, model = self.rt.model(self.arch, self.layers, window if self.arch == "gemma2" else None)
        ll = self.rt.ll
        batch, capacity = c["batch"], c["capacity"]
        params = ll.llama_context_default_params()
        per_seq = -(-(capacity + 1) // 256) * 256
        # --settle-shift decodes its throwaway token in one more sequence.
        sequences = batch + (1 if self.settle_shift else 0)
        params.n_ctx = per_seq * sequences
        params.n_seq_max = sequences
        params.kv_unified = False
        # One ubatch holds a whole write of every sequence (a rewrite
        # re-decodes up to the capacity).
        params.n_batch = params.n_ubatch = max(32, batch * capacity)
        params.n_threads = params.n_threads_batch = 1
        params.type_k = params.type_v = GGML_TYPES[c["dtype"]]
        params.flash_attn_type = 1 if self.flash_attn else 0
        params.swa_full = self.swa_full
        params.no_perf = True
        ctx = ll.llama_init_from_model(model, params)
        if not ctx:
            raise kvcheck.Refused("invalid_config", "llama_init_from_model refused the context")
        self.ctx = ctx
        self.mem = ll.llama_get_memory(ctx)
        self.fresh = None
        if self.check_logits:
            # The cache-free oracle: one sequence, decoded afresh each time.
            fresh_params = ll.llama_context_default_params()
            fresh_params.n_ctx = per_seq
            fresh_params.n_batch = fresh_params.n_ubatch = max(32, capacity)
            fresh_params.n_threads = fresh_params.n_threads_batch = 1
            fresh_params.type_k = fresh_params.type_v = GGML_TYPES[c["dtype"]]
            fresh_params.flash_attn_type = params.flash_attn_type
            fresh_params.no_perf = True
            self.fresh = ll.llama_init_from_model(model, fresh_params)
            if not self.fresh:
                raise kvcheck.Refused("invalid_config", "llama_init_from_model refused the oracle context")
            self.fresh_batch = ll.llama_batch_init(fresh_params.n_batch, 0, 1)
        self.config = c
        self.tolerance = TOLERANCE[c["dtype"]]
        self.width = self.tiny.n_head_kv * self.tiny.head_dim
        self.batch = ll.llama_batch_init(params.n_batch, 0, 1)
        self.batch_size = params.n_batch
        self.clear_bookkeeping()

    def close_context(self):
        if self.fresh is not None:
            self.rt.ll.llama_batch_free(self.fresh_batch)
            self.rt.ll.llama_free(self.fresh)
            self.fresh = None
        if self.ctx is not None:
            self.rt.ll.llama_batch_free(self.batch)
            self.rt.ll.llama_free(self.ctx)
            self.ctx = None

    def clear_bookkeeping(self):
        b = self.config["batch"]
        self.order = []  # stream positions of the resident tokens, in cell-position order
        self.end = 0
        self.tokens = [dict() for _ in range(b)]  # per sequence: stream position -> token decoded
        self.rows = [dict() for _ in range(b)]  # per sequence: token -> (K row, V row) of its payload
        self.next_token = [self.tiny.first_token] * b

    @property
    def global_end(self):
        return self.end

    # -- ops -------------------------------------------------------------

    def write(self, start, length, heads, recent_window, k, v):
        if heads is not None or recent_window is not None:
            raise kvcheck.Outside("a token writes every head, and a model's window is fixed")
        if start < 0 or length < 0:
            raise kvcheck.Outside("start %d, len %d is no token range" % (start, length))
        if start > self.end:
            raise kvcheck.Outside("a write at %d past the end %d: llama_decode takes consecutive positions only" % (start, self.end))
        if length == 0:
            return self.read()
        resident = set(self.order)
        lost = [p for p in range(start, min(start + length, self.end)) if p not in resident]
        if lost:
            raise kvcheck.Outside("positions %s were discarded by a context shift: no cell to rewrite" % lost)
        c = self.config
        need = len(self.order) + max(0, start + length - self.end) - c["capacity"]
        if need > 0:
            keep = self.kept()
            evictable = [p for p in self.order[keep:] if p < start]
            if need > len(evictable):
                raise ContextFull(
                    "%d tokens do not fit: %d resident, capacity %d, %d discardable before %d"
                    % (length, len(self.order), c["capacity"], len(evictable), start)
                )
            self.shift(keep, need)
        suffix = []
        if start < self.end:
            first = self.order.index(start)
            suffix = [p for p in self.order[first:] if p >= start + length]
            for b in range(c["batch"]):
                if not self.rt.ll.llama_memory_seq_rm(self.mem, b, first, -1):
                    raise PositionMismatch("llama_memory_seq_rm(%d, %d, -1) refused" % (b, first))
            self.order = self.order[:first]
        new = list(range(start, start + length))
        tokens = []
        for b in range(c["batch"]):
            fresh = [self.assign(b, k[b, i], v[b, i]) for i in range(length)]
            tokens.append(fresh + [self.tokens[b][p] for p in suffix])
        self.decode(tokens)
        for b in range(c["batch"]):
            for p, t in zip(new, tokens[b]):
                self.tokens[b][p] = t
        self.order += new + suffix
        self.end = max(self.end, start + length)
        if self.fresh is not None:
            self.compare_logits(tokens)
        return self.read()

    def rewind(self, to):
        if to < 0 or to > self.end:
            raise kvcheck.Outside("rewind to %d outside [0, %d]: no cell position names it" % (to, self.end))
        first = bisect.bisect_left(self.order, to)
        for b in range(self.config["batch"]):
            if not self.rt.ll.llama_memory_seq_rm(self.mem, b, first, -1):
                raise PositionMismatch("llama_memory_seq_rm(%d, %d, -1) refused" % (b, first))
        self.order = self.order[:first]
        self.end = to
        self.check_positions()

    def evict(self, tokens):
        if tokens < 0:
            raise kvcheck.Outside("evict %d: no count of tokens" % tokens)
        keep = self.kept()
        if tokens > len(self.order) - keep:
            raise ContextFull("%d tokens to discard, %d after the %d kept" % (tokens, len(self.order) - keep, keep))
        if tokens:
            self.shift(keep, tokens)
            if self.settle_shift:
                self.settle()
        self.check_positions()

    def reset(self):
        self.rt.ll.llama_memory_clear(self.mem, True)
        self.clear_bookkeeping()
        self.check_positions()

    def view(self):
        return self.read()

    # -- llama.cpp calls -------------------------------------------------

    def kept(self):
        """n_keep of the context shift: the resident sink tokens."""
        return bisect.bisect_left(self.order, self.config["sink"])

    def shift(self, keep, discard):
        """llama-server's context shift, discarding `discard` tokens after the first `keep`."""
        ll = self.rt.ll
        for b in range(self.config["batch"]):
            if not ll.llama_memory_seq_rm(self.mem, b, keep, keep + discard):
                raise PositionMismatch("llama_memory_seq_rm(%d, %d, %d) refused" % (b, keep, keep + discard))
            ll.llama_memory_seq_add(self.mem, b, keep + discard, -1, -discard)
        self.order = self.order[:keep] + self.order[keep + discard :]

    def settle(self):
        """Applies the pending K shift: llama.cpp re-rotates shifted keys at
        the start of the next llama_decode, and the public API has no other
        call that does it, so decode one token in the spare sequence and
        remove it again."""
        ll, spare = self.rt.ll, self.config["batch"]
        batch = self.batch
        batch.token[0] = self.tiny.first_token
        batch.pos[0] = 0
        batch.n_seq_id[0] = 1
        batch.seq_id[0][0] = spare
        batch.logits[0] = 1
        batch.n_tokens = 1
        code = ll.llama_decode(self.ctx, batch)
        if code != 0:
            raise DecodeError("llama_decode of the settling token returned %d" % code)
        ll.llama_memory_seq_rm(self.mem, spare, -1, -1)

    def assign(self, b, k_row, v_row):
        """A token for one payload row of sequence b: the next one not resident."""
        live = set(self.tokens[b][p] for p in self.order)
        first, vocab = self.tiny.first_token, self.tiny.vocab
        token = self.next_token[b]
        for _ in range(vocab):
            if token not in live:
                break
            token = first + (token + 1 - first) % (vocab - first)
        else:
            raise kvcheck.AdapterError("no free token")
        self.next_token[b] = first + (token + 1 - first) % (vocab - first)
        self.rows[b][token] = (k_row.copy(), v_row.copy())
        return token

    def decode(self, tokens):
        """One llama_decode: tokens[b] for sequence b at its next cell positions."""
        batch, base = self.batch, len(self.order)
        n = 0
        for b, row in enumerate(tokens):
            for i, t in enumerate(row):
                if n >= self.batch_size:
                    raise kvcheck.AdapterError("a write of %d tokens exceeds the batch of %d" % (n + 1, self.batch_size))
                batch.token[n] = t
                batch.pos[n] = base + i
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = b
                batch.logits[n] = 1 if i == len(row) - 1 else 0
                n += 1
        batch.n_tokens = n
        code = self.rt.ll.llama_decode(self.ctx, batch)
        if code != 0:
            raise DecodeError("llama_decode returned %d" % code)

    def compare_logits(self, decoded):
        """The next-token logits of every sequence against a fresh context
        that decodes the sequence's resident tokens at positions 0..n-1: with
        one layer a cell's K/V depend on its token and position only, so a
        cache that holds the right cells at the right (shifted) positions
        gives the same logits, within rounding (and the K shift's)."""
        ll, np = self.rt.ll, self.rt.np
        vocab = self.tiny.vocab
        index = -1
        for b, row in enumerate(decoded):
            index += len(row)
            got = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, index), shape=(vocab,)).copy()
            ll.llama_memory_clear(ll.llama_get_memory(self.fresh), True)
            batch = self.fresh_batch
            resident = [self.tokens[b][p] for p in self.order]
            for i, t in enumerate(resident):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, i == len(resident) - 1
            batch.n_tokens = len(resident)
            code = ll.llama_decode(self.fresh, batch)
            if code != 0:
                raise DecodeError("llama_decode of the oracle context returned %d" % code)
            want = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.fresh, -1), shape=(vocab,))
            error = np.abs(got - want).max() / (np.abs(want).max() + 1e-6)
            if error > self.tolerance:
                raise LogitsMismatch(
                    "sequence %d: next-token logits differ from a fresh decode of its %d resident tokens by %.3g"
                    % (b, len(resident), error)
                )

    def check_positions(self):
        ll = self.rt.ll
        want = len(self.order) - 1
        for b in range(self.config["batch"]):
            got = ll.llama_memory_seq_pos_max(self.mem, b)
            if got != want:
                raise PositionMismatch(
                    "sequence %d: llama_memory_seq_pos_max is %d, %d tokens are resident" % (b, got, len(self.order))
                )

    def state(self, b):
        ll = self.rt.ll
        size = ll.llama_state_seq_get_size(self.ctx, b)
        buf = (ctypes.c_uint8 * size)()
        got = ll.llama_state_seq_get_data(self.ctx, buf, size, b)
        reader = Reader(bytes(buf[:got]))
        # llama_context::state_seq_get_data: a magic and the sequence id,
        # then the memory's state_write (an iSWA memory: two caches).
        magic, seq = reader.take("Ii")
        if magic != STATE_MAGIC or seq != b:
            raise kvcheck.AdapterError("sequence state header %#x %d, expected %#x %d" % (magic, seq, STATE_MAGIC, b))
        caches = []
        while reader.at < len(reader.data):
            caches.append(parse_cache(reader, self.width))
        return caches

    def layer0(self, caches):
        """(cell positions, K rows, V rows) of layer 0 in the parsed state,
        and the cell positions of the full-attention cache."""
        if self.arch == "gemma2":
            full, swa = caches  # llama_kv_cache_iswa writes kv_base, then kv_swa
            full_positions = [p for positions, _ in full for p in positions]
            streams = swa
        else:
            (streams,) = caches
            full_positions = None
        positions, keys, values = [], [], []
        for cell_positions, layers in streams:
            positions += cell_positions
            keys.append(layers[0][0])
            values.append(layers[0][1])
        np = self.rt.np
        if not positions:
            empty = np.zeros((0, self.width))
            return [], empty, empty, full_positions
        return positions, np.concatenate(keys), np.concatenate(values), full_positions

    def read(self):
        """The view: every sequence's layer-0 cells, recognised."""
        self.check_positions()
        np = self.rt.np
        c = self.config
        visible_rows = None
        k_view, v_view = [], []
        for b in range(c["batch"]):
            positions, keys, values, full = self.layer0(self.state(b))
            if full is not None and sorted(full) != list(range(len(self.order))):
                raise PositionMismatch("sequence %d: the full-attention layer holds cells %s, %d tokens are resident" % (b, sorted(full), len(self.order)))
            cells = []
            for j, pos in enumerate(positions):
                if not 0 <= pos < len(self.order):
                    raise PositionMismatch("sequence %d: a cell at position %d, %d tokens are resident" % (b, pos, len(self.order)))
                token = self.recognise(b, pos, keys[j], values[j])
                cells.append((self.order[pos], token))
            cells.sort()
            seen = [p for p, _ in cells]
            if visible_rows is None:
                visible_rows = seen
            elif seen != visible_rows:
                raise BatchRowsDisagree("sequence 0 shows %s, sequence %d shows %s" % (visible_rows, b, seen))
            shape = (c["heads"], c["head_dim"])
            k_view.append([self.rows[b][t][0].reshape(shape) for _, t in cells])
            v_view.append([self.rows[b][t][1].reshape(shape) for _, t in cells])
        dtype = kit.numpy_dtype(np, c["dtype"])
        shape = (c["batch"], len(visible_rows), c["heads"], c["head_dim"])
        k_out = np.array(k_view, dtype=dtype).reshape(shape)
        v_out = np.array(v_view, dtype=dtype).reshape(shape)
        return visible_rows, k_out, v_out

    def recognise(self, b, pos, k_row, v_row):
        """The token whose layer-0 rows cell `pos` of sequence b holds."""
        np, tiny = self.rt.np, self.tiny
        distances = np.linalg.norm(tiny.v0 - v_row, axis=1)
        token = int(np.argmin(distances))
        scale = np.linalg.norm(v_row) + 1e-6
        if distances[token] > self.tolerance * scale or token not in self.rows[b]:
            raise UnknownRows(
                "sequence %d, cell at position %d: V row matches no token written in this case (nearest %d at %.3g)"
                % (b, pos, token, distances[token] / scale)
            )
        expected = tiny.rope(tiny.k0[token][None, :], [pos])[0]
        error = np.linalg.norm(expected - k_row) / (np.linalg.norm(expected) + 1e-6)
        if error > self.tolerance:
            candidates = np.arange(0, 4 * max(len(self.order), 1) + 256)
            rotated = tiny.rope(np.repeat(tiny.k0[token][None, :], len(candidates), 0), candidates)
            best = int(candidates[np.argmin(np.linalg.norm(rotated - k_row, axis=1))])
            raise KRotation(
                "sequence %d, cell at position %d holds token %d with K rotated for position %d (error %.3g at %d)"
                % (b, pos, token, best, error, pos)
            )
        return token


if __name__ == "__main__":
    sys.exit(kit.main(__file__, "LlamaCpp"))
