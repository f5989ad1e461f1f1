//! The names of the self checks: the relations (the contract's §9, and M10
//! beyond it) and the single-run invariants I1–I8 (the contract's §9,
//! "Invariants of one run"): the vocabulary that traces, divergences and
//! reports use to say which check a failure breaks. What each relation
//! does is the engine's (`engine::relation`), what each invariant checks
//! is `engine::invariant`'s.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A check of the `self` oracle, no model asked: a relation of
/// docs/contract.md §9 between two runs (M1–M10, see `docs/relations.md`
/// for preconditions), or an invariant of one run (I1–I8, judged on the
/// original run alone; [`Relation::is_invariant`]).
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
    /// I1: no view lists a position twice (§4).
    #[serde(rename = "I1")]
    NoDuplicates,
    /// I2: a sink position, once written, stays in every view until a
    /// rewind to or below it, a reset, or a pin that makes it evictable.
    #[serde(rename = "I2")]
    SinksStay,
    /// I3: a pinned position stays in every view while its pin stands.
    #[serde(rename = "I3")]
    PinsStay,
    /// I4: where the resident set follows from the ops alone (no pin
    /// since the last reset), a view shows as many recent positions as
    /// the window `W − |P|` (or the recent window `r`) allows.
    #[serde(rename = "I4")]
    WindowWidth,
    /// I5: every exact-value row a view shows carries the bytes of the
    /// latest accepted write to its (position, head), zeros if none.
    #[serde(rename = "I5")]
    Provenance,
    /// I6: a view's K and V hold `B × |view| × heads written × D`
    /// elements.
    #[serde(rename = "I6")]
    ViewShape,
    /// I7: an accepted op returns the global end the contract gives it.
    #[serde(rename = "I7")]
    GlobalEnd,
    /// I8: an op the contract refuses in every state that agrees with
    /// the outcomes seen (a gap, a bad head range, a negative argument, a
    /// rewind past the global end, …) is refused.
    #[serde(rename = "I8")]
    MustRefuse,
}

impl Relation {
    /// Every check, in docs/contract.md order: the relations, then the
    /// invariants.
    pub const ALL: [Relation; 18] = [
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
        Relation::NoDuplicates,
        Relation::SinksStay,
        Relation::PinsStay,
        Relation::WindowWidth,
        Relation::Provenance,
        Relation::ViewShape,
        Relation::GlobalEnd,
        Relation::MustRefuse,
    ];

    /// The relations between two runs, M1–M10.
    pub const RELATIONS: [Relation; 10] = [
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

    /// The invariants of one run, I1–I8.
    pub const INVARIANTS: [Relation; 8] = [
        Relation::NoDuplicates,
        Relation::SinksStay,
        Relation::PinsStay,
        Relation::WindowWidth,
        Relation::Provenance,
        Relation::ViewShape,
        Relation::GlobalEnd,
        Relation::MustRefuse,
    ];

    /// Whether this is an invariant of one run (judged on the original run
    /// alone, no transformed run) rather than a relation between two.
    pub fn is_invariant(self) -> bool {
        self.index() >= Relation::RELATIONS.len()
    }

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
            Relation::NoDuplicates => "I1",
            Relation::SinksStay => "I2",
            Relation::PinsStay => "I3",
            Relation::WindowWidth => "I4",
            Relation::Provenance => "I5",
            Relation::ViewShape => "I6",
            Relation::GlobalEnd => "I7",
            Relation::MustRefuse => "I8",
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
            Relation::NoDuplicates => "no-duplicates",
            Relation::SinksStay => "sinks-stay",
            Relation::PinsStay => "pins-stay",
            Relation::WindowWidth => "window-width",
            Relation::Provenance => "provenance",
            Relation::ViewShape => "view-shape",
            Relation::GlobalEnd => "global-end",
            Relation::MustRefuse => "must-refuse",
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
            Relation::NoDuplicates => "invariant_i1",
            Relation::SinksStay => "invariant_i2",
            Relation::PinsStay => "invariant_i3",
            Relation::WindowWidth => "invariant_i4",
            Relation::Provenance => "invariant_i5",
            Relation::ViewShape => "invariant_i6",
            Relation::GlobalEnd => "invariant_i7",
            Relation::MustRefuse => "invariant_i8",
        }
    }

    /// The relation's place in [`Relation::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses `M9`, `m9`, `refusal-pure`, `I2` or `sinks-stay`.
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
