//! A zoo of realistic bugs, built as faulty variants of the shipped caches
//! (feature `faults`, never on the shipped code path).
//!
//! Each [`CacheFault`] names one mistake a real streaming KV cache makes —
//! the sglang 0.5.23 divergences of docs/contract.md §8 and classic slot, roll,
//! pin and quantization errors — and [`FaultyCache`] wraps a correct
//! [`DenseCache`](crate::DenseCache) or [`PackedCache`](crate::PackedCache)
//! (or, by [`FaultBase`], the same caches on the device-generic path, or a
//! [`RingCache`](crate::RingCache) for dense configurations)
//! so that it behaves exactly as an implementation with that mistake would:
//! it changes the request the correct cache receives, the rows or positions
//! it returns, or the state it leaves after a refusal. The harness uses the
//! zoo to measure how many real bugs each of its engines catches.
//!
//! Not in the zoo, because no caller can observe them through the contract:
//! re-quantizing a cold chunk a second time (the dequantized values of a
//! row re-quantize to the same codes and the same scale, so the view is
//! bit-identical), and a second head range never rolled (the shipped dense
//! cache keeps one slot map for all heads, so the wrapper cannot make one
//! head range lag another without a second storage of its own, which would
//! no longer be a variant of the shipped cache).

mod base;
mod cache;
mod paged;
mod rows;
mod view;
mod write;

pub use base::{FaultBase, UnknownFaultBase};
pub use cache::FaultyCache;
pub use paged::{FaultyPagedCache, PrefixFault};

use kvmodel::{Quant, Variant};

/// One bug of the zoo: what a real implementation gets wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheFault {
    /// Dense: the slot of a rewrite is computed as `s − L` (evicted count)
    /// without the sink offset, so after eviction a rewrite lands `S`
    /// positions early (docs/contract.md §8, sglang slot arithmetic).
    SlotIgnoresSink,
    /// Dense: a write starting past the global end is accepted and the
    /// never-written gap becomes visible (docs/contract.md §8 D2).
    GapWriteAccepted,
    /// Dense: a rewrite of evicted positions lands on the sink slots instead
    /// of being refused (docs/contract.md §8 D3).
    EvictedRewriteOnSink,
    /// Dense: a chunk that does not fit beside the sink and the pin is
    /// accepted instead of refused (sglang overwrites the protected slots,
    /// docs/contract.md §8 D4).
    ChunkOverProtected,
    /// Dense: a negative recent window is refused only after the write has
    /// landed (mutate then raise, docs/contract.md §8 D12).
    MutateThenRaise,
    /// Dense: with `W < C` the window view drops the sink (docs/contract.md §8 D1).
    WindowDropsSink,
    /// Dense: the window budget subtracts the sink twice, so the view shows
    /// `S` fewer recent positions than `W` allows (window counted without
    /// the sink already in `P`).
    WindowDoubleCountsSink,
    /// Dense: a pin whose distance to the sink is not a multiple of the
    /// chunk length is lost at the next roll (docs/contract.md §8 D7).
    PinLostOnMisalignedRoll,
    /// Dense: the pinned range is listed twice in the view (docs/contract.md §8 D7).
    PinDuplicatedInView,
    /// Dense: a head range is written from head 0, ignoring its start (one
    /// as wide as the cache is accepted, docs/contract.md §8 D13).
    HeadStartIgnored,
    /// Dense: a zero-length write past the global end advances it
    /// (docs/contract.md §8 D11).
    ZeroLengthAdvances,
    /// Dense: eviction counts from slot 0, so the first sink position is
    /// dropped from the view once anything is evicted.
    EvictRemovesSink,
    /// Dense: growth doubles the buffers but keeps the old window instead of
    /// `W = C`.
    GrowthKeepsWindow,
    /// Dense: a refused write has already rolled the buffer (the slot map
    /// changed) before it raises (docs/contract.md §8 D5).
    RefusalRolls,
    /// Dense: the roll moves one row too few, so the oldest kept position
    /// shows its neighbour's row.
    RollOneShort,
    /// Dense: the view returned by a rewrite is the snapshot taken before the
    /// rows landed (a stale view).
    StaleViewAfterRewrite,
    /// Dense: the roll runs over the flattened batch × slot axis (a
    /// `torch.roll` without `dims`), so after a roll the oldest evictable
    /// visible row of each batch row holds the next batch row's (the last
    /// one wraps to the first). Invisible with one batch row.
    RollCrossesBatch,
    /// Dense: a zero-length write computes its room as `max(n, 1)`, so on a
    /// full cache the read-only probe at the global end evicts the oldest
    /// evictable position.
    ProbeMakesRoom,
    /// Packed: a write with a head range returns every head (docs/contract.md §8 D10).
    PackedReturnsEveryHead,
    /// Packed int8/int4: `keep_recent_chunks` counts the current chunk, so
    /// one completed chunk too many becomes cold.
    KeepRecentCountsCurrent,
    /// Packed int8/int4: a chunk starting below the sink is quantized even
    /// without `pack_sink`.
    SinkChunkPacked,
    /// Packed int4: the two codes of a byte are read back swapped (value
    /// `2j` from the high nibble).
    Int4NibblesSwapped,
    /// Packed int8/int4: dequantization divides by a precomputed reciprocal
    /// of the scale instead of multiplying by the scale (off by one ulp).
    ScaleReciprocal,
}

impl CacheFault {
    /// Every fault of the zoo, dense ones first.
    pub const ALL: [CacheFault; 23] = [
        CacheFault::SlotIgnoresSink,
        CacheFault::GapWriteAccepted,
        CacheFault::EvictedRewriteOnSink,
        CacheFault::ChunkOverProtected,
        CacheFault::MutateThenRaise,
        CacheFault::WindowDropsSink,
        CacheFault::WindowDoubleCountsSink,
        CacheFault::PinLostOnMisalignedRoll,
        CacheFault::PinDuplicatedInView,
        CacheFault::HeadStartIgnored,
        CacheFault::ZeroLengthAdvances,
        CacheFault::EvictRemovesSink,
        CacheFault::GrowthKeepsWindow,
        CacheFault::RefusalRolls,
        CacheFault::RollOneShort,
        CacheFault::StaleViewAfterRewrite,
        CacheFault::RollCrossesBatch,
        CacheFault::ProbeMakesRoom,
        CacheFault::PackedReturnsEveryHead,
        CacheFault::KeepRecentCountsCurrent,
        CacheFault::SinkChunkPacked,
        CacheFault::Int4NibblesSwapped,
        CacheFault::ScaleReciprocal,
    ];

    /// The name used on command lines (`fault:NAME`).
    pub fn name(self) -> &'static str {
        match self {
            CacheFault::SlotIgnoresSink => "slot-ignores-sink",
            CacheFault::GapWriteAccepted => "gap-write-accepted",
            CacheFault::EvictedRewriteOnSink => "evicted-rewrite-on-sink",
            CacheFault::ChunkOverProtected => "chunk-over-protected",
            CacheFault::MutateThenRaise => "mutate-then-raise",
            CacheFault::WindowDropsSink => "window-drops-sink",
            CacheFault::WindowDoubleCountsSink => "window-double-counts-sink",
            CacheFault::PinLostOnMisalignedRoll => "pin-lost-on-misaligned-roll",
            CacheFault::PinDuplicatedInView => "pin-duplicated-in-view",
            CacheFault::HeadStartIgnored => "head-start-ignored",
            CacheFault::ZeroLengthAdvances => "zero-length-advances",
            CacheFault::EvictRemovesSink => "evict-removes-sink",
            CacheFault::GrowthKeepsWindow => "growth-keeps-window",
            CacheFault::RefusalRolls => "refusal-rolls",
            CacheFault::RollOneShort => "roll-one-short",
            CacheFault::StaleViewAfterRewrite => "stale-view-after-rewrite",
            CacheFault::RollCrossesBatch => "roll-crosses-batch",
            CacheFault::ProbeMakesRoom => "probe-makes-room",
            CacheFault::PackedReturnsEveryHead => "packed-returns-every-head",
            CacheFault::KeepRecentCountsCurrent => "keep-recent-counts-current",
            CacheFault::SinkChunkPacked => "sink-chunk-packed",
            CacheFault::Int4NibblesSwapped => "int4-nibbles-swapped",
            CacheFault::ScaleReciprocal => "scale-reciprocal",
        }
    }

    /// One line saying what a real implementation gets wrong.
    pub fn doc(self) -> &'static str {
        match self {
            CacheFault::SlotIgnoresSink => "rewrite slot computed as s - evicted without the sink offset: after eviction a rewrite lands S positions early",
            CacheFault::GapWriteAccepted => "write past the global end accepted; the never-written gap becomes visible (SPEC D2)",
            CacheFault::EvictedRewriteOnSink => "rewrite of evicted positions lands on the sink slots instead of being refused (SPEC D3)",
            CacheFault::ChunkOverProtected => "chunk that does not fit beside the sink and pin is accepted, not refused (SPEC D4)",
            CacheFault::MutateThenRaise => "negative recent window refused only after the write landed (SPEC D12, D5)",
            CacheFault::WindowDropsSink => "with W < C the window view drops the sink (SPEC D1)",
            CacheFault::WindowDoubleCountsSink => "window budget subtracts the sink twice: the view shows S fewer recent positions",
            CacheFault::PinLostOnMisalignedRoll => "pin not aligned with the roll step is lost at the next roll (SPEC D7)",
            CacheFault::PinDuplicatedInView => "pinned range listed twice in the view (SPEC D7)",
            CacheFault::HeadStartIgnored => "head range written from head 0, start ignored; one as wide as the cache accepted (SPEC D13)",
            CacheFault::ZeroLengthAdvances => "zero-length write past the global end advances it (SPEC D11)",
            CacheFault::EvictRemovesSink => "eviction counts from slot 0 and drops the first sink position",
            CacheFault::GrowthKeepsWindow => "growth doubles the buffers but keeps the old window instead of W = C",
            CacheFault::RefusalRolls => "refused write has already rolled the buffer before it raises (SPEC D5)",
            CacheFault::RollOneShort => "roll moves one row too few: the oldest kept position shows its neighbour's row",
            CacheFault::StaleViewAfterRewrite => "view returned by a rewrite is the snapshot taken before the rows landed",
            CacheFault::ProbeMakesRoom => "a zero-length write makes room for one row: on a full cache the probe evicts the oldest evictable position",
            CacheFault::RollCrossesBatch => "roll over the flattened batch x slot axis: after a roll the oldest evictable row of each batch row shows the next batch row's",
            CacheFault::PackedReturnsEveryHead => "packed write with a head range returns every head (SPEC D10)",
            CacheFault::KeepRecentCountsCurrent => "keep_recent_chunks counts the current chunk: one chunk too many goes cold",
            CacheFault::SinkChunkPacked => "chunk starting below the sink quantized even without pack_sink",
            CacheFault::Int4NibblesSwapped => "int4 codes of a byte read back swapped (value 2j from the high nibble)",
            CacheFault::ScaleReciprocal => "dequantization divides by a reciprocal of the scale: off by one ulp",
        }
    }

    /// The variant whose cache the fault lives in.
    pub fn variant(self) -> Variant {
        match self {
            CacheFault::PackedReturnsEveryHead
            | CacheFault::KeepRecentCountsCurrent
            | CacheFault::SinkChunkPacked
            | CacheFault::Int4NibblesSwapped
            | CacheFault::ScaleReciprocal => Variant::Packed,
            _ => Variant::Dense,
        }
    }

    /// The quantizations the fault shows under (`None` = every one).
    pub fn quants(self) -> Option<&'static [Quant]> {
        match self {
            CacheFault::KeepRecentCountsCurrent
            | CacheFault::SinkChunkPacked
            | CacheFault::ScaleReciprocal => Some(&[Quant::Int8, Quant::Int4]),
            CacheFault::Int4NibblesSwapped => Some(&[Quant::Int4]),
            _ => None,
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<CacheFault> {
        CacheFault::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for CacheFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
