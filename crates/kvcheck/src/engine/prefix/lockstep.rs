//! A prefix cache and `kvmodel::prefix::PrefixModel`, driven op by op
//! (docs/contract.md Part II): the lockstep check of the prefix family.

use std::fmt;

use kvmodel::prefix::{
    check_rows, PrefixError, PrefixErrorKind, PrefixModel, PrefixOp, PrefixOutcome,
};

use crate::subject::prefix::{PrefixFailure, PrefixSubjectCache};

/// What a prefix divergence is about, from the coarsest to the finest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrefixDivergenceKind {
    /// The model's outcome is not the one the trace's `expect` names.
    Expect,
    /// The cache's effect or error is not the model's.
    Outcome,
    /// The cache's own audit (`PrefixCache::audit`) failed.
    Audit,
    /// The cache's block counts are not the model's.
    Counts,
    /// A running request reads back rows that are not its own prefix's
    /// payload (§16), or its read is refused when it should not be.
    Rows,
    /// An invariant of docs/contract.md §17 is broken (the judge of a
    /// subject with its own policy); the divergence's `expected` names it.
    Invariant,
    /// The subject failed to answer: an exception of its library, a crash,
    /// a timeout, a broken protocol line.
    Subject,
    /// The subject answered that the op lies outside its domain: not a
    /// failure, the case is cut before the op.
    Outside,
}

impl PrefixDivergenceKind {
    /// The lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            PrefixDivergenceKind::Expect => "expect",
            PrefixDivergenceKind::Outcome => "outcome",
            PrefixDivergenceKind::Audit => "audit",
            PrefixDivergenceKind::Counts => "counts",
            PrefixDivergenceKind::Rows => "rows",
            PrefixDivergenceKind::Invariant => "invariant",
            PrefixDivergenceKind::Subject => "subject",
            PrefixDivergenceKind::Outside => "outside",
        }
    }
}

impl fmt::Display for PrefixDivergenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The first disagreement of a prefix run: the step (the op's index in its
/// trace, from 0), the op, and what was expected against what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixDivergence {
    /// The op's position in the op list.
    pub step: usize,
    /// The op, in its compact form (`PrefixOp`'s `Display`).
    pub op: String,
    /// The op's name (`start`, `compute`, ...): what a minimizer keeps.
    pub op_name: &'static str,
    /// What the divergence is about.
    pub kind: PrefixDivergenceKind,
    /// What the reference (the model, or `expect` for
    /// [`PrefixDivergenceKind::Expect`]) says.
    pub expected: String,
    /// What the checked side (the cache, or the model for
    /// [`PrefixDivergenceKind::Expect`]) says.
    pub actual: String,
    /// The class of the model's outcome at the step ([`outcome_class`]):
    /// `ok` or the error kind's name.
    pub class: &'static str,
}

/// The model's answer as a report shows it.
fn show_model(expected: &Result<kvmodel::prefix::PrefixEffect, PrefixError>) -> String {
    match expected {
        Ok(effect) => effect.to_string(),
        Err(error) => format!("err {error}"),
    }
}

/// `ok` for an effect, the kind's snake_case name for a refusal: what an
/// [`PrefixDivergenceKind::Expect`] failure keeps while it is minimized.
pub fn outcome_class(outcome: &PrefixOutcome) -> &'static str {
    match outcome {
        PrefixOutcome::Ok(_) => "ok",
        PrefixOutcome::Err(kind) => kind.name(),
    }
}

impl PrefixDivergence {
    /// Whether `other` is the same failure for a minimizer: the same kind
    /// on the same op name and, for an [`PrefixDivergenceKind::Expect`]
    /// failure, a model outcome of the same class (an op the model
    /// accepted stays accepted, a refusal keeps its kind).
    pub fn same_failure(&self, other: &PrefixDivergence) -> bool {
        self.kind == other.kind
            && self.op_name == other.op_name
            && (self.kind != PrefixDivergenceKind::Expect || self.class == other.class)
    }
}

impl fmt::Display for PrefixDivergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = match self.kind {
            PrefixDivergenceKind::Expect => "",
            _ => "",
        };
        writeln!(
            f,
            "──── kvcheck: {} divergence at step {} ({}){on} ────",
            self.kind, self.step, self.op
        )?;
        writeln!(f, "expected: {}", self.expected)?;
        write!(f, "actual:   {}", self.actual)
    }
}

/// One prefix cache and the model, driven op by op.
///
/// Guarantee: [`PrefixLockstep::step`] returns `Ok` only when the cache
/// returned the model's very effect (hits and counts included) or the
/// model's very error, its audit passed, its counts are the model's, and
/// every running request of the model reads back, bit for bit, the payload
/// of its own computed prefix (a preempted one is refused `preempted`);
/// this holds after every op, a refused op included.
pub struct PrefixLockstep<C: PrefixSubjectCache> {
    /// The reference model.
    pub model: PrefixModel,
    /// The cache checked.
    pub cache: C,
    step: usize,
}

impl<C: PrefixSubjectCache> PrefixLockstep<C> {
    /// The cache and a fresh model of its config; the model's refusal of
    /// the config when it has one.
    pub fn new(cache: C) -> Result<PrefixLockstep<C>, PrefixError> {
        let model = PrefixModel::new(cache.config())?;
        Ok(PrefixLockstep {
            model,
            cache,
            step: 0,
        })
    }

    /// Applies `op` under `index` (the time stamp of what it releases, §14)
    /// to both and checks what the type's docs say; the model's outcome,
    /// or the first disagreement. Steps are counted from 0 per call.
    pub fn step(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixOutcome, PrefixDivergence> {
        let step = self.step;
        self.step += 1;
        let expected = self.model.apply(index, op);
        let class = match &expected {
            Ok(_) => "ok",
            Err(e) => e.kind().name(),
        };
        let at = |kind, expected: String, actual: String| PrefixDivergence {
            class,
            step,
            op: op.to_string(),
            op_name: op.name(),
            kind,
            expected,
            actual,
        };
        let actual = self.cache.apply(index, op);
        if let Err(failure @ (PrefixFailure::Outside(_) | PrefixFailure::Subject(_))) = &actual {
            let kind = match failure {
                PrefixFailure::Outside(_) => PrefixDivergenceKind::Outside,
                _ => PrefixDivergenceKind::Subject,
            };
            return Err(at(kind, show_model(&expected), failure.to_string()));
        }
        let agree = match (&expected, &actual) {
            (Ok(e), Ok(a)) => e == a,
            (Err(e), Err(a)) => a.agrees_with(e),
            _ => false,
        };
        if !agree {
            let actual = match &actual {
                Ok(effect) => effect.to_string(),
                Err(failure) => failure.to_string(),
            };
            return Err(at(
                PrefixDivergenceKind::Outcome,
                show_model(&expected),
                actual,
            ));
        }
        if let Err(e) = self.cache.audit() {
            return Err(at(
                PrefixDivergenceKind::Audit,
                "the cache's invariants hold".into(),
                e,
            ));
        }
        if self.cache.counts() != self.model.counts() {
            return Err(at(
                PrefixDivergenceKind::Counts,
                self.model.counts().to_string(),
                self.cache.counts().to_string(),
            ));
        }
        let config = self.model.config().clone();
        for (id, r) in self.model.requests() {
            let start = config.window_start(r.computed());
            let read = self.cache.probe(id, start);
            if r.is_preempted() {
                if read.as_ref().err().and_then(PrefixFailure::kind)
                    != Some(PrefixErrorKind::Preempted)
                {
                    return Err(at(
                        PrefixDivergenceKind::Rows,
                        format!("a read of preempted r{id} is refused preempted"),
                        match read {
                            Ok(rows) => format!("{} values read", rows.len()),
                            Err(failure) => failure.to_string(),
                        },
                    ));
                }
                continue;
            }
            let computed = &r.tokens()[..r.computed()];
            let checked = read.map_err(|e| e.to_string()).and_then(|rows| {
                check_rows(&config, computed, start, &rows).map_err(|e| e.to_string())
            });
            if let Err(why) = checked {
                return Err(at(
                    PrefixDivergenceKind::Rows,
                    format!(
                        "r{id} reads the payload of its {} computed tokens",
                        computed.len()
                    ),
                    format!("r{id}: {why}"),
                ));
            }
        }
        Ok(expected.into())
    }

    /// [`PrefixLockstep::step`] over `ops`, op `i` under `index(i)`: every
    /// outcome of the model, or the first divergence.
    pub fn run(
        &mut self,
        ops: &[PrefixOp],
        index: impl Fn(usize) -> u64,
    ) -> Result<Vec<PrefixOutcome>, PrefixDivergence> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| self.step(index(i), op))
            .collect()
    }
}
