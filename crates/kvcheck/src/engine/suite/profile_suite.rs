//! The property suite of one profile: its knobs ([`SuiteSettings`]), its
//! run ([`check_profile`]) and how it fails ([`SuiteError`]).
//!
//! A suite reads its knobs from [`Settings`] (the table of every knob,
//! its default and meaning is [`crate::settings::KNOBS`]): the cases, the
//! longest sequence, the seed, the subject with its options, the oracle,
//! the minimization budget and the relation instances.
//!
//! Against the model, the profile's sequences
//! ([`crate::engine::strategy::sequences`]) run under proptest's runner,
//! each case through the one runner ([`run_case`]), and proptest shrinks a
//! failing one. Against an oracle that judges whole traces, the oracle
//! draws each case ([`case::draw`]) and a failing one is minimized against
//! it ([`minimize_with`]). Either way a failure is a [`SuiteDivergence`]
//! holding the structured [`Divergence`], its trace saved.
//!
//! A suite draws only what its subject can express (see
//! [`crate::subject::Capabilities`]): a profile none of whose
//! configurations the subject supports is skipped with the reason, and
//! events that need a missing capability are not required.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use proptest::test_runner::{TestCaseError, TestError, TestRunner};

use crate::check::coverage::{Coverage, CUT_CASE};
use crate::check::divergence::{file_name_part, Divergence};
use crate::check::trace::{Trace, TraceError};
use crate::engine::case::{self, run_case, CaseError};
use crate::engine::minimize::{minimize_keeping, minimize_with};
use crate::engine::strategy::{
    profile_support, required_events, sequences, Case, DrawError, Profile,
};
use crate::subject::{Capabilities, SubjectSpec};

use super::settings::SuiteSettings;

/// A suite's divergence ([`SuiteError::Diverged`]): where it was found,
/// the divergence of the reduced case (shrunk by proptest against the
/// model, minimized against any other oracle), where its trace is saved
/// and how to replay it.
#[derive(Debug)]
pub struct SuiteDivergence {
    /// The profile.
    pub profile: &'static str,
    /// The case (counted from 1) that failed first.
    pub case: usize,
    /// Cases the suite draws.
    pub cases: u32,
    /// The subject, as suites name it ([`SubjectSpec::label`]).
    pub subject: String,
    /// How refusals are compared ([`SubjectSpec::kinds_mode`]).
    pub kinds: &'static str,
    /// The oracle, as `--oracle` takes it.
    pub oracle: String,
    /// Ops of the reduced case.
    pub ops: usize,
    /// Runs spent reducing it.
    pub reduce_runs: usize,
    /// The divergence of the reduced case.
    pub divergence: Box<Divergence>,
    /// Where its trace is saved, or why it is not.
    pub trace: Result<PathBuf, TraceError>,
    /// The command that replays it.
    pub reproduce: String,
}

impl fmt::Display for SuiteDivergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.oracle == "model" {
            "shrunk"
        } else {
            "minimized"
        };
        writeln!(
            f,
            "profile {}: divergence found in case {} of {} on {} against oracle {} ({}), {how} to {} ops in {} more runs",
            self.profile, self.case, self.cases, self.subject, self.oracle, self.kinds, self.ops, self.reduce_runs
        )?;
        writeln!(f, "{}", self.divergence)?;
        match &self.trace {
            Ok(path) => writeln!(f, "shrunk trace: {}", path.display())?,
            Err(why) => writeln!(f, "shrunk trace: (not saved: {why})")?,
        }
        write!(f, "reproduce: {}", self.reproduce)
    }
}

impl std::error::Error for SuiteDivergence {}

/// Why a suite ([`check_profile`], [`super::check_subject`]) failed: its
/// cases could not be drawn or run, the subject diverged, or a required
/// event was never reached.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The cases of `profile` could not be drawn or run (see
    /// [`CaseError`]).
    #[error("profile {profile}: {source}")]
    Case {
        /// The profile.
        profile: &'static str,
        /// Why its cases could not be drawn or run.
        source: CaseError,
    },
    /// The subject diverged; the case was reduced and its trace saved.
    #[error(transparent)]
    Diverged(Box<SuiteDivergence>),
    /// The subject panicked on a case; proptest shrank it and its trace
    /// is saved.
    #[error(
        "profile {profile}: {subject} panicked: {message}\nshrunk trace: {}",
        .trace.as_ref().map_or_else(|why| format!("(not saved: {why})"), |p| p.display().to_string())
    )]
    Panicked {
        /// The profile.
        profile: &'static str,
        /// The subject, as suites name it.
        subject: String,
        /// The panic's message.
        message: String,
        /// Where the shrunk case's trace is saved, or why it is not.
        trace: Result<PathBuf, Box<TraceError>>,
    },
    /// A case failed and left no account of why (a failing run always
    /// records one: this is kvcheck's own fault).
    #[error("profile {profile}: a case failed without recording why")]
    Unrecorded {
        /// The profile.
        profile: &'static str,
    },
    /// Proptest gave up on the suite (too many rejected cases).
    #[error("profile {profile}: aborted: {reason}")]
    Aborted {
        /// The profile.
        profile: &'static str,
        /// Proptest's reason.
        reason: proptest::test_runner::Reason,
    },
    /// Every case passed but some required events were never reached:
    /// the subject cut the cases short (answering *outside* its domain),
    /// or the op strategy is too weak to test what they cover.
    #[error(
        "profile {profile}: {cases} cases never reached {missing:?}; {}\ncoverage:\n{coverage}",
        if *cut > 0 {
            format!("{cut} of them were cut where the subject answered outside its domain: declare that domain so that kvcheck draws inside it")
        } else {
            "the op strategy is too weak for it".to_string()
        }
    )]
    EventsMissed {
        /// The profile.
        profile: &'static str,
        /// Cases the suite drew.
        cases: u32,
        /// Cases cut by an *outside* answer.
        cut: u64,
        /// The events never reached.
        missing: Vec<String>,
        /// The events the cases did reach.
        coverage: Coverage,
    },
}

impl SuiteError {
    /// The error for `profile`'s cases that could not be drawn or run.
    fn case(profile: &'static Profile) -> impl Fn(CaseError) -> SuiteError {
        move |source| SuiteError::Case {
            profile: profile.name,
            source,
        }
    }
}

/// Runs the suite of `profile` on `settings.subject` against
/// `settings.oracle`. Returns its coverage, or a [`SuiteError`] holding
/// the divergence (with the saved reduced trace) or naming the events
/// never reached. A profile the subject cannot run at all (see
/// [`profile_support`]) is skipped: a line on stderr says why and the
/// coverage is empty.
pub fn check_profile(
    profile: &'static Profile,
    settings: &SuiteSettings,
) -> Result<Coverage, SuiteError> {
    let capabilities = case::capabilities(&settings.subject, &settings.oracle)
        .map_err(SuiteError::case(profile))?;
    if let Err(unsupported) = profile_support(profile, &capabilities) {
        eprintln!("skipped: {unsupported}");
        return Ok(Coverage::default());
    }
    let required = required_events(profile, &capabilities);
    let coverage = if settings.oracle.stepwise() {
        shrunk_cases(profile, settings, capabilities)?
    } else {
        minimized_cases(profile, settings, &capabilities)?
    };
    let missing = coverage.missing(&required);
    if !missing.is_empty() {
        return Err(SuiteError::EventsMissed {
            profile: profile.name,
            cases: settings.cases,
            cut: coverage.count(CUT_CASE),
            missing: missing.iter().map(|e| e.to_string()).collect(),
            coverage,
        });
    }
    Ok(coverage)
}

/// The last failing run of a suite under proptest: proptest shrinks by
/// re-running failing cases, so the last one is the shrunk case.
enum Failed {
    Diverged(Box<Divergence>),
    Broken(CaseError),
    Panicked { message: String, case: Case },
}

fn shrunk_cases(
    profile: &'static Profile,
    settings: &SuiteSettings,
    capabilities: Arc<Capabilities>,
) -> Result<Coverage, SuiteError> {
    let config = settings.proptest_config(profile);
    let strategy = sequences(profile, capabilities, settings.max_ops)
        .map_err(|e| SuiteError::case(profile)(DrawError::from(e).into()))?;
    let mut runner = TestRunner::new(config);
    let coverage = RefCell::new(Coverage::default());
    let failed = RefCell::new(None);
    let runs = Cell::new(0usize);
    let first_failure = Cell::new(None);
    let result = runner.run(&strategy, |(state, ops, seen)| {
        runs.set(runs.get() + 1);
        let case = Case {
            config: state.model.config().clone(),
            ops,
        };
        // A subject that panics fails the case like a divergence, so that
        // proptest shrinks it too.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_case(&case, &settings.subject, &settings.oracle)
        }));
        let (checked, failure) = match run {
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                (case.ops.len(), Failed::Panicked { message, case })
            }
            Ok(Ok(outcome)) => {
                coverage.borrow_mut().merge(&outcome.coverage);
                if outcome.cut.is_some() {
                    coverage.borrow_mut().hit(CUT_CASE);
                }
                let Some(divergence) = outcome.divergence else {
                    return Ok(());
                };
                (outcome.ops_checked, Failed::Diverged(divergence))
            }
            Ok(Err(e)) => (case.ops.len(), Failed::Broken(e)),
        };
        // Proptest drops the ops after the last one a failing case saw
        // before it shrinks: nothing after a divergence matters.
        if let Some(seen) = seen {
            seen.store(checked, Ordering::SeqCst);
        }
        first_failure.set(first_failure.get().or(Some(runs.get())));
        let message = match &failure {
            Failed::Diverged(d) => d.summary(),
            Failed::Broken(e) => e.to_string(),
            Failed::Panicked { message, .. } => message.clone(),
        };
        *failed.borrow_mut() = Some(failure);
        Err(TestCaseError::fail(message))
    });
    let coverage = coverage.into_inner();
    match result {
        Ok(()) => Ok(coverage),
        Err(TestError::Abort(reason)) => Err(SuiteError::Aborted {
            profile: profile.name,
            reason,
        }),
        Err(TestError::Fail(_, (_, ops, _))) => match failed.into_inner() {
            Some(Failed::Diverged(divergence)) => {
                // Proptest shrinks by the strategy's own moves; kvcheck's
                // minimizer then removes and merges ops it cannot.
                let (mut divergence, ops) = minimized(divergence, settings, ops.len());
                let path = failure_path(profile, &settings.subject, &settings.failures_dir);
                let trace = divergence.save_as(&path).map(|()| path.clone());
                let first = first_failure.get().unwrap_or(0);
                Err(SuiteError::Diverged(Box::new(SuiteDivergence {
                    profile: profile.name,
                    case: first,
                    cases: settings.cases,
                    subject: settings.subject.label(),
                    kinds: settings.subject.kinds_mode(),
                    oracle: settings.oracle.to_string(),
                    ops,
                    reduce_runs: runs.get().saturating_sub(first),
                    divergence,
                    reproduce: reproduce(&path, &settings.subject),
                    trace,
                })))
            }
            Some(Failed::Broken(e)) => Err(SuiteError::case(profile)(e)),
            Some(Failed::Panicked { message, case }) => {
                let path = failure_path(profile, &settings.subject, &settings.failures_dir);
                let trace = Trace::new(case.config, case.ops)
                    .with_model_expect()
                    .save(&path)
                    .map(|()| path)
                    .map_err(Box::new);
                Err(SuiteError::Panicked {
                    profile: profile.name,
                    subject: settings.subject.label(),
                    message,
                    trace,
                })
            }
            // Every failing run records why before it returns.
            None => Err(SuiteError::Unrecorded {
                profile: profile.name,
            }),
        },
    }
}

/// `divergence` (of a case proptest shrank to `ops` ops) minimized by
/// kvcheck's minimizer against the suite's oracle, within the suite's
/// `max_tests` runs; as it was when it does not minimize.
fn minimized(
    divergence: Box<Divergence>,
    settings: &SuiteSettings,
    ops: usize,
) -> (Box<Divergence>, usize) {
    let subject = settings.subject.clone();
    match minimize_keeping(
        &divergence.trace,
        subject,
        &settings.oracle,
        settings.max_tests,
        |_| true,
    ) {
        Ok(m) => {
            let ops = m.after.ops;
            (m.divergence, ops)
        }
        Err(_) => (divergence, ops),
    }
}

/// How to replay the trace a suite saved at `path` for `subject`.
fn reproduce(path: &Path, subject: &SubjectSpec) -> String {
    match subject {
        SubjectSpec::Cache => format!(
            "cargo run --release -p kvcheck -- replay {}",
            path.display()
        ),
        SubjectSpec::Factory(_) => format!(
            "kvcheck::engine::check::replay(factory, std::path::Path::new({:?}), &Default::default())",
            path.display()
        ),
        other => format!(
            "cargo run --release -p kvcheck -- replay {} --subject {}",
            path.display(),
            shell_words::quote(&other.label())
        ),
    }
}

/// The suite against an oracle that judges whole traces:
/// `settings.cases` cases drawn by the oracle (seeded like the lockstep
/// suites), each run whole. The first divergence is minimized against the
/// same oracle (at most `settings.max_tests` runs) and saved under
/// `settings.failures_dir`.
fn minimized_cases(
    profile: &'static Profile,
    settings: &SuiteSettings,
    capabilities: &Arc<Capabilities>,
) -> Result<Coverage, SuiteError> {
    let (subject, oracle) = (&settings.subject, &settings.oracle);
    let mut runner = TestRunner::new(settings.proptest_config(profile));
    let mut coverage = Coverage::default();
    for case in 0..settings.cases {
        let drawn = oracle
            .draw(profile, capabilities, &mut runner, settings.max_ops)
            .map_err(|e| SuiteError::case(profile)(e.into()))?;
        let outcome = run_case(&drawn, subject, oracle).map_err(SuiteError::case(profile))?;
        coverage.merge(&outcome.coverage);
        if outcome.cut.is_some() {
            coverage.hit(CUT_CASE);
        }
        let Some(found) = outcome.divergence else {
            continue;
        };
        let minimized = minimize_with(&found.trace, subject.clone(), oracle, settings.max_tests);
        let (mut divergence, ops, runs) = match minimized {
            Ok(m) => (m.divergence, m.trace.ops.len(), m.tests_run),
            Err(_) => (found, drawn.ops.len(), 0),
        };
        let trace = divergence.save_in(&settings.failures_dir);
        let reproduce = trace.as_ref().map_or_else(
            |_| "(the trace was not saved)".to_string(),
            |path| reproduce(path, subject),
        );
        return Err(SuiteError::Diverged(Box::new(SuiteDivergence {
            profile: profile.name,
            case: case as usize + 1,
            cases: settings.cases,
            subject: subject.label(),
            kinds: subject.kinds_mode(),
            oracle: oracle.to_string(),
            ops,
            reduce_runs: runs,
            divergence,
            trace,
            reproduce,
        })));
    }
    Ok(coverage)
}

/// Where a suite saves the trace of its shrunk failing case.
///
/// Suites run in parallel (threads of one test binary, several binaries at
/// once), so the name holds the subject (none for the shipped caches:
/// `tiny.kvtrace.json`), and every save is atomic
/// ([`Trace::save`](crate::check::trace::Trace::save)): two suites never
/// write into one file, and a reader never sees half a trace. The file
/// lies in `dir` ([`SuiteSettings::failures_dir`]).
pub fn failure_path(profile: &Profile, subject: &SubjectSpec, dir: &Path) -> PathBuf {
    let name = match subject {
        SubjectSpec::Cache => profile.name.to_string(),
        other => format!(
            "{}-{}",
            profile.name,
            file_name_part(&other.name(&kvmodel::Config::dense(1)))
        ),
    };
    dir.join(format!("{name}.kvtrace.json"))
}
