//! The judge of a prefix cache with a policy of its own (another library's
//! accounting and eviction order): the invariants of docs/contract.md §17,
//! which hold whatever the policy, checked op by op from the run alone.
//!
//! Beside the cache it keeps a record of the requests (tokens, computed
//! count, preemption), which no policy changes: the refusals that depend on
//! the requests alone are then the contract's exactly, and every running
//! request's rows must be its own prefix's payload. It also keeps when
//! each block prefix was last sealed (computed whole) and when the cache
//! last evicted, which bound every hit from above (P4) and, while nothing
//! was evicted, from below (P5).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kvmodel::prefix::{
    check_rows, BlockCounts, PrefixConfig, PrefixErrorKind, PrefixOp, PrefixOutcome, RequestId,
    Token,
};

use super::lockstep::{PrefixDivergence, PrefixDivergenceKind};
use crate::subject::prefix::{Groups, PrefixFailure, PrefixSubjectCache};

/// An invariant of docs/contract.md §17 (and the refusal rule beside them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// P1: `in_use + cached + free = N`.
    Accounting,
    /// P2: no leak once every request is finished and the cache cleared.
    NoLeak,
    /// P3 (and P6): every row read is its own prefix's payload.
    Payload,
    /// P4: no hit past the longest prefix sealed earlier, off a block
    /// boundary, or past the cap.
    NoOverHit,
    /// P5: a hit reaches the longest prefix sealed since the last eviction.
    FullHit,
    /// P7: a refusal changes no count.
    PureRefusal,
    /// P8: `no_room` only when the op needs more than `free + cached`.
    NoRoomOnlyWhenFull,
    /// P9: an allocation of at most `free` blocks is never refused.
    RoomWhenFree,
    /// The refusals that depend on the requests alone are the contract's,
    /// and the contract's accepted ops are not refused otherwise.
    Refusals,
}

impl Invariant {
    /// Every invariant, in the order of §17.
    pub const ALL: [Invariant; 9] = [
        Invariant::Accounting,
        Invariant::NoLeak,
        Invariant::Payload,
        Invariant::NoOverHit,
        Invariant::FullHit,
        Invariant::PureRefusal,
        Invariant::NoRoomOnlyWhenFull,
        Invariant::RoomWhenFree,
        Invariant::Refusals,
    ];

    /// Its id in docs/contract.md §17 (`refusals` for the rule beside them).
    pub fn id(self) -> &'static str {
        match self {
            Invariant::Accounting => "P1",
            Invariant::NoLeak => "P2",
            Invariant::Payload => "P3",
            Invariant::NoOverHit => "P4",
            Invariant::FullHit => "P5",
            Invariant::PureRefusal => "P7",
            Invariant::NoRoomOnlyWhenFull => "P8",
            Invariant::RoomWhenFree => "P9",
            Invariant::Refusals => "refusals",
        }
    }

    /// Parses an id (`P5`, `p5`, `refusals`).
    pub fn from_id(id: &str) -> Option<Invariant> {
        Invariant::ALL
            .into_iter()
            .find(|i| i.id().eq_ignore_ascii_case(id))
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// A request as no policy changes it.
#[derive(Clone, Debug)]
struct Shadow {
    tokens: Vec<Token>,
    computed: usize,
    preempted: bool,
}

/// A prefix cache judged by §17's invariants (see the module docs).
///
/// Guarantee: [`PrefixInvariants::step`] returns `Ok` only when the op's
/// answer keeps every invariant not waived, and every running request then
/// reads back the payload of its own computed tokens (a preempted one is
/// refused `preempted`).
pub struct PrefixInvariants<C: PrefixSubjectCache> {
    /// The cache judged.
    pub cache: C,
    config: PrefixConfig,
    requests: BTreeMap<RequestId, Shadow>,
    /// Block prefix → the index of the op that last sealed it.
    sealed: BTreeMap<Vec<Token>, u64>,
    /// Block prefixes whose blocks a rollback may have given back, or that
    /// fell behind a request's window (a windowed cache may free them):
    /// still a bound for P4, no longer a promise for P5.
    doubtful: BTreeSet<Vec<Token>>,
    /// The index of the last op that evicted (or may have), if any.
    last_eviction: Option<u64>,
    waived: BTreeSet<Invariant>,
    step: usize,
    groups: Groups,
}

impl<C: PrefixSubjectCache> PrefixInvariants<C> {
    /// The judge of `cache`, every invariant but those in `waived` checked.
    pub fn new(cache: C, waived: BTreeSet<Invariant>) -> PrefixInvariants<C> {
        PrefixInvariants {
            groups: cache.groups(),
            config: cache.config().clone(),
            cache,
            requests: BTreeMap::new(),
            sealed: BTreeMap::new(),
            doubtful: BTreeSet::new(),
            last_eviction: None,
            waived,
            step: 0,
        }
    }

    /// Uncomputed tokens of a running request.
    pub fn uncomputed(&self, request: RequestId) -> Option<usize> {
        self.requests
            .get(&request)
            .filter(|r| !r.preempted)
            .map(|r| r.tokens.len() - r.computed)
    }

    /// Applies `op` under `index` and judges the answer; the subject's
    /// outcome, or the first broken invariant.
    pub fn step(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixOutcome, PrefixDivergence> {
        let step = self.step;
        self.step += 1;
        let before = self.cache.counts();
        let contract = self.refusal(op, before);
        let fail = |invariant: Option<Invariant>, expected: String, actual: String| {
            let kind = match invariant {
                Some(_) => PrefixDivergenceKind::Invariant,
                None => PrefixDivergenceKind::Subject,
            };
            PrefixDivergence {
                step,
                op: op.to_string(),
                op_name: op.name(),
                kind,
                expected: match invariant {
                    Some(i) => format!("{i}: {expected}"),
                    None => expected,
                },
                actual,
                class: contract.map_or("ok", PrefixErrorKind::name),
            }
        };
        let answer = self.cache.apply(index, op);
        let effect = match answer {
            Ok(effect) => effect,
            Err(PrefixFailure::Outside(reason)) => {
                let mut d = fail(None, "an answer".into(), reason);
                d.kind = PrefixDivergenceKind::Outside;
                return Err(d);
            }
            Err(PrefixFailure::Subject(problem)) => {
                return Err(fail(None, self.expected_text(contract), problem))
            }
            Err(PrefixFailure::Refused { kind, message, .. }) => {
                self.judge_refusal(op, contract, kind, before)
                    .map_err(|(i, want)| fail(Some(i), want, format!("err {kind}: {message}")))?;
                let after = self.cache.counts();
                self.check(Invariant::PureRefusal, after == before, || {
                    (
                        format!("a refusal changes nothing: {before}"),
                        format!("{after} after err {kind}"),
                    )
                })
                .map_err(|(i, want, got)| fail(Some(i), want, got))?;
                self.check_accounting(after)
                    .map_err(|(i, want, got)| fail(Some(i), want, got))?;
                self.probe_all()
                    .map_err(|(i, want, got)| fail(Some(i), want, got))?;
                return Ok(PrefixOutcome::Err(kind));
            }
        };
        if let Some(kind) = contract {
            let refused = format!("err {kind}");
            return Err(fail(Some(Invariant::Refusals), refused, effect.to_string()));
        }
        self.accept(index, op, &effect, before)
            .map_err(|(i, want, got)| fail(Some(i), want, got))?;
        Ok(PrefixOutcome::Ok(effect))
    }

    fn expected_text(&self, contract: Option<PrefixErrorKind>) -> String {
        match contract {
            Some(kind) => format!("err {kind}"),
            None => "an effect or no_room".into(),
        }
    }

    /// `Ok` when `holds` or `invariant` is waived; else what it wanted and
    /// what it saw.
    fn check(
        &self,
        invariant: Invariant,
        holds: bool,
        show: impl FnOnce() -> (String, String),
    ) -> Result<(), (Invariant, String, String)> {
        if holds || self.waived.contains(&invariant) {
            return Ok(());
        }
        let (want, got) = show();
        Err((invariant, want, got))
    }

    fn check_accounting(&self, counts: BlockCounts) -> Result<(), (Invariant, String, String)> {
        let n = self.config.blocks as u64;
        let sum = counts.in_use + counts.cached + counts.free;
        self.check(Invariant::Accounting, sum == n, || {
            (
                format!("in_use + cached + free = {n}"),
                format!("{counts} (sum {sum})"),
            )
        })
    }
}

mod judge;
