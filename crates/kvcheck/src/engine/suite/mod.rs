//! Bring your own cache: every engine of kvcheck for a [`KvCache`] that
//! lives in another crate.
//!
//! Wrap the cache's constructor in a [`Factory`] with the [`Capabilities`]
//! it has, then:
//!
//! - [`check_all`] / [`assert_all`]: the property suite of every built-in
//!   profile the capabilities allow (knobs `KVCHECK_CASES`,
//!   `KVCHECK_MAX_OPS`, `KVCHECK_SEED`, as for the shipped caches, read
//!   once: they are the entry point of a cache's test);
//!   [`check_subject`] takes the knobs as a [`SuiteSettings`] instead;
//! - [`explore`]: exhaustive exploration of one configuration;
//! - [`minimize`](crate::engine::minimize), [`explain`](crate::engine::explain::walk)
//!   and [`save`] with `SubjectSpec::from(factory)`.
//!
//! ```no_run
//! use kvcheck::subject::{Capabilities, ReferenceCache};
//!
//! kvcheck::engine::suite::assert_all("naive", Capabilities::full(), |config, device| {
//!     Ok(Box::new(ReferenceCache::new(config, device)?))
//! });
//! ```
//!
//! [`KvCache`]: kvcache::KvCache

use std::fmt;
use std::path::Path;

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::Config;

use crate::check::coverage::Coverage;
use crate::check::trace::{Trace, TraceError};
use crate::engine::explore::Explorer;
use crate::engine::minimize::{minimize_with, MinimizeError, Minimized};
use crate::engine::oracle::Oracle;
use crate::engine::oracle::OracleError;
use crate::engine::strategy::{profile_support, PROFILES};
use crate::settings::DEFAULT_MAX_TESTS;
use crate::subject::{Capabilities, Factory, SubjectFailure, SubjectSpec};

mod profile_suite;
mod settings;

pub use profile_suite::{check_profile, failure_path, SuiteDivergence, SuiteError};
pub use settings::{SuiteSettings, SuiteSettingsError};

impl From<Factory> for SubjectSpec {
    fn from(factory: Factory) -> SubjectSpec {
        SubjectSpec::Factory(factory)
    }
}

/// Why [`check_subject`] or [`check_all`] did not pass.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The environment's knobs do not parse (named in the message).
    #[error(transparent)]
    Settings(#[from] SuiteSettingsError),
    /// The subject could not say what it can express.
    #[error("cannot ask the subject for its capabilities: {0}")]
    Capabilities(#[source] SubjectFailure),
    /// A profile's suite failed: a divergence (shrunk, its trace saved) or
    /// events never reached.
    #[error(transparent)]
    Suite(#[from] SuiteError),
}

/// Why [`save`] stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The trace's `oracle` field names no oracle.
    #[error("the trace's oracle: {0}")]
    Oracle(#[source] OracleError),
    /// The trace fails but could not be minimized (the subject cannot run
    /// it).
    #[error(transparent)]
    Minimize(MinimizeError),
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] TraceError),
}

/// What [`check_all`] ran.
#[derive(Clone, Debug, Default)]
pub struct SuiteReport {
    /// The subject's name.
    pub subject: String,
    /// Profiles run, with the events each reached.
    pub ran: Vec<(&'static str, Coverage)>,
    /// Profiles skipped, with the capability they needed.
    pub skipped: Vec<(&'static str, String)>,
}

impl fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} profiles passed, {} skipped",
            self.subject,
            self.ran.len(),
            self.skipped.len()
        )?;
        for (name, _) in &self.ran {
            writeln!(f, "  passed  {name}")?;
        }
        for (name, why) in &self.skipped {
            writeln!(f, "  skipped {name}: {why}")?;
        }
        Ok(())
    }
}

/// Runs the property suite of every built-in profile that `subject`'s
/// capabilities allow, with `settings`' knobs. `Err` names the first
/// divergence (shrunk, its trace saved under `target/kvcheck-failures/`)
/// or the events a profile never reached.
pub fn check_subject(
    subject: &SubjectSpec,
    settings: &SuiteSettings,
) -> Result<SuiteReport, CheckError> {
    let capabilities = subject.capabilities().map_err(CheckError::Capabilities)?;
    let settings = settings.clone().with_subject(subject.clone());
    let mut report = SuiteReport {
        subject: subject.name(&Config::dense(1)),
        ..SuiteReport::default()
    };
    for profile in PROFILES {
        match profile_support(profile, &capabilities) {
            Err(why) => report.skipped.push((profile.name, why.what)),
            Ok(()) => report
                .ran
                .push((profile.name, check_profile(profile, &settings)?)),
        }
    }
    Ok(report)
}

/// [`check_subject`] for the cache `open` builds, named `name`, with the
/// knobs of the environment (`KVCHECK_CASES`, `KVCHECK_MAX_OPS`,
/// `KVCHECK_SEED`, …); a knob that does not parse is an error naming it.
///
/// An entry point, meant to be called from a test: it resolves the
/// [`Settings`](crate::settings::Settings) once ([`SuiteSettings::from_env`]).
/// Code that has settings already calls [`check_subject`].
pub fn check_all(
    name: &str,
    capabilities: Capabilities,
    open: impl Fn(&Config, &Device) -> kvcache::Result<Box<dyn KvCache>> + Send + Sync + 'static,
) -> Result<SuiteReport, CheckError> {
    let settings = SuiteSettings::from_env()?;
    check_subject(&Factory::new(name, capabilities, open).into(), &settings)
}

/// [`check_all`], panicking with the report of a divergence; returns what
/// ran. The one call a cache's test needs.
pub fn assert_all(
    name: &str,
    capabilities: Capabilities,
    open: impl Fn(&Config, &Device) -> kvcache::Result<Box<dyn KvCache>> + Send + Sync + 'static,
) -> SuiteReport {
    match check_all(name, capabilities, open) {
        Ok(report) => report,
        Err(message) => panic!("{message}"),
    }
}

/// An [`Explorer`] of `config` for `subject` (depth, alphabet, prefix and
/// limits are set on it as usual).
pub fn explore(config: &Config, subject: impl Into<SubjectSpec>) -> Explorer {
    Explorer::new(config, subject.into())
}

/// What [`save`] stored.
#[derive(Debug)]
pub struct Saved {
    /// The trace written, `expect` filled by the model.
    pub trace: Trace,
    /// The minimization, when the trace failed on the subject.
    pub minimized: Option<Minimized>,
}

/// Stores `trace` at `path` for the regression corpus: minimized first
/// (at most `max_tests` runs, default [`DEFAULT_MAX_TESTS`]) when it
/// fails on `subject`, as it is when it passes (it then pins today's
/// behaviour); `expect` comes from the model either way.
pub fn save(
    trace: &Trace,
    subject: &SubjectSpec,
    max_tests: Option<usize>,
    path: &Path,
) -> Result<Saved, SaveError> {
    save_with(trace, subject, &Oracle::model(), max_tests, path)
}

/// [`save`] against `oracle` (or the one the trace names when `oracle` is
/// the model). A trace checked against another oracle is stored with its
/// `oracle` field and without `expect` (the model's outcomes say nothing
/// about a cache checked against itself or another cache).
pub fn save_with(
    trace: &Trace,
    subject: &SubjectSpec,
    oracle: &Oracle,
    max_tests: Option<usize>,
    path: &Path,
) -> Result<Saved, SaveError> {
    let max_tests = max_tests.unwrap_or(DEFAULT_MAX_TESTS);
    let oracle = Oracle::for_trace(oracle, trace.oracle.as_ref()).map_err(SaveError::Oracle)?;
    let saved = match minimize_with(trace, subject.clone(), &oracle, max_tests) {
        Ok(m) => Saved {
            trace: m.trace.clone(),
            minimized: Some(m),
        },
        Err(MinimizeError::DoesNotFail { .. }) => Saved {
            trace: match oracle.tag() {
                None => trace.clone().with_model_expect(),
                tag => Trace {
                    oracle: tag,
                    expect: None,
                    ..trace.clone()
                },
            },
            minimized: None,
        },
        Err(e) => return Err(SaveError::Minimize(e)),
    };
    saved.trace.save(path)?;
    Ok(saved)
}
