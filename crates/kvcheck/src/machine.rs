//! The proptest state machines: the model as `ReferenceStateMachine`, the
//! cache (through the lockstep driver) as `StateMachineTest`.
//!
//! Each profile of [`crate::strategy::PROFILES`] gets a marker type
//! ([`Family`]) because proptest-state-machine draws initial states from a
//! static function. [`check_family`] runs one suite with the knobs below and
//! fails when a divergence is found (after shrinking, with the shrunk
//! sequence saved as a kvtrace file) or when a required event was never
//! reached.
//!
//! | knob | default | meaning |
//! |---|---|---|
//! | `KVCHECK_CASES` | 256 | op sequences per suite |
//! | `KVCHECK_MAX_OPS` | 40 | longest op sequence |
//! | `KVCHECK_SEED` | fixed per suite | proptest seed; set it to explore other sequences |

use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{
    Config as ProptestConfig, RngSeed, TestCaseError, TestError, TestRunner,
};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use crate::coverage::Coverage;
use crate::lockstep::Lockstep;
use crate::strategy::{ops, Profile, RefState, PROFILES};
use kvmodel::Op;

/// A profile as a type, for proptest-state-machine.
pub trait Family: 'static {
    /// The profile.
    const PROFILE: &'static Profile;
}

macro_rules! families {
    ($($(#[$doc:meta])* $name:ident => $index:expr),* $(,)?) => {
        $(
            $(#[$doc])*
            #[derive(Debug)]
            pub struct $name;
            impl Family for $name {
                const PROFILE: &'static Profile = &PROFILES[$index];
            }
        )*
    };
}

families! {
    /// Profile `tiny`.
    Tiny => 0,
    /// Profile `sinks`.
    Sinks => 1,
    /// Profile `window`.
    Window => 2,
    /// Profile `pins`.
    Pins => 3,
    /// Profile `growth`.
    Growth => 4,
    /// Profile `multi-head`.
    MultiHead => 5,
    /// Profile `batch2`.
    BatchTwo => 6,
    /// Profile `half`.
    Half => 7,
    /// Profile `packed`.
    Packed => 8,
}

/// The model side.
pub struct KvReference<F>(PhantomData<F>);

impl<F: Family> ReferenceStateMachine for KvReference<F> {
    type State = RefState;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<RefState> {
        (F::PROFILE.configs)()
            .prop_map(|config| RefState::new(&config))
            .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Op> {
        ops(state)
    }

    fn apply(mut state: RefState, op: &Op) -> RefState {
        state.apply(op);
        state
    }
}

/// The cache side, checked through [`Lockstep`].
pub struct KvLockstep<F>(PhantomData<F>);

thread_local! {
    /// Coverage of the suite running on this thread (proptest runs every
    /// case of a suite on the calling thread).
    static COVERAGE: RefCell<Coverage> = RefCell::new(Coverage::default());
}

/// Where a suite saves the trace of its latest failing case. Proptest
/// shrinks by re-running failing cases, so the file left behind holds the
/// shrunk sequence.
pub fn failure_path(profile: &Profile) -> PathBuf {
    PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
        .join("kvcheck-failures")
        .join(format!("{}.kvtrace.json", profile.name))
}

impl<F: Family> StateMachineTest for KvLockstep<F> {
    type SystemUnderTest = Lockstep;
    type Reference = KvReference<F>;

    fn init_test(state: &RefState) -> Lockstep {
        Lockstep::new(state.model.config())
            .unwrap_or_else(|e| panic!("cannot build the cache: {e}"))
    }

    fn apply(mut lockstep: Lockstep, _state: &RefState, op: Op) -> Lockstep {
        if let Err(mut divergence) = lockstep.step(&op) {
            let path = failure_path(F::PROFILE);
            if divergence.save_as(&path).is_err() {
                eprintln!("could not save {}", path.display());
            }
            // resume_unwind skips the panic hook: proptest re-runs failing
            // cases while shrinking, and one report at the end is enough.
            std::panic::resume_unwind(Box::new(divergence.to_string()));
        }
        lockstep
    }

    fn teardown(lockstep: Lockstep, _state: RefState) {
        COVERAGE.with(|c| c.borrow_mut().merge(lockstep.coverage()));
    }
}

/// Knobs of a suite run, read from the environment (see the module docs).
#[derive(Clone, Debug)]
pub struct SuiteSettings {
    /// `KVCHECK_CASES`, default 256.
    pub cases: u32,
    /// `KVCHECK_MAX_OPS`, default 40.
    pub max_ops: usize,
    /// `KVCHECK_SEED`; `None` means a fixed seed per profile.
    pub seed: Option<u64>,
}

impl SuiteSettings {
    /// Reads `KVCHECK_CASES`, `KVCHECK_MAX_OPS` and `KVCHECK_SEED`; a value
    /// that does not parse is an error naming the variable.
    pub fn from_env() -> Result<SuiteSettings, String> {
        fn var<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(text) => text
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={text:?} is not a valid number")),
            }
        }
        Ok(SuiteSettings {
            cases: var("KVCHECK_CASES")?.unwrap_or(256),
            max_ops: var("KVCHECK_MAX_OPS")?.unwrap_or(40).max(1),
            seed: var("KVCHECK_SEED")?,
        })
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

/// Runs the suite of family `F`. Returns its coverage, or a message naming
/// the divergence (with the saved shrunk trace) or the events never reached.
pub fn check_family<F: Family>(settings: &SuiteSettings) -> Result<Coverage, String> {
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
            return Err(format!(
                "profile {}: divergence found in case {} of {}, shrunk to {} ops in {} more runs\n{}\nshrunk trace: {}\nreproduce: cargo run --release -p kvcheck -- replay {}",
                profile.name,
                first_failure.get().unwrap_or(0),
                settings.cases,
                transitions.len(),
                runs.get().saturating_sub(first_failure.get().unwrap_or(0)),
                reason.message(),
                failure_path(profile).display(),
                failure_path(profile).display()
            ))
        }
        Err(TestError::Abort(reason)) => return Err(format!("profile {}: aborted: {reason}", profile.name)),
    }
    let missing = coverage.missing(profile.required);
    if !missing.is_empty() {
        return Err(format!(
            "profile {}: {} cases never reached {:?}; the op strategy is too weak for it\ncoverage:\n{coverage}",
            profile.name, settings.cases, missing
        ));
    }
    Ok(coverage)
}

/// What one generated case did, for campaigns.
pub struct CaseOutcome {
    /// Ops checked (up to and including a diverging one).
    pub ops_checked: usize,
    /// Events labelled.
    pub coverage: Coverage,
    /// The divergence, if the cache disagreed with the model.
    pub divergence: Option<Box<crate::divergence::Divergence>>,
}

/// Draws one op sequence of family `F` from `runner` and checks it.
pub fn run_case<F: Family>(runner: &mut TestRunner, max_ops: usize) -> Result<CaseOutcome, String> {
    use proptest::strategy::{Strategy as _, ValueTree as _};
    let strategy = KvReference::<F>::sequential_strategy(1..=max_ops.max(1));
    let (state, transitions, _) = strategy
        .new_tree(runner)
        .map_err(|e| e.to_string())?
        .current();
    let mut lockstep = Lockstep::new(state.model.config()).map_err(|e| e.to_string())?;
    let mut outcome = CaseOutcome {
        ops_checked: 0,
        coverage: Coverage::default(),
        divergence: None,
    };
    for op in &transitions {
        outcome.ops_checked += 1;
        if let Err(divergence) = lockstep.step(op) {
            outcome.divergence = Some(divergence);
            break;
        }
    }
    outcome.coverage = lockstep.coverage().clone();
    Ok(outcome)
}

/// A case runner per entry of [`PROFILES`], in the same order.
pub type CaseRunner = fn(&mut TestRunner, usize) -> Result<CaseOutcome, String>;

/// [`run_case`] for each profile, aligned with [`PROFILES`].
pub const CASE_RUNNERS: [CaseRunner; 9] = [
    run_case::<Tiny>,
    run_case::<Sinks>,
    run_case::<Window>,
    run_case::<Pins>,
    run_case::<Growth>,
    run_case::<MultiHead>,
    run_case::<BatchTwo>,
    run_case::<Half>,
    run_case::<Packed>,
];
