//! The one runner: a case, drawn for a profile ([`draw`]) and handed to
//! an oracle ([`run_case`]), with what the run did ([`CaseOutcome`]).
//!
//! Every engine that checks drawn cases goes through here: the property
//! suites (which draw under proptest's runner so that it can shrink, and
//! run each case with [`run_case`]), campaigns, power and the bench. The
//! oracle decides how a case is judged; against the model it is the
//! lockstep driver, op by op ([`crate::engine::oracle::model`]), the only
//! model path.

use std::sync::Arc;

use kvmodel::{Config, Model, Op};
use proptest::test_runner::TestRunner;

use crate::check::coverage::{Before, Coverage};
use crate::check::divergence::Divergence;
use crate::check::lockstep::Cut;
use crate::engine::oracle::Oracle;
use crate::engine::oracle::{Judged, NotChecked, Work};
use crate::engine::strategy::{Case, DrawError, Profile};
use crate::subject::{Capabilities, SubjectFailure, SubjectSpec};

/// What one case did.
pub struct CaseOutcome {
    /// Ops checked (up to and including a diverging one).
    pub ops_checked: usize,
    /// Events labelled.
    pub coverage: Coverage,
    /// The divergence, if the subject disagreed with the oracle.
    pub divergence: Option<Box<Divergence>>,
    /// What each relation judged (nothing against the model).
    pub judged: Judged,
    /// Judged ops the subject served with state: accepted writes of at
    /// least one position
    /// ([`Lockstep::served`](crate::check::lockstep::Lockstep::served)).
    pub served: usize,
    /// Ops drawn for the case.
    pub drawn: usize,
    /// Where the case left the subject's domain, if it did: the ops from
    /// there on were drawn but not judged.
    pub cut: Option<Cut>,
}

impl CaseOutcome {
    /// Drawn ops that were not judged because the case left the subject's
    /// domain.
    pub fn outside(&self) -> usize {
        self.cut
            .as_ref()
            .map_or(0, |cut| self.drawn.saturating_sub(cut.step))
    }
}

/// Why a case could not be drawn or run. Not a divergence (that is in the
/// [`CaseOutcome`]): a subject or profile that cannot take part at all.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The subject could not say what it can express (an `exec:` subject
    /// that did not start or did not say `hello`).
    #[error("cannot ask {subject} for its capabilities: {source}")]
    Capabilities {
        /// The subject, as suites name it (`the shipped caches`, `cache:ring`, …).
        subject: String,
        /// What went wrong.
        source: SubjectFailure,
    },
    /// The profile has no configuration the subject can express, or the
    /// strategy could not draw.
    #[error(transparent)]
    Draw(#[from] DrawError),
    /// The subject could not be opened or run on the case.
    #[error(transparent)]
    NotChecked(#[from] NotChecked),
}

/// What cases for `subject` checked against `oracle` may hold: the
/// subject's capabilities, and those of a subject the oracle runs of its
/// own beside it ([`Oracle::runs`]: an op or configuration only one of
/// them has would leave the case unjudged). Each subject is asked once
/// per call; an `exec:` subject's answer is kept by its pool.
pub fn capabilities(
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<Arc<Capabilities>, CaseError> {
    let own = capabilities_of(subject)?;
    match oracle.runs() {
        None => Ok(Arc::new(own)),
        Some(other) => Ok(Arc::new(own.shared_with(&capabilities_of(other)?))),
    }
}

fn capabilities_of(subject: &SubjectSpec) -> Result<Capabilities, CaseError> {
    subject
        .capabilities()
        .map_err(|source| CaseError::Capabilities {
            subject: subject.label(),
            source,
        })
}

/// Draws one case of `profile` from `runner` for `subject` and `oracle`:
/// within what both can express ([`capabilities`]), shaped by the oracle
/// ([`Oracle::draw`]: the relations shape cases into their domains).
pub fn draw(
    profile: &'static Profile,
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<Case, CaseError> {
    let capabilities = capabilities(subject, oracle)?;
    Ok(oracle.draw(profile, &capabilities, runner, max_ops)?)
}

/// Checks `case` on `subject` against `oracle`: the one runner. Against
/// the model the coverage, the served writes and the ops checked are the
/// lockstep driver's; an oracle that judges whole traces gets them from
/// the model on the judged ops ([`model_coverage`], [`served`]).
pub fn run_case(
    case: &Case,
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<CaseOutcome, CaseError> {
    let mut work = Work::default();
    let divergence = oracle.check_counted(&case.config, &case.ops, subject, &mut work)?;
    let (ops_checked, served_ops, coverage) = match work.walked.take() {
        Some(walked) => (walked.judged, walked.served, walked.coverage),
        None => {
            let judged = work.cut.as_ref().map_or(case.ops.len(), |cut| cut.step);
            let ops = &case.ops[..judged];
            (
                judged,
                served(&case.config, ops),
                model_coverage(&case.config, ops),
            )
        }
    };
    Ok(CaseOutcome {
        ops_checked,
        coverage,
        divergence,
        judged: work.judged,
        served: served_ops,
        drawn: case.ops.len(),
        cut: work.cut,
    })
}

/// [`draw`] and [`run_case`]: one case of `profile` from `runner`,
/// checked on `subject` against `oracle`.
pub fn draw_and_run(
    profile: &'static Profile,
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<CaseOutcome, CaseError> {
    let case = draw(profile, runner, max_ops, subject, oracle)?;
    run_case(&case, subject, oracle)
}

/// The events `ops` reach on the model (what the lockstep driver labels).
pub fn model_coverage(config: &Config, ops: &[Op]) -> Coverage {
    let mut coverage = Coverage::default();
    let Ok(mut model) = Model::new(config) else {
        return coverage;
    };
    for (i, op) in ops.iter().enumerate() {
        let before = Before::of(&model);
        let outcome = model.apply(i as u64, op).into();
        coverage.observe_from(&before, &model, op, &outcome);
    }
    coverage
}

/// The ops of `ops` (applied in order to a fresh model of `config`, which
/// must be valid) that are writes of at least one position the contract
/// accepts: what the lockstep driver counts as served, for the oracles
/// that check a trace whole.
pub fn served(config: &Config, ops: &[Op]) -> usize {
    let Ok(mut model) = Model::new(config) else {
        return 0;
    };
    ops.iter()
        .enumerate()
        .filter(|(i, op)| {
            let accepted = model.apply(*i as u64, op).is_ok();
            accepted && matches!(op, Op::Write(w) if w.len > 0)
        })
        .count()
}
