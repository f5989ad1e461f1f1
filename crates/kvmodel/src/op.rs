//! The operation vocabulary shared by the model, the caches and every engine
//! of the harness (docs/contract.md §3, docs/kvtrace.md `ops`).

use std::fmt;

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::CacheError;

/// A `write` request: K/V for global positions `[start, start + len)`.
///
/// Numbers are signed because a trace file may hold negative values; the
/// cache refuses them with `invalid_argument` / `negative_window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    /// First global position written.
    pub start: i64,
    /// Number of positions written.
    pub len: i64,
    /// `[first, count]` of the heads written; `None` means all heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<[i64; 2]>,
    /// Recent-window override of the view (docs/contract.md §4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_window: Option<i64>,
}

impl Write {
    /// A plain write of all heads without a recent window.
    pub fn new(start: i64, len: i64) -> Write {
        Write {
            start,
            len,
            heads: None,
            recent_window: None,
        }
    }
}

/// A count or position from a trace: negative values are
/// `invalid_argument` naming the argument (docs/contract.md §3).
pub fn non_negative(field: &'static str, value: i64) -> Result<u64, CacheError> {
    u64::try_from(value).map_err(|_| CacheError::InvalidArgument { field, value })
}

/// A write whose arguments passed docs/contract.md §3 checks 1–3.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckedWrite {
    /// First position.
    pub start: u64,
    /// Number of positions.
    pub len: u64,
    /// Heads written (all heads when the request names none).
    pub heads: Range<usize>,
    /// Recent window, if given.
    pub recent_window: Option<u64>,
}

impl CheckedWrite {
    /// One past the last position written.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

impl Write {
    /// docs/contract.md §3 write checks 1–3, in order, for a cache with `heads`
    /// heads: negative start or length (`invalid_argument`), negative recent
    /// window (`negative_window`), head range outside `[0, heads)` or empty
    /// (`head_range`). These checks read only the arguments, so the model
    /// and every cache share them; everything that reads state is theirs.
    pub fn check_arguments(&self, heads: usize) -> Result<CheckedWrite, CacheError> {
        let start = non_negative("start", self.start)?;
        let len = non_negative("len", self.len)?;
        let recent_window = match self.recent_window {
            Some(r) if r < 0 => return Err(CacheError::NegativeWindow { recent_window: r }),
            r => r.map(|r| r as u64),
        };
        let heads = match self.heads {
            None => 0..heads,
            Some([first, count]) => {
                let fits = first >= 0
                    && count >= 1
                    && first
                        .checked_add(count)
                        .is_some_and(|last| last <= heads as i64);
                if !fits {
                    return Err(CacheError::HeadRange {
                        first,
                        count,
                        heads,
                    });
                }
                first as usize..(first + count) as usize
            }
        };
        Ok(CheckedWrite {
            start,
            len,
            heads,
            recent_window,
        })
    }
}

/// One cache operation. Serializes exactly as docs/kvtrace.md's externally tagged
/// form: `{"write": {...}}`, `{"rewind": {"to": 4}}`, `"reset"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Write K/V and return the visible window.
    Write(Write),
    /// Drop every position `>= to`.
    Rewind {
        /// New global end.
        to: i64,
    },
    /// Drop the oldest `tokens` evictable positions.
    Evict {
        /// How many positions to drop.
        tokens: i64,
    },
    /// Pin the first frames of the last `tokens` written positions.
    Pin {
        /// Span of the shot whose start is pinned; 0 clears the pin.
        tokens: i64,
    },
    /// Empty the cache.
    Reset,
}

impl Op {
    /// A write op with every field given.
    pub fn write(start: i64, len: i64, heads: Option<[i64; 2]>, recent_window: Option<i64>) -> Op {
        Op::Write(Write {
            start,
            len,
            heads,
            recent_window,
        })
    }

    /// The op's name as it appears in traces (`write`, `rewind`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Write(_) => "write",
            Op::Rewind { .. } => "rewind",
            Op::Evict { .. } => "evict",
            Op::Pin { .. } => "pin",
            Op::Reset => "reset",
        }
    }
}

impl fmt::Display for Op {
    /// Compact human form: `write 4+4 heads 1+1 r=2`, `rewind 4`, `reset`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Write(w) => {
                write!(f, "write {}+{}", w.start, w.len)?;
                if let Some([first, count]) = w.heads {
                    write!(f, " heads {first}+{count}")?;
                }
                if let Some(r) = w.recent_window {
                    write!(f, " r={r}")?;
                }
                Ok(())
            }
            Op::Rewind { to } => write!(f, "rewind {to}"),
            Op::Evict { tokens } => write!(f, "evict {tokens}"),
            Op::Pin { tokens } => write!(f, "pin {tokens}"),
            Op::Reset => write!(f, "reset"),
        }
    }
}
