//! A whole suite of one family under proptest: its knobs
//! ([`SuiteSettings`]) and its run ([`check_family`]).

use std::path::PathBuf;
use std::sync::Arc;

use proptest::test_runner::{
    Config as ProptestConfig, RngSeed, TestCaseError, TestError, TestRunner,
};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use super::{
    capabilities_of, failure_path, subject_label, with_failures_dir, with_subject, Family,
    KvLockstep, KvReference, ShrunkDivergence, SuiteError, SuiteSettingsError, COVERAGE,
};
use crate::check::coverage::Coverage;
use crate::engine::oracle::Oracle;
use crate::engine::strategy::{profile_support, required_events, Profile, PROFILES};
use crate::settings::Settings;
use crate::subject::{Capabilities, SubjectSpec};

/// Knobs of a suite run (see the module docs): what [`check_family`] and
/// [`crate::engine::suite::check_subject`] take, resolved from the
/// [`Settings`] of the entry point ([`SuiteSettings::new`]).
#[derive(Clone, Debug)]
pub struct SuiteSettings {
    /// `KVCHECK_CASES`, default 256.
    pub cases: u32,
    /// `KVCHECK_MAX_OPS`, default 40.
    pub max_ops: usize,
    /// `KVCHECK_SEED`; `None` means a fixed seed per profile.
    pub seed: Option<u64>,
    /// `KVCHECK_SUBJECT` (with `KVCHECK_SUBJECT_TIMEOUT` and
    /// `KVCHECK_EXACT_KINDS`); default: the shipped caches.
    pub subject: SubjectSpec,
    /// `KVCHECK_ORACLE`: what the subject is checked against (default: the
    /// model, op by op; `self` runs the relations of docs/contract.md §9 on each
    /// drawn sequence, `KVCHECK_RELATION_INSTANCES` instances of each,
    /// `SUBJECT` another implementation).
    pub oracle: Oracle,
    /// `KVCHECK_MAX_TESTS`, default 2000: the runs a minimization against
    /// an oracle other than the model may spend (the model's failures are
    /// shrunk by proptest).
    pub max_tests: usize,
    /// Where failing traces are saved: `$CARGO_TARGET_DIR/kvcheck-failures`,
    /// default `target/kvcheck-failures`.
    pub failures_dir: PathBuf,
}

impl Default for SuiteSettings {
    /// Every knob's default ([`Settings::default`]): the shipped caches
    /// against the model; reads nothing.
    fn default() -> SuiteSettings {
        SuiteSettings::new(&Settings::default()).expect("the default subject and oracle parse")
    }
}

impl SuiteSettings {
    /// The suite knobs of `settings`: its numbers as they are, its subject
    /// and oracle parsed and configured ([`SubjectSpec::configured`],
    /// [`Oracle::configured`](crate::engine::oracle::Oracle::configured)); text that does not parse is an error
    /// naming the variable.
    pub fn new(settings: &Settings) -> Result<SuiteSettings, SuiteSettingsError> {
        Ok(SuiteSettings {
            cases: settings.cases,
            max_ops: settings.max_ops,
            seed: settings.seed,
            subject: SubjectSpec::configured(settings)?,
            oracle: crate::engine::oracle::Oracle::configured(settings)?.unwrap_or_default(),
            max_tests: settings.max_tests,
            failures_dir: settings.failures_dir.clone(),
        })
    }

    /// The entry point of a property suite's test: [`Settings::from_env`]
    /// (every knob checked; a value that does not parse is an error naming
    /// the variable) and [`SuiteSettings::new`]. Library code takes a
    /// [`SuiteSettings`] instead.
    pub fn from_env() -> Result<SuiteSettings, SuiteSettingsError> {
        SuiteSettings::new(&Settings::from_env()?)
    }

    /// The same settings checking `subject`.
    pub fn with_subject(mut self, subject: SubjectSpec) -> SuiteSettings {
        self.subject = subject;
        self
    }

    /// The proptest configuration for `profile`.
    pub fn proptest_config(&self, profile: &Profile) -> ProptestConfig {
        let seed = self.seed.unwrap_or_else(|| {
            profile
                .name
                .bytes()
                .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
        });
        ProptestConfig {
            cases: self.cases,
            rng_seed: RngSeed::Fixed(seed),
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..ProptestConfig::default()
        }
    }
}

/// Runs the suite of family `F` on `settings.subject`. Returns its
/// coverage, or a [`SuiteError`] naming the divergence (with the saved
/// shrunk trace) or the events never reached. A profile the subject cannot run at
/// all (see [`profile_support`]) is skipped: a line on stderr says why and
/// the coverage is empty.
pub fn check_family<F: Family>(settings: &SuiteSettings) -> Result<Coverage, SuiteError> {
    let capabilities = capabilities_of(&settings.subject)?;
    if let Err(unsupported) = profile_support(F::PROFILE, &capabilities) {
        eprintln!("skipped: {unsupported}");
        return Ok(Coverage::default());
    }
    if !settings.oracle.stepwise() {
        let required = required_events(F::PROFILE, &capabilities);
        return crate::engine::oracle::check_cases(
            F::PROFILE,
            profile_index(F::PROFILE),
            settings,
            &required,
        );
    }
    with_subject(&settings.subject, Arc::clone(&capabilities), || {
        with_failures_dir(&settings.failures_dir, || {
            run_family::<F>(settings, &capabilities)
        })
    })
}

fn run_family<F: Family>(
    settings: &SuiteSettings,
    capabilities: &Capabilities,
) -> Result<Coverage, SuiteError> {
    let profile = F::PROFILE;
    let config = settings.proptest_config(profile);
    COVERAGE.with(|c| *c.borrow_mut() = Coverage::default());
    let mut runner = TestRunner::new(config.clone());
    let strategy = KvReference::<F>::sequential_strategy(1..=settings.max_ops);
    let runs = std::cell::Cell::new(0usize);
    let first_failure = std::cell::Cell::new(None);
    let result = runner.run(&strategy, |(state, transitions, seen)| {
        runs.set(runs.get() + 1);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            KvLockstep::<F>::test_sequential(config.clone(), state, transitions, seen)
        }));
        run.map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            if first_failure.get().is_none() {
                first_failure.set(Some(runs.get()));
            }
            TestCaseError::fail(message)
        })
    });
    let coverage = COVERAGE.with(|c| c.borrow().clone());
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, (_, transitions, _))) => {
            let trace = failure_path(profile, &settings.failures_dir);
            let reproduce = match &settings.subject {
                SubjectSpec::Cache => format!(
                    "cargo run --release -p kvcheck -- replay {}",
                    trace.display()
                ),
                SubjectSpec::Factory(_) => format!(
                    "kvcheck::engine::replay::replay(&Trace::load({:?})?, None, Some(factory.into()), None)",
                    trace.display()
                ),
                other => format!(
                    "cargo run --release -p kvcheck -- replay {} --subject {}",
                    trace.display(),
                    shell_words::quote(&subject_label(other))
                ),
            };
            return Err(SuiteError::Diverged(Box::new(ShrunkDivergence {
                profile: profile.name,
                case: first_failure.get().unwrap_or(0),
                cases: settings.cases,
                subject: subject_label(&settings.subject),
                kinds: settings.subject.kinds_mode(),
                ops: transitions.len(),
                shrink_runs: runs.get().saturating_sub(first_failure.get().unwrap_or(0)),
                report: reason.message().to_string(),
                trace,
                reproduce,
            })));
        }
        Err(TestError::Abort(reason)) => {
            return Err(SuiteError::Aborted {
                profile: profile.name,
                reason,
            })
        }
    }
    let required = required_events(profile, capabilities);
    let missing = coverage.missing(&required);
    if !missing.is_empty() {
        return Err(SuiteError::EventsMissed {
            profile: profile.name,
            cases: settings.cases,
            missing: missing.iter().map(|e| e.to_string()).collect(),
            coverage: Some(coverage),
        });
    }
    Ok(coverage)
}

fn profile_index(profile: &Profile) -> usize {
    PROFILES
        .iter()
        .position(|p| p.name == profile.name)
        .expect("families name entries of PROFILES")
}

/// A profile's suite: [`check_family`] of its family.
pub type Suite = fn(&SuiteSettings) -> Result<Coverage, SuiteError>;
