//! What the prefix engines drive (`crate::engine::prefix`): [`PrefixSubjectCache`], a prefix cache in
//! this process (every [`kvcache::PrefixCache`]) or in another one (an
//! `exec:` subject, docs/subject-protocol.md "The prefix family"), with the
//! answers a foreign cache can give besides the contract's ([`PrefixFailure`])
//! and what it declares it can express ([`PrefixCapabilities`]).

use std::fmt;

use kvcache::{PrefixCache, PrefixCacheError};
use kvmodel::prefix::{
    BlockCounts, HitRule, PrefixConfig, PrefixEffect, PrefixError, PrefixErrorKind, PrefixOp,
    RequestId,
};
use serde::Deserialize;

/// Why a prefix subject did not answer an op with an effect.
#[derive(Debug)]
pub enum PrefixFailure {
    /// A refusal of docs/contract.md §15. An in-process cache gives the
    /// error itself (`error`), compared with the model's exactly; a
    /// process gives the kind and its own message, compared by kind.
    Refused {
        /// The kind.
        kind: PrefixErrorKind,
        /// The very error, from an in-process cache.
        error: Option<PrefixError>,
        /// The message to show.
        message: String,
        /// The counts the subject reports after the refusal (a process
        /// sends them with every `err`); `None` from an in-process cache,
        /// whose [`PrefixSubjectCache::counts`] says.
        counts: Option<BlockCounts>,
    },
    /// The op lies outside what the subject is asked in real use: the case
    /// is cut before it, nothing is judged.
    Outside(String),
    /// Anything else: an exception of the library, a crash, a timeout, a
    /// broken protocol line, a tensor backend error. Never an agreement.
    Subject(String),
}

impl fmt::Display for PrefixFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixFailure::Refused { error: Some(e), .. } => write!(f, "err {e}"),
            PrefixFailure::Refused { kind, message, .. } => write!(f, "err {kind}: {message}"),
            PrefixFailure::Outside(reason) => write!(f, "outside the subject's domain: {reason}"),
            PrefixFailure::Subject(problem) => f.write_str(problem),
        }
    }
}

impl From<PrefixCacheError> for PrefixFailure {
    fn from(e: PrefixCacheError) -> PrefixFailure {
        match e {
            PrefixCacheError::Contract(error) => PrefixFailure::Refused {
                kind: error.kind(),
                message: error.to_string(),
                error: Some(error),
                counts: None,
            },
            PrefixCacheError::Backend(e) => PrefixFailure::Subject(format!("tensor backend: {e}")),
        }
    }
}

impl PrefixFailure {
    /// The §15 kind of a refusal; `None` for anything else.
    pub fn kind(&self) -> Option<PrefixErrorKind> {
        match self {
            PrefixFailure::Refused { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// Whether this answers the model's refusal `expected`: the very error
    /// when the subject gives one, else the same kind.
    pub fn agrees_with(&self, expected: &PrefixError) -> bool {
        match self {
            PrefixFailure::Refused {
                error: Some(error), ..
            } => error == expected,
            PrefixFailure::Refused { kind, .. } => *kind == expected.kind(),
            _ => false,
        }
    }
}

/// A prefix cache the engines can drive: the ops of docs/contract.md §15,
/// the counts of §12, and a read-only probe of a request's rows (§16).
pub trait PrefixSubjectCache {
    /// The configuration it was opened with.
    fn config(&self) -> &PrefixConfig;
    /// Applies `op`, the op of index `index` in its case.
    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure>;
    /// The counts after the last op (its effect's, or those a refusal
    /// reported).
    fn counts(&self) -> BlockCounts;
    /// The rows of `request`'s computed positions as f32 values laid out
    /// `[layer][position][dim]`; changes nothing.
    fn probe(&mut self, request: RequestId) -> Result<Vec<f32>, PrefixFailure>;
    /// The cache's own invariants; an external one has none to offer.
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }
}

impl<C: PrefixCache> PrefixSubjectCache for C {
    fn config(&self) -> &PrefixConfig {
        PrefixCache::config(self)
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure> {
        Ok(PrefixCache::apply(self, index, op)?)
    }

    fn counts(&self) -> BlockCounts {
        PrefixCache::counts(self)
    }

    fn probe(&mut self, request: RequestId) -> Result<Vec<f32>, PrefixFailure> {
        Ok(self.read_values(request)?)
    }

    fn audit(&self) -> Result<(), String> {
        PrefixCache::audit(self)
    }
}

/// How a prefix subject is judged (docs/subject-protocol.md, "How a prefix
/// subject is judged").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// It keeps docs/contract.md §12–§15 exactly: judged by the model, op
    /// by op.
    Contract,
    /// Its library's own accounting and eviction policy: judged by the
    /// invariants of §17.
    #[default]
    Own,
}

/// In which order a subject accepts ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Steps {
    /// Any order.
    #[default]
    Free,
    /// Every token an op allocates is computed by the next op, as one
    /// scheduler step allocates and its forward pass computes: the driver
    /// follows every accepted `start`, `extend` and `resume` with a
    /// `compute` of every uncomputed token and issues no other `compute`.
    Whole,
}

impl Steps {
    /// The order a subject that declares `self` is driven in when a
    /// campaign asks for `asked`: a `whole` subject always gets whole
    /// steps, a `free` one whichever is asked.
    pub fn driven(self, asked: Steps) -> Steps {
        match self {
            Steps::Whole => Steps::Whole,
            Steps::Free => asked,
        }
    }
}

/// The op names of docs/contract.md §15, in its order.
pub const PREFIX_OPS: [&str; 11] = [
    "start", "compute", "extend", "fork", "rollback", "finish", "preempt", "resume", "read",
    "evict", "clear",
];

/// What a prefix subject can express; the engines draw nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixCapabilities {
    /// The §15 ops it implements (names from [`PREFIX_OPS`]).
    pub ops: Vec<&'static str>,
    /// The hit rules it opens.
    pub hit: Vec<HitRule>,
    /// The block sizes it opens; `None`: any.
    pub block_sizes: Option<Vec<usize>>,
    /// How it is judged by default.
    pub policy: Policy,
    /// The order of ops it accepts.
    pub steps: Steps,
}

impl PrefixCapabilities {
    /// Everything: every op, both hit rules, any block size, the
    /// contract's policy, free order. What the shipped paged cache declares.
    pub fn full() -> PrefixCapabilities {
        PrefixCapabilities {
            ops: PREFIX_OPS.to_vec(),
            hit: vec![HitRule::LeaveOne, HitRule::Whole],
            block_sizes: None,
            policy: Policy::Contract,
            steps: Steps::Free,
        }
    }

    /// Whether it implements the op named `name`.
    pub fn has_op(&self, name: &str) -> bool {
        self.ops.contains(&name)
    }

    /// Why `config` or `op` lies outside these capabilities, if it does:
    /// what a replay reports as unsupported by the subject.
    pub fn unsupported(&self, config: &PrefixConfig, ops: &[PrefixOp]) -> Option<String> {
        if !self.hit.contains(&config.hit) {
            return Some(format!("it opens no config with hit {:?}", config.hit));
        }
        if let Some(sizes) = &self.block_sizes {
            if !sizes.contains(&config.block_size) {
                return Some(format!(
                    "it opens block sizes {sizes:?}, not {}",
                    config.block_size
                ));
            }
        }
        ops.iter()
            .find(|op| !self.has_op(op.name()))
            .map(|op| format!("it does not implement {}", op.name()))
    }
}
