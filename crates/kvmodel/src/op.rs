//! The operation vocabulary shared by the model, the caches and every engine
//! of the harness (SPEC.md §3, TRACE.md `ops`).

use std::fmt;

use serde::{Deserialize, Serialize};

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
    /// Recent-window override of the view (SPEC.md §4).
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

/// One cache operation. Serializes exactly as TRACE.md's externally tagged
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
