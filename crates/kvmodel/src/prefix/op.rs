//! The prefix-cache operations (docs/contract.md §15, docs/kvtrace.md
//! "Prefix caches").

use std::fmt;

use serde::{Deserialize, Serialize};

/// A request's id: any integer in `[0, 2^32)`. Ids are small integers rather
/// than strings so that generated traces stay short and every subject (a
/// Python dict, a Rust map, a tensor of ids) keys them the same way.
pub type RequestId = u32;

/// A token id: any integer in `[0, 2^32)`, the vocabulary of every tokenizer
/// in use. Its meaning is its value: two prompts share a prefix exactly when
/// their leading token ids are equal.
pub type Token = u32;

/// One prefix-cache operation. Serializes in kvtrace/1's externally tagged
/// form, like [`crate::Op`]: `{"start": {"request": 0, "tokens": [1, 2]}}`,
/// `{"evict": {"blocks": 1}}`, `"clear"`.
///
/// Counts are signed because a trace may hold negative values; the model
/// refuses them with `invalid_argument` naming the field (docs/contract.md
/// §15). Request ids and tokens are unsigned: a negative one is not a
/// request or a token at all, and the trace is refused as malformed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PrefixOp {
    /// Admit a new request with its prompt: reuse the longest cached prefix
    /// (the hit), allocate blocks for the rest.
    Start {
        /// The new request.
        request: RequestId,
        /// Its prompt.
        tokens: Vec<Token>,
    },
    /// Write the KV of the request's next `count` uncomputed positions.
    Compute {
        /// The request.
        request: RequestId,
        /// Positions to compute.
        count: i64,
    },
    /// Append tokens to the request (a decode step, draft tokens) and
    /// allocate their slots; `compute` writes them.
    Extend {
        /// The request.
        request: RequestId,
        /// The tokens appended.
        tokens: Vec<Token>,
    },
    /// Make `into` a copy of `request` that shares every block (parallel
    /// sampling, beams).
    Fork {
        /// The request copied.
        request: RequestId,
        /// The new request.
        into: RequestId,
    },
    /// Drop the request's last `count` tokens (rejected draft tokens).
    Rollback {
        /// The request.
        request: RequestId,
        /// Tokens to drop.
        count: i64,
    },
    /// End the request: its full computed blocks stay cached, the rest are
    /// freed.
    Finish {
        /// The request.
        request: RequestId,
    },
    /// Release the request's blocks as `finish` does, keeping the request
    /// (its tokens) to be resumed.
    Preempt {
        /// The request.
        request: RequestId,
    },
    /// Restart a preempted request: a hit on its tokens, as `start` does.
    Resume {
        /// The request.
        request: RequestId,
    },
    /// Return the payload rows of every computed position of the request.
    Read {
        /// The request.
        request: RequestId,
    },
    /// Evict `blocks` cached blocks, in the order of docs/contract.md §14.
    Evict {
        /// Blocks to evict.
        blocks: i64,
    },
    /// Evict every cached block.
    Clear,
}

impl PrefixOp {
    /// The op's name as it appears in traces (`start`, `compute`, …).
    pub fn name(&self) -> &'static str {
        match self {
            PrefixOp::Start { .. } => "start",
            PrefixOp::Compute { .. } => "compute",
            PrefixOp::Extend { .. } => "extend",
            PrefixOp::Fork { .. } => "fork",
            PrefixOp::Rollback { .. } => "rollback",
            PrefixOp::Finish { .. } => "finish",
            PrefixOp::Preempt { .. } => "preempt",
            PrefixOp::Resume { .. } => "resume",
            PrefixOp::Read { .. } => "read",
            PrefixOp::Evict { .. } => "evict",
            PrefixOp::Clear => "clear",
        }
    }

    /// The request the op names first, if any (`fork`: the one copied).
    pub fn request(&self) -> Option<RequestId> {
        match self {
            PrefixOp::Start { request, .. }
            | PrefixOp::Compute { request, .. }
            | PrefixOp::Extend { request, .. }
            | PrefixOp::Fork { request, .. }
            | PrefixOp::Rollback { request, .. }
            | PrefixOp::Finish { request }
            | PrefixOp::Preempt { request }
            | PrefixOp::Resume { request }
            | PrefixOp::Read { request } => Some(*request),
            PrefixOp::Evict { .. } | PrefixOp::Clear => None,
        }
    }
}

/// Tokens as `[1 2 3]`, long lists cut after 8 with the count.
fn tokens(f: &mut fmt::Formatter<'_>, tokens: &[Token]) -> fmt::Result {
    f.write_str("[")?;
    for (i, t) in tokens.iter().take(8).enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "{t}")?;
    }
    if tokens.len() > 8 {
        write!(f, " … ({} tokens)", tokens.len())?;
    }
    f.write_str("]")
}

impl fmt::Display for PrefixOp {
    /// Compact human form: `start r0 [1 2 3]`, `compute r0 3`, `fork r0 r1`,
    /// `evict 2`, `clear`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixOp::Start { request, tokens: t } | PrefixOp::Extend { request, tokens: t } => {
                write!(f, "{} r{request} ", self.name())?;
                tokens(f, t)
            }
            PrefixOp::Compute { request, count } | PrefixOp::Rollback { request, count } => {
                write!(f, "{} r{request} {count}", self.name())
            }
            PrefixOp::Fork { request, into } => write!(f, "fork r{request} r{into}"),
            PrefixOp::Finish { request }
            | PrefixOp::Preempt { request }
            | PrefixOp::Resume { request }
            | PrefixOp::Read { request } => write!(f, "{} r{request}", self.name()),
            PrefixOp::Evict { blocks } => write!(f, "evict {blocks}"),
            PrefixOp::Clear => f.write_str("clear"),
        }
    }
}
