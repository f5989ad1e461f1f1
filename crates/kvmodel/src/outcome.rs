//! Outcomes of operations (docs/contract.md §3, docs/kvtrace.md `expect`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The error kinds of docs/contract.md §3, with exactly its snake_case names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A negative start, length, rewind target, evict or pin count.
    InvalidArgument,
    /// A negative `recent_window`.
    NegativeWindow,
    /// A head range outside `[0, H)` or empty.
    HeadRange,
    /// An operation the packed variant does not support.
    Unsupported,
    /// A write starting after the global end.
    NonSequential,
    /// A rewrite of a position that is no longer resident.
    Evicted,
    /// A chunk that does not fit beside the protected positions.
    ChunkTooLarge,
    /// A chunk that would not be visible in its own view.
    WindowTooSmall,
    /// A rewind past the global end.
    RewindAhead,
    /// An evict of more positions than are evictable.
    EvictTooMany,
    /// A pin that cannot be placed.
    PinRange,
    /// A configuration that breaks a rule of docs/contract.md §1.
    InvalidConfig,
}

impl ErrorKind {
    /// Every kind an operation can return (all but `invalid_config`).
    pub const OP_KINDS: [ErrorKind; 11] = [
        ErrorKind::InvalidArgument,
        ErrorKind::NegativeWindow,
        ErrorKind::HeadRange,
        ErrorKind::Unsupported,
        ErrorKind::NonSequential,
        ErrorKind::Evicted,
        ErrorKind::ChunkTooLarge,
        ErrorKind::WindowTooSmall,
        ErrorKind::RewindAhead,
        ErrorKind::EvictTooMany,
        ErrorKind::PinRange,
    ];

    /// The snake_case name used in traces.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::NegativeWindow => "negative_window",
            ErrorKind::HeadRange => "head_range",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NonSequential => "non_sequential",
            ErrorKind::Evicted => "evicted",
            ErrorKind::ChunkTooLarge => "chunk_too_large",
            ErrorKind::WindowTooSmall => "window_too_small",
            ErrorKind::RewindAhead => "rewind_ahead",
            ErrorKind::EvictTooMany => "evict_too_many",
            ErrorKind::PinRange => "pin_range",
            ErrorKind::InvalidConfig => "invalid_config",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a successful operation reports.
///
/// `visible` and `writers` are present exactly for writes. `writers[h][i]` is
/// the index of the op that last wrote reported head `h` of `visible[i]`, or
/// `None` where that head was never written.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effect {
    /// The global end after the operation.
    pub global_end: u64,
    /// Visible positions in ascending order (writes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible: Option<Vec<u64>>,
    /// Writers per reported head and visible position (writes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writers: Option<Vec<Vec<Option<u64>>>>,
}

impl Effect {
    /// The outcome of a non-write operation.
    pub fn moved(global_end: u64) -> Effect {
        Effect {
            global_end,
            visible: None,
            writers: None,
        }
    }
}

/// The outcome of one operation, serialized as docs/kvtrace.md's
/// `{"ok": {...}}` / `{"err": "kind"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The operation succeeded.
    Ok(Effect),
    /// The operation was refused and changed nothing.
    Err(ErrorKind),
}

impl Outcome {
    /// The error kind, if refused.
    pub fn error_kind(&self) -> Option<ErrorKind> {
        match self {
            Outcome::Ok(_) => None,
            Outcome::Err(kind) => Some(*kind),
        }
    }
}

impl<E: Into<ErrorKind>> From<Result<Effect, E>> for Outcome {
    fn from(result: Result<Effect, E>) -> Outcome {
        match result {
            Ok(effect) => Outcome::Ok(effect),
            Err(error) => Outcome::Err(error.into()),
        }
    }
}
