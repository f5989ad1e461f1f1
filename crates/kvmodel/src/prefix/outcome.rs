//! Outcomes of prefix-cache operations (docs/contract.md §15,
//! docs/kvtrace.md "Prefix caches").

use std::fmt;

use serde::{Deserialize, Serialize};

/// The error kinds of docs/contract.md §15, with exactly its snake_case
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixErrorKind {
    /// A negative count.
    InvalidArgument,
    /// An op naming a request that does not exist.
    UnknownRequest,
    /// `start` or `fork` naming a request id already in use.
    DuplicateRequest,
    /// `start` with no tokens.
    EmptyPrompt,
    /// An op on a preempted request that only a running one accepts.
    Preempted,
    /// `resume` of a request that is running.
    NotPreempted,
    /// Not enough free and cached blocks for an allocation.
    NoRoom,
    /// `compute` past the request's last token.
    ComputePastEnd,
    /// `rollback` of more tokens than the request has.
    RollbackTooFar,
    /// `fork` of a request with uncomputed tokens.
    NotComputed,
    /// `evict` of more blocks than are cached.
    EvictTooMany,
    /// A configuration that breaks a rule of docs/contract.md §11.
    InvalidConfig,
}

impl PrefixErrorKind {
    /// Every kind an operation can return (all but `invalid_config`).
    pub const OP_KINDS: [PrefixErrorKind; 11] = [
        PrefixErrorKind::InvalidArgument,
        PrefixErrorKind::UnknownRequest,
        PrefixErrorKind::DuplicateRequest,
        PrefixErrorKind::EmptyPrompt,
        PrefixErrorKind::Preempted,
        PrefixErrorKind::NotPreempted,
        PrefixErrorKind::NoRoom,
        PrefixErrorKind::ComputePastEnd,
        PrefixErrorKind::RollbackTooFar,
        PrefixErrorKind::NotComputed,
        PrefixErrorKind::EvictTooMany,
    ];

    /// The snake_case name used in traces.
    pub fn name(self) -> &'static str {
        match self {
            PrefixErrorKind::InvalidArgument => "invalid_argument",
            PrefixErrorKind::UnknownRequest => "unknown_request",
            PrefixErrorKind::DuplicateRequest => "duplicate_request",
            PrefixErrorKind::EmptyPrompt => "empty_prompt",
            PrefixErrorKind::Preempted => "preempted",
            PrefixErrorKind::NotPreempted => "not_preempted",
            PrefixErrorKind::NoRoom => "no_room",
            PrefixErrorKind::ComputePastEnd => "compute_past_end",
            PrefixErrorKind::RollbackTooFar => "rollback_too_far",
            PrefixErrorKind::NotComputed => "not_computed",
            PrefixErrorKind::EvictTooMany => "evict_too_many",
            PrefixErrorKind::InvalidConfig => "invalid_config",
        }
    }
}

impl fmt::Display for PrefixErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The pool's accounting after an op (docs/contract.md §12): every block is
/// exactly one of free, cached (holds a prefix's KV, referenced by no
/// request, evictable) or in use (referenced by at least one request), so
/// `free + cached + in_use = N` always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockCounts {
    /// Blocks referenced by at least one running request.
    pub in_use: u64,
    /// Blocks that hold a cached prefix and no request references.
    pub cached: u64,
    /// Blocks that hold nothing.
    pub free: u64,
}

impl fmt::Display for BlockCounts {
    /// `in_use 3 cached 1 free 4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in_use {} cached {} free {}",
            self.in_use, self.cached, self.free
        )
    }
}

/// What a successful operation reports: the counts after it, and for
/// `start`/`resume` the hit, for `read` the number of positions read.
///
/// The rows a read returns are not part of the effect: they are the
/// payload of the request's own tokens (docs/contract.md §16), which
/// [`crate::prefix::check_rows`] judges, so a trace stays abstract, as
/// kvtrace/1's `writers` do for the streaming family.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixEffect {
    /// `start`, `resume`: the leading prompt tokens whose KV was reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit: Option<u64>,
    /// `read`: the positions read (the request's computed tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<u64>,
    /// Blocks in use after the op.
    pub in_use: u64,
    /// Cached blocks after the op.
    pub cached: u64,
    /// Free blocks after the op.
    pub free: u64,
}

impl PrefixEffect {
    /// The effect of an op that reports only the counts.
    pub fn counts(counts: BlockCounts) -> PrefixEffect {
        PrefixEffect {
            hit: None,
            read: None,
            in_use: counts.in_use,
            cached: counts.cached,
            free: counts.free,
        }
    }

    /// The counts this effect reports.
    pub fn block_counts(&self) -> BlockCounts {
        BlockCounts {
            in_use: self.in_use,
            cached: self.cached,
            free: self.free,
        }
    }
}

impl fmt::Display for PrefixEffect {
    /// `ok hit 4 in_use 3 cached 1 free 4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ok")?;
        if let Some(hit) = self.hit {
            write!(f, " hit {hit}")?;
        }
        if let Some(read) = self.read {
            write!(f, " read {read}")?;
        }
        write!(f, " {}", self.block_counts())
    }
}

/// The outcome of one prefix-cache operation, serialized as kvtrace/1's
/// `{"ok": {...}}` / `{"err": "kind"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixOutcome {
    /// The operation succeeded.
    Ok(PrefixEffect),
    /// The operation was refused and changed nothing.
    Err(PrefixErrorKind),
}

impl PrefixOutcome {
    /// The error kind, if refused.
    pub fn error_kind(&self) -> Option<PrefixErrorKind> {
        match self {
            PrefixOutcome::Ok(_) => None,
            PrefixOutcome::Err(kind) => Some(*kind),
        }
    }
}

impl fmt::Display for PrefixOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixOutcome::Ok(effect) => effect.fmt(f),
            PrefixOutcome::Err(kind) => write!(f, "err {kind}"),
        }
    }
}

impl<E: Into<PrefixErrorKind>> From<Result<PrefixEffect, E>> for PrefixOutcome {
    fn from(result: Result<PrefixEffect, E>) -> PrefixOutcome {
        match result {
            Ok(effect) => PrefixOutcome::Ok(effect),
            Err(error) => PrefixOutcome::Err(error.into()),
        }
    }
}
