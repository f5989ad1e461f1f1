//! Streaming attention KV caches on candle-core tensors.
//!
//! Three caches implement the contract of `docs/contract.md` behind one trait,
//! [`KvCache`]:
//!
//! - [`DenseCache`]: preallocated `[B, C, H, D]` K and V buffers, in-place
//!   writes, in-place rolls, sinks, pins, growth and head ranges
//!   (docs/contract.md §2–§5).
//! - [`RingCache`]: the same contract on the same buffers, but history
//!   never moves: protected positions stay in their slots, the others form
//!   a ring, an append writes only its own rows, and views are
//!   [`SegmentedView`]s of zero-copy pieces, built from device-generic
//!   candle ops only.
//! - [`PackedCache`]: per-chunk storage whose cold chunks are kept as int8 /
//!   int4 codes with one f32 scale per row (docs/contract.md §6).
//!
//! And one prefix cache (docs/contract.md Part II) behind its own trait,
//! [`PrefixCache`]:
//!
//! - [`PagedCache`]: a `[L, N·B, D]` block pool, block tables, a prefix
//!   index that compares tokens, reference counts, the LRU of §14, copy
//!   on write and merging, in lockstep with `kvmodel::prefix::PrefixModel`.
//!
//! Each refuses what the contract refuses, with the same error kind as the
//! reference model in `kvmodel` ([`ErrorKind`], or the prefix family's
//! `PrefixError`), and leaves its state untouched when it does. The
//! `kvcheck` harness proves that op by op for the streaming caches, and the
//! lockstep suite of `tests/caches/paged.rs` for the prefix cache.
//!
//! [`ErrorKind`]: kvmodel::ErrorKind

use std::marker::PhantomData;

use candle_core::{DType, Tensor};
use kvmodel::{CacheError, Config, Dtype, ErrorKind, Write};

pub mod attention;
mod contract;
pub mod dense;
#[cfg(feature = "faults")]
pub mod fault;
pub mod packed;
pub mod paged;
pub mod path;
pub mod quant;
mod ranges;
pub mod ring;
pub mod segments;

pub use dense::DenseCache;
pub use packed::PackedCache;
pub use paged::{PagedCache, PrefixCache, PrefixCacheError};
pub use path::{Path, UnknownPath};
pub use ring::RingCache;
pub use segments::{Segment, SegmentedView, Segments};

/// Errors of the caches: a contract refusal (docs/contract.md §3), or a request the
/// contract does not cover (a payload of the wrong shape, a tensor backend
/// failure). Every error leaves the cache exactly as it was.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operation is refused by the contract; carries the docs/contract.md kind.
    #[error(transparent)]
    Contract(#[from] CacheError),
    /// The K or V payload does not match the write.
    #[error("{tensor} payload has shape {actual:?} and dtype {actual_dtype:?}, the write needs shape {expected:?} and dtype {expected_dtype:?}")]
    Payload {
        /// `"k"` or `"v"`.
        tensor: &'static str,
        /// The shape the write needs: `[B, len, heads written, D]`.
        expected: Vec<usize>,
        /// The shape given.
        actual: Vec<usize>,
        /// The cache dtype.
        expected_dtype: DType,
        /// The dtype given.
        actual_dtype: DType,
    },
    /// The destination of a view's materialization has the wrong shape,
    /// dtype or device, or is not contiguous; it was not written.
    #[error("destination: {reason}")]
    Destination {
        /// What the view needs and what was given.
        reason: String,
    },
    /// The tensor backend failed (allocation, device error).
    #[error("tensor backend: {0}")]
    Backend(#[from] candle_core::Error),
    /// An implementation outside this crate failed in its own way (a
    /// cache in another process that crashed or answered nonsense, another
    /// crate's own error). Harnesses may downcast it to their own type.
    #[error(transparent)]
    External(Box<dyn std::error::Error + Send + Sync>),
    /// The request lies outside the domain the implementation serves: a
    /// call its callers never make (a pipeline that only ever appends and
    /// re-denoises its latest chunk has no answer for a gap). Not a refusal
    /// of the contract and not a failure: a harness stops judging the case
    /// at this op, and the implementation must be left as it was.
    #[error("outside the implementation's domain: {reason}")]
    Outside {
        /// Why the request is outside, in the implementation's words.
        reason: String,
    },
    /// The implementation has no such operation (the trait's default for
    /// `view`, `rewind`, `evict` and `pin`): a harness that asks for it
    /// was told the cache has it.
    #[error("this cache does not implement {op}: leave it out of the ops it declares")]
    Unimplemented {
        /// The operation.
        op: &'static str,
    },
}

impl Error {
    /// The docs/contract.md kind, for contract refusals and for a payload of the
    /// wrong shape or dtype (`invalid_argument`, docs/contract.md §7: checked after
    /// every contract check, so a request the contract refuses keeps its
    /// own kind). Backend and external failures have none.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Contract(e) => Some(e.kind()),
            Error::Payload { .. } => Some(ErrorKind::InvalidArgument),
            _ => None,
        }
    }
}

/// The result type of cache operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The visible window returned by a write or [`KvCache::view`].
///
/// `k` and `v` have shape `[B, positions.len(), heads reported, D]` and hold
/// the rows of `positions`, in that ascending order. They may share storage
/// with the cache's buffers (a zero-copy `narrow`), so the view borrows the
/// cache: it is valid until the next call that mutates the cache, and the
/// borrow checker enforces that. Copy the tensors (`Tensor::copy`) to keep
/// them longer.
#[derive(Debug)]
pub struct View<'cache> {
    /// The global end after the operation.
    pub global_end: u64,
    /// Visible global positions, ascending.
    pub positions: Vec<u64>,
    /// Keys, `[B, len, heads, D]`.
    pub k: Tensor,
    /// Values, `[B, len, heads, D]`.
    pub v: Tensor,
    /// Whether `k` / `v` are views of the cache's storage rather than copies.
    pub zero_copy: bool,
    _cache: PhantomData<&'cache ()>,
}

impl<'cache> View<'cache> {
    /// Assembles a view; `zero_copy` says whether the tensors alias storage.
    pub fn new(
        global_end: u64,
        positions: Vec<u64>,
        k: Tensor,
        v: Tensor,
        zero_copy: bool,
    ) -> View<'cache> {
        View {
            global_end,
            positions,
            k,
            v,
            zero_copy,
            _cache: PhantomData,
        }
    }
}

/// What one storage slot of a cache holds, for explanations and for the
/// explorer's state fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Unused.
    Free,
    /// A full-precision row of this position.
    Hot(u64),
    /// A cold (quantized or moved) row of this position.
    Cold(u64),
}

/// Where a ring-laid-out cache ([`RingCache`]) stands: the slots its
/// oldest and next rows go to and where its positions wrap around the
/// buffer, for explanations and fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingLayout {
    /// Slot of the oldest evictable resident position, if any.
    pub head: Option<usize>,
    /// Slot the next append starts at (it skips occupied slots).
    pub tail: usize,
    /// The first resident position stored below its predecessor's slot:
    /// where the ring wraps from the top of the buffer back to the bottom.
    pub wrap: Option<u64>,
}

/// A cache's storage layout: its slots in storage order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Slots in storage order.
    pub slots: Vec<Slot>,
}

/// The storage a cache may report beside the contract's outcomes: what
/// docs/contract.md §3 step 7 (growth) and §6 (resident bytes) say it
/// holds, and its slots. A [`KvCache`] that implements it and returns
/// `Some(self)` from [`KvCache::internals`] has them compared after every
/// op; one that does not is judged on its outcomes, global end and views
/// alone.
pub trait Internals {
    /// The current capacity `C` (grows with `growth`).
    fn capacity(&self) -> usize;
    /// Bytes held for K and V (docs/contract.md §6's formula).
    fn resident_bytes(&self) -> u64;
    /// The storage layout, slot by slot.
    fn layout(&self) -> Layout;
}

/// The operations of docs/contract.md §3 on an optimized cache.
///
/// Every method either succeeds with the outcome the contract gives, or
/// fails and leaves the cache exactly as it was.
pub trait KvCache {
    /// The configuration the cache was built with.
    fn config(&self) -> &Config;
    /// The global end `G`.
    fn global_end(&self) -> u64;
    /// docs/contract.md §3 `write`. `k` and `v` have shape `[B, len, heads written, D]`
    /// in the cache dtype on the cache device.
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>>;
    /// The view of the current state without a recent window (docs/contract.md §4),
    /// all heads. Read-only; available on every variant (the packed variant
    /// refuses zero-length writes, so the harness probes it with this).
    /// The default: [`Error::Unimplemented`], for a cache read only
    /// through its writes.
    fn view(&self) -> Result<View<'_>> {
        Err(Error::Unimplemented { op: "view" })
    }
    /// docs/contract.md §3 `rewind`; returns the new global end. The
    /// default: [`Error::Unimplemented`].
    fn rewind(&mut self, to: i64) -> Result<u64> {
        let _ = to;
        Err(Error::Unimplemented { op: "rewind" })
    }
    /// docs/contract.md §3 `evict`; returns the global end. The default:
    /// [`Error::Unimplemented`].
    fn evict(&mut self, tokens: i64) -> Result<u64> {
        let _ = tokens;
        Err(Error::Unimplemented { op: "evict" })
    }
    /// docs/contract.md §3 `pin`; returns the global end. The default:
    /// [`Error::Unimplemented`].
    fn pin(&mut self, tokens: i64) -> Result<u64> {
        let _ = tokens;
        Err(Error::Unimplemented { op: "pin" })
    }
    /// docs/contract.md §3 `reset`; returns the new global end, 0.
    ///
    /// The contract never refuses a reset, and the caches of this crate
    /// never fail one. The error is for implementations that can fail
    /// outside the contract, as any other op can: a cache in another
    /// process that crashed or answered nonsense ([`Error::External`]), a
    /// backend failure. Like every error it leaves the cache as it was;
    /// for a cache in another process, what it holds locally (its global
    /// end) stays as it was and the error is that process's failure.
    fn reset(&mut self) -> Result<u64>;
    /// What the cache reports of its storage ([`Internals`]: capacity,
    /// resident bytes, layout), for a harness to compare with the
    /// contract's. The default reports nothing, and nothing of it is then
    /// compared: a cache implements [`Internals`] and returns `Some(self)`
    /// only when it wants them checked.
    fn internals(&self) -> Option<&dyn Internals> {
        None
    }
    /// [`KvCache::write`] returning the view as segments. The default makes
    /// one segment of the contiguous view; caches whose visible rows are
    /// scattered return zero-copy pieces instead of concatenating them.
    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<SegmentedView<'_>> {
        Ok(self.write(request, k, v)?.into())
    }
    /// [`KvCache::view`] as segments (default: one segment).
    fn view_segments(&self) -> Result<SegmentedView<'_>> {
        Ok(self.view()?.into())
    }
    /// The ring's head, tail and wrap point, for caches laid out as a ring
    /// (default: none).
    fn ring(&self) -> Option<RingLayout> {
        None
    }
    /// Tells the cache the index of the op about to be applied in its
    /// case: the writer id under which the reference model
    /// (`kvmodel::Model::apply`) records that op's rows. A driver calls it
    /// before each op; the read-only checks that follow the op (a probe
    /// after a refusal) come under the same index.
    ///
    /// It changes nothing the contract observes. The default ignores it
    /// (the caches of this crate do not name writers); a cache that
    /// forwards ops to another implementation which names writers by it (a
    /// subject in another process) passes it on with the op.
    fn begin_op(&mut self, index: u64) {
        let _ = index;
    }
}

/// The candle dtype of a contract dtype.
pub fn candle_dtype(dtype: Dtype) -> DType {
    match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::Bf16 => DType::BF16,
    }
}

/// Checks a write payload's shape (`[B, len, heads written, D]`) and dtype before anything is moved; the error names the tensor.
pub fn check_payload(
    tensor: &'static str,
    payload: &Tensor,
    expected: [usize; 4],
    dtype: DType,
) -> Result<()> {
    if payload.dims() != expected || payload.dtype() != dtype {
        return Err(Error::Payload {
            tensor,
            expected: expected.to_vec(),
            actual: payload.dims().to_vec(),
            expected_dtype: dtype,
            actual_dtype: payload.dtype(),
        });
    }
    Ok(())
}
