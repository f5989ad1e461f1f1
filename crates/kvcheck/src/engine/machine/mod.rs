//! The proptest state machines: the model as `ReferenceStateMachine`, the
//! cache (through the lockstep driver) as `StateMachineTest`.
//!
//! Each profile of [`crate::engine::strategy::PROFILES`] gets a marker type
//! ([`Family`]) because proptest-state-machine draws initial states from a
//! static function. [`check_family`] runs one suite with the knobs below
//! (a [`SuiteSettings`], resolved from [`Settings`] where the suite starts)
//! and fails when a divergence is found (after shrinking, with the shrunk
//! sequence saved as a kvtrace file) or when a required event was never
//! reached.
//!
//! | knob | default | meaning |
//! |---|---|---|
//! | `KVCHECK_CASES` | 256 | op sequences per suite |
//! | `KVCHECK_MAX_OPS` | 40 | longest op sequence |
//! | `KVCHECK_SEED` | fixed per suite | proptest seed; set it to explore other sequences |
//! | `KVCHECK_SUBJECT` | `cache` | the subject: `cache`, `cache:ring`, `reference`, `fault:NAME` or `exec:COMMAND ARGS` |
//! | `KVCHECK_SUBJECT_TIMEOUT` | 10 | seconds an `exec:` subject has per response |
//! | `KVCHECK_EXACT_KINDS` | unset | `1`: an `exec:` subject's error kinds must match the model's |
//! | `KVCHECK_ORACLE` | `model` | what the subject is checked against (`self`, another subject) |
//! | `KVCHECK_MAX_TESTS` | 2000 | runs a minimization against another oracle may spend |
//! | `KVCHECK_RELATION_INSTANCES` | 2 | instances of each relation per trace (`KVCHECK_ORACLE=self`) |
//!
//! A suite draws only what its subject can express (see
//! [`crate::subject::Capabilities`]): a profile none of whose
//! configurations the subject supports is skipped with the reason, and
//! events that need a missing capability are not required.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;

use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use crate::check::coverage::Coverage;
use crate::check::divergence::Divergence;
use crate::check::lockstep::{Lockstep, SetupError};
use crate::engine::relation::{NotChecked, OracleEnvError};
use crate::engine::strategy::{profile_configs, Profile, RefState, PROFILES};
use crate::settings::{SettingError, Settings};
use crate::subject::{Capabilities, SubjectEnvError, SubjectFailure, SubjectSpec, Unsupported};
use kvmodel::Op;

mod case;
mod suite;

pub use case::{
    draw_case, draw_case_within, run_cache_case, run_case_on, served, CaseDraw, CaseDrawWithin,
    CaseOutcome, CaseRunner,
};
pub use suite::{check_family, Suite, SuiteSettings};

thread_local! {
    /// The subject of the suite or case running on this thread, with its
    /// capabilities: proptest-state-machine draws initial states and opens
    /// the system under test from static functions, so they read it here.
    static SUBJECT: RefCell<(SubjectSpec, Arc<Capabilities>)> =
        RefCell::new((SubjectSpec::Cache, Arc::new(Capabilities::full())));
}

/// Runs `f` with `subject` (and its capabilities) as this thread's subject,
/// restoring the previous one afterwards.
fn with_subject<T>(
    subject: &SubjectSpec,
    capabilities: Arc<Capabilities>,
    f: impl FnOnce() -> T,
) -> T {
    let previous = SUBJECT.with(|s| s.replace((subject.clone(), capabilities)));
    let result = f();
    SUBJECT.with(|s| *s.borrow_mut() = previous);
    result
}

fn current_subject() -> (SubjectSpec, Arc<Capabilities>) {
    SUBJECT.with(|s| s.borrow().clone())
}

thread_local! {
    /// Where the suite running on this thread saves its failing traces
    /// ([`SuiteSettings::failures_dir`]): the system under test saves them
    /// from a static function, so it reads the folder here.
    static FAILURES_DIR: RefCell<PathBuf> = RefCell::new(Settings::default().failures_dir);
}

/// Runs `f` with `dir` as this thread's failures folder, restoring the
/// previous one afterwards.
fn with_failures_dir<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    let previous = FAILURES_DIR.with(|d| d.replace(dir.to_path_buf()));
    let result = f();
    FAILURES_DIR.with(|d| *d.borrow_mut() = previous);
    result
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
    /// The profile has no configuration the subject can express.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// The strategy could not draw a case (proptest's reason).
    #[error("{0}")]
    Draw(proptest::test_runner::Reason),
    /// The drawn configuration could not be opened in lockstep.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The drawn trace could not be checked against an oracle other than
    /// the model.
    #[error(transparent)]
    NotChecked(#[from] NotChecked),
}

/// A lockstep suite's divergence after proptest shrank it
/// ([`SuiteError::Diverged`]): where it was found, the report of the shrunk
/// case, and how to replay its saved trace.
#[derive(Debug, thiserror::Error)]
#[error(
    "profile {profile}: divergence found in case {case} of {cases} on {subject} ({kinds}), shrunk to {ops} ops in {shrink_runs} more runs\n{report}\nshrunk trace: {}\nreproduce: {reproduce}",
    .trace.display()
)]
pub struct ShrunkDivergence {
    /// The profile.
    pub profile: &'static str,
    /// The case (counted from 1) that failed first.
    pub case: usize,
    /// Cases the suite draws.
    pub cases: u32,
    /// The subject, as suites name it.
    pub subject: String,
    /// How refusals are compared ([`SubjectSpec::kinds_mode`]).
    pub kinds: &'static str,
    /// Ops of the shrunk case.
    pub ops: usize,
    /// Runs spent shrinking.
    pub shrink_runs: usize,
    /// The divergence report of the shrunk case.
    pub report: String,
    /// Where the shrunk trace is saved.
    pub trace: PathBuf,
    /// The command that replays it.
    pub reproduce: String,
}

/// Why a suite ([`check_family`], a [`Suite`]) failed: its cases could not
/// be drawn, the subject diverged, or a required event was never reached.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The cases could not be drawn or run (see [`CaseError`]).
    #[error(transparent)]
    Case(#[from] CaseError),
    /// The subject diverged from the model; proptest shrank the case and
    /// the shrunk trace is saved.
    #[error(transparent)]
    Diverged(Box<ShrunkDivergence>),
    /// Checked against an oracle other than the model, a case diverged; it
    /// was minimized against the same oracle and saved.
    #[error(
        "profile {profile}: divergence found in case {case} of {cases} on {subject} against oracle {oracle}\n{divergence}\nshrunk trace: {trace}"
    )]
    OracleDiverged {
        /// The profile.
        profile: &'static str,
        /// The case (0-based) that diverged.
        case: u32,
        /// Cases the suite draws.
        cases: u32,
        /// The subject's name.
        subject: String,
        /// The oracle, as `--oracle` takes it.
        oracle: String,
        /// The minimized divergence.
        divergence: Box<Divergence>,
        /// Where its trace is saved, or why it is not.
        trace: String,
    },
    /// A case could not be checked against an oracle other than the model.
    #[error("profile {profile}: {source}")]
    NotChecked {
        /// The profile.
        profile: &'static str,
        /// Why.
        source: NotChecked,
    },
    /// Proptest gave up on the suite (too many rejected cases).
    #[error("profile {profile}: aborted: {reason}")]
    Aborted {
        /// The profile.
        profile: &'static str,
        /// Proptest's reason.
        reason: proptest::test_runner::Reason,
    },
    /// Every case passed but some required events were never reached: the
    /// op strategy is too weak to test what they cover.
    #[error(
        "profile {profile}: {cases} cases never reached {missing:?}; the op strategy is too weak for it{}",
        .coverage.as_ref().map_or(String::new(), |c| format!("\ncoverage:\n{c}"))
    )]
    EventsMissed {
        /// The profile.
        profile: &'static str,
        /// Cases the suite drew.
        cases: u32,
        /// The events never reached.
        missing: Vec<String>,
        /// The events the cases did reach, when reported.
        coverage: Option<Coverage>,
    },
}

/// Why [`SuiteSettings::new`] (or [`SuiteSettings::from_env`]) refused the
/// settings: the error names the variable.
#[derive(Debug, thiserror::Error)]
pub enum SuiteSettingsError {
    /// A number, duration or flag knob holds something it cannot.
    #[error(transparent)]
    Knob(#[from] SettingError),
    /// `KVCHECK_SUBJECT` does not name a subject.
    #[error(transparent)]
    Subject(#[from] SubjectEnvError),
    /// `KVCHECK_ORACLE` does not name an oracle.
    #[error(transparent)]
    Oracle(#[from] OracleEnvError),
}

/// The capabilities of `subject`, or an error naming the subject.
/// What `subject` and `other` can both express (each asked once; an
/// `exec:` subject's answer is kept by its pool).
pub fn shared_capabilities(
    subject: &SubjectSpec,
    other: &SubjectSpec,
) -> Result<Arc<Capabilities>, CaseError> {
    Ok(Arc::new(
        capabilities_of(subject)?.shared_with(&*capabilities_of(other)?),
    ))
}

fn capabilities_of(subject: &SubjectSpec) -> Result<Arc<Capabilities>, CaseError> {
    subject
        .capabilities()
        .map(Arc::new)
        .map_err(|source| CaseError::Capabilities {
            subject: subject_label(subject),
            source,
        })
}

fn subject_label(subject: &SubjectSpec) -> String {
    match subject {
        SubjectSpec::Cache => "the shipped caches".to_string(),
        SubjectSpec::CachePath(path) => format!("cache:{path}"),
        other => other.name(&kvmodel::Config::dense(1)),
    }
}

/// A profile as a type, for proptest-state-machine.
pub trait Family: 'static {
    /// The profile.
    const PROFILE: &'static Profile;
}

/// The one list of families: each profile's type, and from the same list
/// the tables every engine indexes by profile ([`CASE_DRAWS`],
/// [`CASE_RUNNERS`], [`SUITES`]), sized by [`PROFILES`] so that a profile
/// added there and not here does not compile.
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

        /// [`draw_case`] for each profile, aligned with [`PROFILES`].
        pub const CASE_DRAWS: [CaseDraw; PROFILES.len()] = [$(draw_case::<$name>),*];

        /// [`draw_case_within`] for each profile, aligned with [`PROFILES`].
        pub const CASE_DRAWS_WITHIN: [CaseDrawWithin; PROFILES.len()] =
            [$(draw_case_within::<$name>),*];

        /// [`run_case_on`] for each profile, aligned with [`PROFILES`].
        pub const CASE_RUNNERS: [CaseRunner; PROFILES.len()] = [$(run_case_on::<$name>),*];

        /// [`check_family`] for each profile, aligned with [`PROFILES`].
        pub const SUITES: [Suite; PROFILES.len()] = [$(check_family::<$name>),*];

        /// Each family's profile is the entry of [`PROFILES`] at its index.
        #[cfg(test)]
        #[test]
        fn families_are_in_profile_order() {
            let names = [$($name::PROFILE.name),*];
            let expected: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
            assert_eq!(names.to_vec(), expected);
        }
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
    /// Profile `pipeline`.
    Pipeline => 9,
}

/// The model side.
pub struct KvReference<F>(PhantomData<F>);

impl<F: Family> ReferenceStateMachine for KvReference<F> {
    type State = RefState;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<RefState> {
        let (_, capabilities) = current_subject();
        profile_configs(F::PROFILE, Arc::clone(&capabilities))
            .prop_map(move |config| RefState::for_subject(&config, Arc::clone(&capabilities)))
            .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Op> {
        (F::PROFILE.ops)(state)
    }

    /// Inside the subject's declared domain: shaped draws stay inside, and
    /// shrinking never leaves it.
    fn preconditions(state: &RefState, op: &Op) -> bool {
        state.admits(op)
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
///
/// Suites run in parallel (threads of one test binary, several binaries at
/// once), so the name holds the subject the calling thread checks (none for
/// the shipped caches: `tiny.kvtrace.json`), and every save is atomic
/// ([`Trace::save`](crate::check::trace::Trace::save)): two suites never write
/// into one file, and a reader never sees half a trace. The file lies in
/// `dir` ([`SuiteSettings::failures_dir`]).
pub fn failure_path(profile: &Profile, dir: &Path) -> PathBuf {
    let (subject, _) = current_subject();
    let name = match subject {
        SubjectSpec::Cache => profile.name.to_string(),
        other => format!(
            "{}-{}",
            profile.name,
            other
                .name(&kvmodel::Config::dense(1))
                .chars()
                .take(48)
                .collect::<String>()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
        ),
    };
    dir.join(format!("{name}.kvtrace.json"))
}

impl<F: Family> StateMachineTest for KvLockstep<F> {
    type SystemUnderTest = Lockstep;
    type Reference = KvReference<F>;

    fn init_test(state: &RefState) -> Lockstep {
        let (subject, _) = current_subject();
        Lockstep::open(state.model.config(), &subject, &Device::Cpu).unwrap_or_else(|e| {
            std::panic::resume_unwind(Box::new(format!("cannot build the subject: {e}")))
        })
    }

    fn apply(mut lockstep: Lockstep, _state: &RefState, op: Op) -> Lockstep {
        if let Err(mut divergence) = lockstep.step(&op) {
            let path = FAILURES_DIR.with(|dir| failure_path(F::PROFILE, &dir.borrow()));
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
