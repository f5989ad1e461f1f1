//! Why an oracle could not check a trace, or an oracle form does not
//! parse: the errors every judge and engine shares.

use crate::check::relation::Relation;
use crate::subject::{SubjectError, Unsupported};

/// Why a trace could not be checked at all (not a divergence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotChecked {
    /// The trace needs a capability a subject lacks: a skip.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// A subject could not be asked, opened or run.
    #[error("{0}")]
    Setup(String),
}

/// Why an oracle form does not parse
/// ([`Oracle::parse`](crate::engine::oracle::Oracle::parse)), or a trace's
/// `oracle` field names no oracle
/// ([`Oracle::of_tag`](crate::engine::oracle::Oracle::of_tag)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OracleError {
    /// `self:NAME` where `NAME` is no relation's id or name.
    #[error(
        "unknown relation {name:?}: expected one of {}",
        Relation::ALL.map(Relation::id).join(", ")
    )]
    UnknownRelation {
        /// The relation named.
        name: String,
    },
    /// Neither `model`, `self`, `self:RELATION` nor a subject form.
    #[error("not model, self, self:RELATION or a subject: {0}")]
    NotAnOracle(#[source] SubjectError),
    /// A trace's `oracle` field names a subject that does not parse.
    #[error(transparent)]
    TraceSubject(SubjectError),
}

/// `KVCHECK_ORACLE` holds something
/// [`Oracle::parse`](crate::engine::oracle::Oracle::parse) refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("KVCHECK_ORACLE: {source}")]
pub struct OracleEnvError {
    /// Why the value does not parse.
    pub source: OracleError,
}
