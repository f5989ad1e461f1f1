//! A suite's knobs ([`SuiteSettings`]), resolved from the [`Settings`] of
//! the entry point.

use std::path::PathBuf;

use proptest::test_runner::{Config as ProptestConfig, RngSeed};

use crate::engine::oracle::{Oracle, OracleEnvError};
use crate::engine::strategy::Profile;
use crate::settings::{SettingError, Settings};
use crate::subject::{SubjectEnvError, SubjectSpec};

/// Knobs of a suite run (see the module docs): what [`check_profile`] and
/// [`super::check_subject`] take, resolved from the [`Settings`] of the
/// entry point ([`SuiteSettings::new`]).
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
    /// [`Oracle::configured`]); text that does not parse is an error
    /// naming the variable.
    pub fn new(settings: &Settings) -> Result<SuiteSettings, SuiteSettingsError> {
        Ok(SuiteSettings {
            cases: settings.cases,
            max_ops: settings.max_ops,
            seed: settings.seed,
            subject: SubjectSpec::configured(settings)?,
            oracle: Oracle::configured(settings)?.unwrap_or_default(),
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
