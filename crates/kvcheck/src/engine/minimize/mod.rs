//! Structured minimization of a failing trace.
//!
//! A trace *fails* when its subject, driven in lockstep with the model,
//! diverges. [`minimize`] shrinks such a trace while keeping **the same
//! failure**: the same [`DivergenceKind`](crate::check::divergence::DivergenceKind) on the same kind of op
//! ([`Op::name`]). It runs three families of passes until none of them makes
//! progress (or the test budget is spent):
//!
//! 1. **ops** — delta debugging over the op list: remove chunks of ops
//!    (halves, quarters, …), then single ops. Every accepted candidate is
//!    also cut after its own divergence step, since later ops never matter.
//! 2. **arguments** — per op, smaller lengths, starts, rewind targets and
//!    counts; drop head ranges and recent windows; and renumber positions
//!    downward (shift every op from some point on by −1).
//! 3. **config** — smaller capacity, sink, window, heads, head_dim, batch,
//!    global sink; dtype → f32; growth off; simpler packed policy. Every
//!    candidate config passes [`Config::validate`] before it is tried.
//!
//! The result is **1-minimal** whenever the budget was not exhausted: a final
//! single-op pass proves that removing any one op loses the failure
//! ([`Minimized::one_minimal`]).
//!
//! Why a structured reducer rather than proptest's shrinking: a saved trace
//! may come from anywhere (a fuzz target, the explorer, a hand-written repro),
//! and its ops are not independent: removing a write shifts every later
//! position's meaning. Passes that know what an op *is* (a length can shrink,
//! a head range can go) find much smaller traces than byte-level shrinking.

use std::fmt;

use kvmodel::{Config, Op};

use crate::check::divergence::Divergence;
use crate::check::trace::Trace;
use crate::engine::oracle::Oracle;
use crate::subject::SubjectSpec;

mod candidates;
mod measure;
mod reducer;

pub use measure::{Signature, Size};
use reducer::Reducer;

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ops, weight {}", self.ops, self.weight)
    }
}

/// What one pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassReport {
    /// `ops`, `arguments`, `config` or `one-minimal check`.
    pub name: &'static str,
    /// Candidates tried.
    pub tests: usize,
    /// Candidates that kept the failure and were taken.
    pub accepted: usize,
    /// Size after the pass.
    pub size: Size,
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<18} {:>4} tests, {:>3} taken → {}",
            self.name, self.tests, self.accepted, self.size
        )
    }
}

/// The result of [`minimize`].
#[derive(Debug)]
pub struct Minimized {
    /// The minimized trace, `expect` filled by the model and a note saying
    /// where it came from.
    pub trace: Trace,
    /// The divergence the minimized trace produces (same [`Signature`]).
    pub divergence: Box<Divergence>,
    /// The size of the input.
    pub before: Size,
    /// The size of the result.
    pub after: Size,
    /// Lockstep runs spent.
    pub tests_run: usize,
    /// The passes taken, in order.
    pub passes: Vec<PassReport>,
    /// Whether the final check proved that removing any single op loses the
    /// failure (false only when the budget ran out first).
    pub one_minimal: bool,
}

/// Why a trace could not be minimized.
#[derive(Debug, thiserror::Error)]
pub enum MinimizeError {
    /// The subject matches the model on the whole trace: nothing to keep.
    #[error("the trace does not fail: {subject} matches the model on all {ops} ops, so there is no failure to minimize")]
    DoesNotFail {
        /// The subject's name.
        subject: String,
        /// Number of ops replayed.
        ops: usize,
    },
    /// The subject could not be built for the trace's config.
    #[error("the subject cannot run this trace: {0}")]
    Setup(String),
}

/// Runs `ops` on `config` with `subject` against the model
/// ([`Oracle::model`], the lockstep driver) and returns its divergence,
/// if any. A subject that refuses the config, or
/// cannot express the config or an op (its [`Capabilities`]), counts as "no
/// divergence" so that shrinking never trades the failure for a setup error
/// and never introduces what the subject does not support.
///
/// [`Capabilities`]: crate::subject::Capabilities
pub fn run_subject(config: &Config, ops: &[Op], subject: &SubjectSpec) -> Option<Box<Divergence>> {
    Oracle::model().check(config, ops, subject).ok().flatten()
}

/// Shrinks the failing `trace` for `subject`, trying at most `max_tests`
/// candidates. See the module docs for the passes and the guarantee. A
/// trace that names its oracle ([`crate::check::trace::OracleTag`]) is shrunk
/// against it; [`minimize_with`] chooses one.
pub fn minimize(
    trace: &Trace,
    subject: SubjectSpec,
    max_tests: usize,
) -> Result<Minimized, MinimizeError> {
    minimize_keeping(trace, subject, &Oracle::model(), max_tests, |_| true)
}

/// [`minimize`] against `oracle` (or the oracle the trace names when
/// `oracle` is the model, see [`Oracle::for_trace`]), where a candidate must
/// also satisfy `keep` to count as the same failure: triage keeps a finer
/// signature than [`Signature`], so that the minimized trace of one finding
/// cannot drift to another.
pub fn minimize_keeping(
    trace: &Trace,
    subject: SubjectSpec,
    oracle: &Oracle,
    max_tests: usize,
    keep: impl Fn(&Divergence) -> bool + 'static,
) -> Result<Minimized, MinimizeError> {
    let oracle = Oracle::for_trace(oracle, trace.oracle.as_ref())
        .map_err(|e| MinimizeError::Setup(format!("the trace's oracle: {e}")))?;
    minimize_general(trace, subject, &oracle, max_tests, keep)
}

/// [`minimize`] against `oracle`. A relation failure keeps failing the same
/// relation: both runs are rebuilt from every candidate, so they shrink
/// together.
pub fn minimize_with(
    trace: &Trace,
    subject: SubjectSpec,
    oracle: &Oracle,
    max_tests: usize,
) -> Result<Minimized, MinimizeError> {
    minimize_general(trace, subject, oracle, max_tests, |_| true)
}

fn minimize_general(
    trace: &Trace,
    subject: SubjectSpec,
    oracle: &Oracle,
    max_tests: usize,
    keep: impl Fn(&Divergence) -> bool + 'static,
) -> Result<Minimized, MinimizeError> {
    let first = oracle
        .check(&trace.config, &trace.ops, &subject)
        .map_err(|e| MinimizeError::Setup(e.to_string()))?;
    let divergence = first.ok_or_else(|| MinimizeError::DoesNotFail {
        subject: subject.name(&trace.config),
        ops: trace.ops.len(),
    })?;
    // Only the relation that failed needs to keep failing.
    let oracle = oracle.narrowed(&divergence);
    let before = Size::of(&trace.config, &trace.ops);
    let mut state = Reducer {
        subject,
        oracle,
        signature: Signature::of(&divergence),
        keep: Box::new(keep),
        config: trace.config.clone(),
        ops: trace.ops.clone(),
        divergence,
        tests: 1,
        max_tests: max_tests.max(1),
    };
    let (ops, divergence) = state.cut(&trace.config, &trace.ops, state.divergence.clone());
    state.ops = ops;
    state.divergence = divergence;
    // A failure that the default trim mode shows as well is reported in
    // that mode, the simpler contract: tried on the whole trace before the
    // ops shrink (and on every candidate after, `Reducer::try_candidate`).
    if !state.config.trim.is_default() {
        let ops = state.ops.clone();
        let config = state.config.clone();
        state.try_candidate(&config, &ops);
    }
    let mut passes = Vec::new();
    loop {
        let start = state.size();
        for (name, pass) in [
            ("ops", Reducer::ops_pass as fn(&mut Reducer) -> usize),
            ("arguments", Reducer::arguments_pass),
            ("config", Reducer::config_pass),
        ] {
            let tests = state.tests;
            let accepted = pass(&mut state);
            passes.push(PassReport {
                name,
                tests: state.tests - tests,
                accepted,
                size: state.size(),
            });
        }
        if state.size() >= start || state.exhausted() {
            break;
        }
    }
    let tests = state.tests;
    let one_minimal = state.one_minimal();
    passes.push(PassReport {
        name: "one-minimal check",
        tests: state.tests - tests,
        accepted: 0,
        size: state.size(),
    });
    let after = state.size();
    let mut trace_out = Trace::new(state.config.clone(), state.ops.clone());
    if state.oracle.stepwise() {
        trace_out = trace_out.with_model_expect();
    } else {
        trace_out.oracle = state.divergence.trace.oracle.clone();
    }
    let origin = trace
        .note
        .as_deref()
        .map(|n| format!(" Original note: {n}"))
        .unwrap_or_default();
    trace_out.note = Some(format!(
        "Minimized by kvcheck minimize from {before} to {after}: {} at step {} ({}) on {}; expected {}, actual {}.{origin}",
        state.signature,
        state.divergence.step,
        state.divergence.op,
        state.divergence.subject,
        state.divergence.expected,
        state.divergence.actual,
    ));
    Ok(Minimized {
        trace: trace_out,
        divergence: state.divergence,
        before,
        after,
        tests_run: state.tests,
        passes,
        one_minimal,
    })
}
