//! The error values of docs/contract.md §15: one variant per kind, each
//! carrying the numbers that explain it. Engines compare kinds; people read
//! messages.

use thiserror::Error;

use crate::prefix::op::RequestId;
use crate::prefix::outcome::PrefixErrorKind;

/// A refused prefix-cache operation or configuration. A model or cache that
/// returns one has not changed (docs/contract.md §15).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum PrefixError {
    /// A negative count.
    #[error("invalid_argument: {field} = {value} is negative")]
    InvalidArgument {
        /// The argument (`count`, `blocks`).
        field: &'static str,
        /// The value given.
        value: i64,
    },
    /// No request has this id.
    #[error("unknown_request: {op} names request {request}, which does not exist")]
    UnknownRequest {
        /// The op's name.
        op: &'static str,
        /// The id given.
        request: RequestId,
    },
    /// The id is already a running or preempted request.
    #[error("duplicate_request: {op} would create request {request}, which already exists")]
    DuplicateRequest {
        /// The op's name (`start`, `fork`).
        op: &'static str,
        /// The id given.
        request: RequestId,
    },
    /// A prompt of no tokens.
    #[error("empty_prompt: start of request {request} has no tokens")]
    EmptyPrompt {
        /// The request.
        request: RequestId,
    },
    /// The request is preempted: only `resume` and `finish` accept it.
    #[error("preempted: {op} names request {request}, which is preempted (resume it first)")]
    Preempted {
        /// The op's name.
        op: &'static str,
        /// The request.
        request: RequestId,
    },
    /// `resume` of a running request.
    #[error("not_preempted: resume names request {request}, which is running")]
    NotPreempted {
        /// The request.
        request: RequestId,
    },
    /// Not enough blocks: free plus evictable cached ones.
    #[error("no_room: {op} of request {request} needs {needed} new blocks but only {free} are free and {cached} cached")]
    NoRoom {
        /// The op's name (`start`, `resume`, `extend`).
        op: &'static str,
        /// The request.
        request: RequestId,
        /// Blocks the op must allocate.
        needed: usize,
        /// Free blocks.
        free: usize,
        /// Cached blocks it could evict (those of its own hit excluded).
        cached: usize,
    },
    /// `compute` past the request's last token.
    #[error("compute_past_end: compute {count} of request {request} would pass its {len} tokens ({computed} computed)")]
    ComputePastEnd {
        /// The request.
        request: RequestId,
        /// Positions requested.
        count: u64,
        /// Computed positions.
        computed: usize,
        /// Tokens of the request.
        len: usize,
    },
    /// `rollback` of more tokens than the request holds.
    #[error("rollback_too_far: rollback {count} of request {request}, which has {len} tokens")]
    RollbackTooFar {
        /// The request.
        request: RequestId,
        /// Tokens to drop.
        count: u64,
        /// Tokens of the request.
        len: usize,
    },
    /// `fork` of a request with uncomputed tokens.
    #[error("not_computed: fork of request {request}, which has computed {computed} of its {len} tokens")]
    NotComputed {
        /// The request.
        request: RequestId,
        /// Computed positions.
        computed: usize,
        /// Tokens of the request.
        len: usize,
    },
    /// `evict` of more blocks than are cached.
    #[error("evict_too_many: evict {blocks} but only {cached} blocks are cached")]
    EvictTooMany {
        /// Blocks requested.
        blocks: u64,
        /// Cached blocks.
        cached: usize,
    },
    /// A configuration that breaks a rule of docs/contract.md §11.
    #[error("invalid_config: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// The rule it breaks, with its value.
        reason: String,
    },
}

impl PrefixError {
    /// The docs/contract.md §15 kind of this error.
    pub fn kind(&self) -> PrefixErrorKind {
        match self {
            PrefixError::InvalidArgument { .. } => PrefixErrorKind::InvalidArgument,
            PrefixError::UnknownRequest { .. } => PrefixErrorKind::UnknownRequest,
            PrefixError::DuplicateRequest { .. } => PrefixErrorKind::DuplicateRequest,
            PrefixError::EmptyPrompt { .. } => PrefixErrorKind::EmptyPrompt,
            PrefixError::Preempted { .. } => PrefixErrorKind::Preempted,
            PrefixError::NotPreempted { .. } => PrefixErrorKind::NotPreempted,
            PrefixError::NoRoom { .. } => PrefixErrorKind::NoRoom,
            PrefixError::ComputePastEnd { .. } => PrefixErrorKind::ComputePastEnd,
            PrefixError::RollbackTooFar { .. } => PrefixErrorKind::RollbackTooFar,
            PrefixError::NotComputed { .. } => PrefixErrorKind::NotComputed,
            PrefixError::EvictTooMany { .. } => PrefixErrorKind::EvictTooMany,
            PrefixError::InvalidConfig { .. } => PrefixErrorKind::InvalidConfig,
        }
    }
}

impl From<PrefixError> for PrefixErrorKind {
    fn from(error: PrefixError) -> PrefixErrorKind {
        error.kind()
    }
}

/// A count from a trace: negative values are `invalid_argument` naming the
/// argument (docs/contract.md §15).
pub(crate) fn non_negative_count(field: &'static str, value: i64) -> Result<u64, PrefixError> {
    u64::try_from(value).map_err(|_| PrefixError::InvalidArgument { field, value })
}
