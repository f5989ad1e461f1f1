//! The names of the relations (the contract's §9, and M10 beyond it):
//! the vocabulary that traces, divergences and reports use to say which
//! relation a failure breaks. What each relation does is the engine's
//! (`engine::relation`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A relation of docs/contract.md §9 (see `docs/relations.md` for preconditions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Relation {
    /// M1: after `reset` the rest of the trace behaves as on a fresh cache
    /// with the current capacity and window.
    #[serde(rename = "M1")]
    ResetIsFresh,
    /// M2: a write of all heads equals two head-range writes `[0, h)` and
    /// `[h, H)` of the same rows.
    #[serde(rename = "M2")]
    HeadSplit,
    /// M3: changing the payload of one batch row changes no byte of the
    /// others.
    #[serde(rename = "M3")]
    BatchRowsIndependent,
    /// M4: changing the payload of one head changes no byte of the others.
    #[serde(rename = "M4")]
    HeadsIndependent,
    /// M5: a rewrite of the rows with the bytes they already hold changes
    /// nothing, and shows the view the first write showed.
    #[serde(rename = "M5")]
    RewriteIdempotent,
    /// M6: a zero-length write at the global end changes no other outcome.
    #[serde(rename = "M6")]
    ProbePure,
    /// M7: the same rows appended in other chunk sizes give the same view
    /// at every boundary both runs share.
    #[serde(rename = "M7")]
    ChunkingInvariant,
    /// M8: `write G+n` then `rewind G` changes nothing later.
    #[serde(rename = "M8")]
    AppendRewound,
    /// M9: removing a refused op changes no other outcome.
    #[serde(rename = "M9")]
    RefusalPure,
    /// M10 (beyond docs/contract.md §9): an append followed by a rewrite of exactly
    /// its rows equals the append carrying the rewrite's rows: the last
    /// write wins.
    #[serde(rename = "M10")]
    LastWriteWins,
}

impl Relation {
    /// Every relation, in docs/contract.md order.
    pub const ALL: [Relation; 10] = [
        Relation::ResetIsFresh,
        Relation::HeadSplit,
        Relation::BatchRowsIndependent,
        Relation::HeadsIndependent,
        Relation::RewriteIdempotent,
        Relation::ProbePure,
        Relation::ChunkingInvariant,
        Relation::AppendRewound,
        Relation::RefusalPure,
        Relation::LastWriteWins,
    ];

    /// `M1` … `M10`.
    pub fn id(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "M1",
            Relation::HeadSplit => "M2",
            Relation::BatchRowsIndependent => "M3",
            Relation::HeadsIndependent => "M4",
            Relation::RewriteIdempotent => "M5",
            Relation::ProbePure => "M6",
            Relation::ChunkingInvariant => "M7",
            Relation::AppendRewound => "M8",
            Relation::RefusalPure => "M9",
            Relation::LastWriteWins => "M10",
        }
    }

    /// A short name: `reset-is-fresh`, `refusal-pure`, …
    pub fn name(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "reset-is-fresh",
            Relation::HeadSplit => "head-split",
            Relation::BatchRowsIndependent => "batch-rows-independent",
            Relation::HeadsIndependent => "heads-independent",
            Relation::RewriteIdempotent => "rewrite-idempotent",
            Relation::ProbePure => "probe-pure",
            Relation::ChunkingInvariant => "chunking-invariant",
            Relation::AppendRewound => "append-rewound",
            Relation::RefusalPure => "refusal-pure",
            Relation::LastWriteWins => "last-write-wins",
        }
    }

    /// The divergence kind's name (`relation_m9`), used in file names.
    pub fn kind_name(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "relation_m1",
            Relation::HeadSplit => "relation_m2",
            Relation::BatchRowsIndependent => "relation_m3",
            Relation::HeadsIndependent => "relation_m4",
            Relation::RewriteIdempotent => "relation_m5",
            Relation::ProbePure => "relation_m6",
            Relation::ChunkingInvariant => "relation_m7",
            Relation::AppendRewound => "relation_m8",
            Relation::RefusalPure => "relation_m9",
            Relation::LastWriteWins => "relation_m10",
        }
    }

    /// The relation's place in [`Relation::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses `M9`, `m9` or `refusal-pure`.
    pub fn parse(text: &str) -> Option<Relation> {
        Relation::ALL
            .into_iter()
            .find(|r| r.id().eq_ignore_ascii_case(text) || r.name() == text)
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id(), self.name())
    }
}
