//! The error values of docs/contract.md §3: one variant per kind, each carrying the
//! numbers that explain it. Engines compare kinds; people read messages.

use thiserror::Error;

use crate::outcome::ErrorKind;

/// A refused operation or configuration. A cache that returns one has not
/// changed (docs/contract.md §3).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum CacheError {
    /// A negative count or position.
    #[error("invalid_argument: {field} = {value} is negative")]
    InvalidArgument {
        /// The argument (`start`, `len`, `to`, `tokens`).
        field: &'static str,
        /// The value given.
        value: i64,
    },
    /// A negative recent window.
    #[error("negative_window: recent_window = {recent_window} is negative")]
    NegativeWindow {
        /// The value given.
        recent_window: i64,
    },
    /// A head range outside the cache's heads.
    #[error("head_range: heads [{first}, {count}] is not a non-empty range inside the {heads} heads [0, {heads})")]
    HeadRange {
        /// First head requested.
        first: i64,
        /// Number of heads requested.
        count: i64,
        /// Heads of the cache.
        heads: usize,
    },
    /// An operation the packed variant does not support.
    #[error("unsupported: {op} {detail}")]
    Unsupported {
        /// The op's name.
        op: &'static str,
        /// Why the packed variant refuses it.
        detail: String,
    },
    /// A write that would leave a gap.
    #[error("non_sequential: write starts at {start} but the global end is {global_end}")]
    NonSequential {
        /// Requested start.
        start: u64,
        /// Global end.
        global_end: u64,
    },
    /// A rewrite of positions that are gone.
    #[error("evicted: write [{start}, {end}) rewrites position {position}, which is not resident (resident: {resident})")]
    Evicted {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
        /// First position of the request that is not resident.
        position: u64,
        /// The resident positions, as ranges.
        resident: String,
    },
    /// A chunk that does not fit beside the protected positions.
    #[error("chunk_too_large: write [{start}, {end}) needs {needed} resident positions but capacity {capacity} leaves room for {room} beside {protected} protected")]
    ChunkTooLarge {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
        /// Resident positions the write would need.
        needed: usize,
        /// Capacity (after growth, if any).
        capacity: usize,
        /// Positions that cannot be evicted for it.
        protected: usize,
        /// Positions that could hold the request.
        room: usize,
    },
    /// A chunk that would not see itself.
    #[error("window_too_small: write [{start}, {end}) would not see position {position} in its own view (window {window}, {protected} protected)")]
    WindowTooSmall {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
        /// First written position left out of the view.
        position: u64,
        /// Window in force.
        window: usize,
        /// Protected positions in the view.
        protected: usize,
    },
    /// A rewind past the end.
    #[error("rewind_ahead: rewind to {to} is past the global end {global_end}")]
    RewindAhead {
        /// Requested target.
        to: u64,
        /// Global end.
        global_end: u64,
    },
    /// An evict of more than is evictable.
    #[error("evict_too_many: evict {tokens} but only {evictable} positions are evictable")]
    EvictTooMany {
        /// Requested count.
        tokens: u64,
        /// Evictable positions.
        evictable: usize,
    },
    /// A pin that cannot be placed.
    #[error("pin_range: pin {tokens} {detail}")]
    PinRange {
        /// Requested count.
        tokens: u64,
        /// Why it cannot be placed (global end, sink, missing position).
        detail: String,
    },
    /// A configuration that breaks a rule of docs/contract.md §1.
    #[error("invalid_config: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// The rule it breaks, with its value.
        reason: String,
    },
}

impl CacheError {
    /// `chunk_too_large` for a write `[start, end)` that would need `total`
    /// resident positions in `capacity`, `protected` of them unevictable
    /// and outside the write.
    pub fn chunk_too_large(
        start: u64,
        end: u64,
        total: u64,
        capacity: usize,
        protected: usize,
    ) -> CacheError {
        CacheError::ChunkTooLarge {
            start,
            end,
            needed: usize::try_from(total).unwrap_or(usize::MAX),
            capacity,
            protected,
            room: capacity.saturating_sub(protected),
        }
    }

    /// The docs/contract.md §3 kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CacheError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            CacheError::NegativeWindow { .. } => ErrorKind::NegativeWindow,
            CacheError::HeadRange { .. } => ErrorKind::HeadRange,
            CacheError::Unsupported { .. } => ErrorKind::Unsupported,
            CacheError::NonSequential { .. } => ErrorKind::NonSequential,
            CacheError::Evicted { .. } => ErrorKind::Evicted,
            CacheError::ChunkTooLarge { .. } => ErrorKind::ChunkTooLarge,
            CacheError::WindowTooSmall { .. } => ErrorKind::WindowTooSmall,
            CacheError::RewindAhead { .. } => ErrorKind::RewindAhead,
            CacheError::EvictTooMany { .. } => ErrorKind::EvictTooMany,
            CacheError::PinRange { .. } => ErrorKind::PinRange,
            CacheError::InvalidConfig { .. } => ErrorKind::InvalidConfig,
        }
    }
}

impl From<CacheError> for ErrorKind {
    fn from(error: CacheError) -> ErrorKind {
        error.kind()
    }
}

/// Formats ascending positions as compact ranges: `0..2 6..12` (empty: `-`).
pub fn format_ranges<I: IntoIterator<Item = u64>>(positions: I) -> String {
    let mut out = String::new();
    let mut run: Option<(u64, u64)> = None;
    let flush = |out: &mut String, (lo, hi): (u64, u64)| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!("{lo}..{hi}"));
    };
    for p in positions {
        run = match run {
            Some((lo, hi)) if hi == p => Some((lo, p + 1)),
            Some(done) => {
                flush(&mut out, done);
                Some((p, p + 1))
            }
            None => Some((p, p + 1)),
        };
    }
    if let Some(done) = run {
        flush(&mut out, done);
    }
    if out.is_empty() {
        out.push('-');
    }
    out
}
