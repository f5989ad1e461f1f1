//! One generated case outside proptest's runner: drawn from a family
//! ([`draw_case`], [`draw_case_within`]) and checked in lockstep on a
//! subject ([`run_case_on`]), for campaigns, explore and the fuzz engines.

use std::sync::Arc;

use candle_core::Device;
use proptest::test_runner::TestRunner;
use proptest_state_machine::ReferenceStateMachine;

use super::{capabilities_of, with_subject, CaseError, Family, KvReference};
use crate::check::coverage::Coverage;
use crate::check::divergence::Divergence;
use crate::check::lockstep::{Cut, Lockstep, SetupError};
use crate::engine::strategy::profile_support;
use crate::subject::{Capabilities, SubjectSpec};
use kvmodel::{Config, Op};

/// What one generated case did, for campaigns.
pub struct CaseOutcome {
    /// Ops checked (up to and including a diverging one).
    pub ops_checked: usize,
    /// Events labelled.
    pub coverage: Coverage,
    /// The divergence, if the cache disagreed with the model.
    pub divergence: Option<Box<Divergence>>,
    /// What each relation judged (nothing against the model).
    pub judged: crate::engine::relation::Judged,
    /// Judged ops the subject served with state: accepted writes of at
    /// least one position ([`Lockstep::served`]).
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

/// Draws one op sequence of family `F` from `runner` and checks it on the
/// shipped caches.
pub fn run_cache_case<F: Family>(
    runner: &mut TestRunner,
    max_ops: usize,
) -> Result<CaseOutcome, CaseError> {
    run_case_on::<F>(runner, max_ops, &SubjectSpec::Cache)
}

/// Draws one op sequence of family `F` within `subject`'s capabilities
/// from `runner`: its configuration and ops. A profile the subject cannot
/// run at all is an error saying so ([`CaseError::Unsupported`]).
pub fn draw_case<F: Family>(
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
) -> Result<(Config, Vec<Op>), CaseError> {
    draw_case_within::<F>(runner, max_ops, subject, capabilities_of(subject)?)
}

/// [`draw_case`] within `capabilities` instead of `subject`'s own (those
/// of two subjects that both run the case,
/// [`shared_capabilities`](super::shared_capabilities)).
pub fn draw_case_within<F: Family>(
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
    capabilities: Arc<Capabilities>,
) -> Result<(Config, Vec<Op>), CaseError> {
    use proptest::strategy::{Strategy as _, ValueTree as _};
    profile_support(F::PROFILE, &capabilities)?;
    // The strategy reads the subject when it draws (initial states are a
    // static function), so the draw runs with it set.
    let (state, transitions, _) = with_subject(subject, capabilities, || {
        KvReference::<F>::sequential_strategy(1..=max_ops.max(1))
            .new_tree(runner)
            .map(|tree| tree.current())
    })
    .map_err(CaseError::Draw)?;
    Ok((state.model.config().clone(), transitions))
}

/// Draws one op sequence of family `F` within `subject`'s capabilities
/// from `runner` ([`draw_case`]) and checks it on `subject`.
pub fn run_case_on<F: Family>(
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
) -> Result<CaseOutcome, CaseError> {
    let (config, transitions) = draw_case::<F>(runner, max_ops, subject)?;
    let mut outcome = CaseOutcome {
        ops_checked: 0,
        coverage: Coverage::default(),
        divergence: None,
        judged: Default::default(),
        served: 0,
        drawn: transitions.len(),
        cut: None,
    };
    let mut lockstep = match Lockstep::open(&config, subject, &Device::Cpu) {
        Ok(lockstep) => lockstep,
        Err(SetupError::Outside { reason }) => {
            let reason = format!("the configuration is outside its domain ({reason})");
            outcome.cut = Some(Cut::at_open(&config, &transitions, reason));
            return Ok(outcome);
        }
        Err(e) => return Err(e.into()),
    };
    for op in &transitions {
        if let Err(divergence) = lockstep.step(op) {
            outcome.divergence = Some(divergence);
            break;
        }
        if lockstep.cut().is_some() {
            break;
        }
    }
    outcome.ops_checked = lockstep.judged();
    outcome.served = lockstep.served();
    outcome.cut = lockstep.cut().cloned();
    outcome.coverage = lockstep.coverage().clone();
    Ok(outcome)
}

/// The ops of `ops` (applied in order to a fresh model of `config`, which
/// must be valid) that are writes of at least one position the contract
/// accepts: what [`Lockstep::served`] counts, for the oracles that check a
/// trace whole.
pub fn served(config: &Config, ops: &[Op]) -> usize {
    let Ok(mut model) = kvmodel::Model::new(config) else {
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

/// A case draw per entry of
/// [`PROFILES`](crate::engine::strategy::PROFILES), in the same order.
pub type CaseDraw =
    fn(&mut TestRunner, usize, &SubjectSpec) -> Result<(Config, Vec<Op>), CaseError>;

/// A case drawer within given capabilities per entry of
/// [`PROFILES`](crate::engine::strategy::PROFILES), in
/// the same order.
pub type CaseDrawWithin = fn(
    &mut TestRunner,
    usize,
    &SubjectSpec,
    Arc<Capabilities>,
) -> Result<(Config, Vec<Op>), CaseError>;

/// A case runner per entry of
/// [`PROFILES`](crate::engine::strategy::PROFILES), in the same order.
pub type CaseRunner = fn(&mut TestRunner, usize, &SubjectSpec) -> Result<CaseOutcome, CaseError>;
