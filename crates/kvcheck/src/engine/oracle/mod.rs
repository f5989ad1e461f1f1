//! What a subject is checked against: the reference model, its own
//! transformed runs and the invariants of one run (relations and
//! invariants, docs/contract.md §9), or another subject.
//!
//! Every engine asks one question of a trace, [`Oracle::check`]: does the
//! subject diverge, and where? An [`Oracle`] is a handle on a [`Judge`],
//! and engines hand traces to it without knowing which judge it is. Three
//! are built in, one file each: [`model`] (the lockstep driver,
//! [`crate::check::lockstep::Lockstep`], op by op against the model),
//! [`relations`] (the relations of [`crate::engine::relation`], which need
//! no model and so check caches whose contract is not the project's) and
//! [`differential`] (the same steps on another implementation). The
//! command line takes `--oracle model|self|self:M9|SUBJECT`
//! (`KVCHECK_ORACLE`), parsed by the first entry of [`PARSERS`] that knows
//! the form; a trace saved from a relation or differential failure names
//! its oracle ([`crate::check::trace::OracleTag`]), so replaying it checks
//! the same thing again.
//!
//! A new oracle is a file with a [`Judge`] and, for the command line, one
//! line in [`PARSERS`]; a judge in another crate is handed to the engines
//! as [`Oracle::new`] without any line here.

pub mod differential;
mod error;
pub mod model;
pub mod relations;
mod work;

pub use error::{NotChecked, OracleEnvError, OracleError};
pub use work::{Judged, Walked, Work};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kvmodel::{Config, Op};
use proptest::test_runner::TestRunner;

use crate::check::divergence::Divergence;
use crate::check::relation::Relation;
use crate::check::trace::{OracleKind, OracleTag};
use crate::engine::relation::Finding;
use crate::engine::strategy::{self, Case, DrawError, Profile};
use crate::settings::Settings;
use crate::subject::{Capabilities, SubjectSpec};

/// What judges a subject's runs. Engines know an oracle only through
/// this: they draw traces, hand them to [`Judge::check`], and minimize,
/// replay, explain and save what it returns.
pub trait Judge: fmt::Debug + Send + Sync {
    /// The form the command line parses back to this judge (`model`,
    /// `self:M9`, a subject's form).
    fn name(&self) -> String;

    /// What it compares, in words, for reports.
    fn describe(&self) -> String;

    /// The `oracle` field of a trace this judge found failing, so that
    /// replaying the file checks the same thing (none: the model, which
    /// every engine uses when a trace names nothing).
    fn tag(&self) -> Option<OracleTag>;

    /// Whether it judges op by op, each op as soon as it is applied, so
    /// that nothing after the op that diverged can matter: minimizers cut
    /// the trace there, the explorer and the suites step the lockstep
    /// driver instead of checking whole traces, and a saved trace carries
    /// the model's expected outcomes. Only the model does.
    fn stepwise(&self) -> bool {
        false
    }

    /// Checks `ops` on `config` with `subject` and returns the first
    /// divergence; `work` counts the runs and ops spent (and what each
    /// relation judged). A subject that cannot run the trace (refuses the
    /// config, lacks a capability) is [`NotChecked`].
    fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked>;

    /// The failure of `ops` with both runs, for a side-by-side explanation
    /// (`None` when it passes). A judge with no second run says so (the
    /// model's explanation is the walk of [`crate::engine::explain`]).
    fn find(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Finding>, NotChecked> {
        let _ = (config, ops, subject, work);
        Err(NotChecked::Setup(format!(
            "oracle {} shows no second run; explain walks it step by step",
            self.name()
        )))
    }

    /// The judge a minimizer keeps for `divergence`: a narrower one that
    /// judges only what failed (one relation of all), or none to keep
    /// this one.
    fn narrowed(&self, divergence: &Divergence) -> Option<Oracle> {
        let _ = divergence;
        None
    }

    /// Draws a case of `profile` within `capabilities` from `runner` for
    /// this judge: by default as every engine draws it
    /// ([`strategy::draw`]); a judge whose power depends on the traces it
    /// gets shapes them into its domain.
    fn draw(
        &self,
        profile: &'static Profile,
        capabilities: &Arc<Capabilities>,
        runner: &mut TestRunner,
        max_ops: usize,
    ) -> Result<Case, DrawError> {
        strategy::draw(profile, capabilities, runner, max_ops)
    }

    /// A subject this judge runs of its own beside the checked one (the
    /// differential oracle's): cases must stay within what both can
    /// express, so engines skip the profiles it cannot run.
    fn runs(&self) -> Option<&SubjectSpec> {
        None
    }

    /// This judge with a process subject's timeout and kinds options
    /// applied to any subject it runs of its own (none to keep it).
    fn with_exec_options(&self, timeout: Option<Duration>, exact_kinds: bool) -> Option<Oracle> {
        let _ = (timeout, exact_kinds);
        None
    }

    /// The relations it checks (none for a judge that is no relation):
    /// what `kvcheck power --oracle self` measures.
    fn relations(&self) -> Vec<Relation> {
        Vec::new()
    }

    /// This judge checking `instances` instances of each relation per
    /// trace (none to keep it: a judge that checks no relation).
    fn with_relation_instances(&self, instances: usize) -> Option<Oracle> {
        let _ = instances;
        None
    }

    /// The instances of each relation it checks per trace (none for a
    /// judge that checks no relation).
    fn relation_instances(&self) -> Option<usize> {
        None
    }
}

/// An oracle: a shared handle on a [`Judge`] (see the module docs). Two
/// oracles are equal when they print the same.
#[derive(Clone)]
pub struct Oracle(Arc<dyn Judge>);

/// The forms `--oracle` and `KVCHECK_ORACLE` take, one parser per oracle:
/// each returns `None` for a form it does not know. The first that knows
/// it decides; the differential oracle, which takes any subject form,
/// comes last.
pub const PARSERS: [Parser; 3] = [model::parse, relations::parse, differential::parse];

/// An oracle's parser: the oracle a form names, `None` for a form it does
/// not know.
pub type Parser = fn(&str) -> Option<Result<Oracle, OracleError>>;

impl Oracle {
    /// An oracle judged by `judge` (a judge of another crate included).
    pub fn new(judge: impl Judge + 'static) -> Oracle {
        Oracle(Arc::new(judge))
    }

    /// The reference model, op by op (`model`, the default).
    pub fn model() -> Oracle {
        Oracle::new(model::ModelJudge)
    }

    /// The subject's own transformed runs and the invariants of one run:
    /// every relation and invariant (`self`) or one (`self:M9`, `self:I2`), [`DEFAULT_INSTANCES`](crate::settings::DEFAULT_INSTANCES) of
    /// each per trace ([`Oracle::with_relation_instances`] sets another
    /// count).
    pub fn relations(only: Option<Relation>) -> Oracle {
        Oracle::self_checks(only.map_or(relations::Checks::All, relations::Checks::One))
    }

    /// The self checks `checks` names: every relation and invariant
    /// (`self`), the relations or the invariants alone, or one of them.
    pub fn self_checks(checks: relations::Checks) -> Oracle {
        Oracle::new(relations::RelationsJudge {
            checks,
            instances: crate::settings::DEFAULT_INSTANCES,
        })
    }

    /// Another implementation (`cache:ring`, `exec:…`, any subject form).
    pub fn subject(other: SubjectSpec) -> Oracle {
        Oracle::new(differential::DifferentialJudge { other })
    }

    /// Parses `model`, `self`, `relations`, `invariants`, `self:M9` (or
    /// `self:refusal-pure`, `self:I2`), or any
    /// form [`SubjectSpec::parse`] takes ([`PARSERS`]).
    pub fn parse(text: &str) -> Result<Oracle, OracleError> {
        let text = text.trim();
        PARSERS
            .iter()
            .find_map(|parse| parse(text))
            .unwrap_or_else(|| {
                Err(OracleError::UnknownRelation {
                    name: text.to_string(),
                })
            })
    }

    /// The oracle a trace's `oracle` field names, with the default
    /// options (an entry point configures it, see
    /// [`Oracle::with_settings`]).
    pub fn of_tag(tag: &OracleTag) -> Result<Oracle, OracleError> {
        match tag.kind {
            OracleKind::SelfCheck => Ok(Oracle::relations(tag.relation)),
            OracleKind::Subject => {
                let subject = tag.subject.as_deref().unwrap_or_default();
                SubjectSpec::parse(subject)
                    .map(Oracle::subject)
                    .map_err(OracleError::TraceSubject)
            }
        }
    }

    /// The oracle to check a trace with: `chosen` when the command line or
    /// the settings chose one other than the model, else the one the
    /// trace names ([`Oracle::of_tag`]), else the model.
    pub fn for_trace(chosen: &Oracle, tag: Option<&OracleTag>) -> Result<Oracle, OracleError> {
        match tag {
            Some(tag) if chosen.is_default() => Oracle::of_tag(tag),
            _ => Ok(chosen.clone()),
        }
    }

    /// Whether this is the default oracle (the model), which a trace's
    /// own `oracle` field overrides.
    pub fn is_default(&self) -> bool {
        self.0.stepwise() && self.0.tag().is_none()
    }

    /// What the oracle compares, in words, for reports.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// The `oracle` field of a trace checked against this (none for the
    /// model).
    pub fn tag(&self) -> Option<OracleTag> {
        self.0.tag()
    }

    /// See [`Judge::stepwise`].
    pub fn stepwise(&self) -> bool {
        self.0.stepwise()
    }

    /// See [`Judge::relations`].
    pub fn relations_checked(&self) -> Vec<Relation> {
        self.0.relations()
    }

    /// See [`Judge::narrowed`]: the oracle to keep while minimizing
    /// `divergence`.
    pub fn narrowed(&self, divergence: &Divergence) -> Oracle {
        self.0.narrowed(divergence).unwrap_or_else(|| self.clone())
    }

    /// See [`Judge::with_exec_options`].
    pub fn with_exec_options(&self, timeout: Option<Duration>, exact_kinds: bool) -> Oracle {
        self.0
            .with_exec_options(timeout, exact_kinds)
            .unwrap_or_else(|| self.clone())
    }

    /// This oracle with the options of `settings`: the `exec:` options for
    /// a subject it runs of its own (response timeout, exact kinds), the
    /// relation instances for the relations.
    pub fn with_settings(&self, settings: &Settings) -> Oracle {
        self.with_exec_options(Some(settings.subject_timeout), settings.exact_kinds)
            .with_relation_instances(settings.relation_instances)
    }

    /// The oracle [`Settings::oracle`] chooses (any form [`Oracle::parse`]
    /// takes), with the settings' options ([`Oracle::with_settings`]);
    /// `None` when it chooses none. Text that does not parse is an error
    /// naming `KVCHECK_ORACLE`.
    pub fn configured(settings: &Settings) -> Result<Option<Oracle>, OracleEnvError> {
        let Some(text) = &settings.oracle else {
            return Ok(None);
        };
        let oracle = Oracle::parse(text).map_err(|source| OracleEnvError { source })?;
        Ok(Some(oracle.with_settings(settings)))
    }

    /// See [`Judge::with_relation_instances`].
    pub fn with_relation_instances(&self, instances: usize) -> Oracle {
        self.0
            .with_relation_instances(instances)
            .unwrap_or_else(|| self.clone())
    }

    /// See [`Judge::relation_instances`].
    pub fn relation_instances(&self) -> Option<usize> {
        self.0.relation_instances()
    }

    /// See [`Judge::runs`].
    pub fn runs(&self) -> Option<&SubjectSpec> {
        self.0.runs()
    }

    /// See [`Judge::draw`].
    pub fn draw(
        &self,
        profile: &'static Profile,
        capabilities: &Arc<Capabilities>,
        runner: &mut TestRunner,
        max_ops: usize,
    ) -> Result<Case, DrawError> {
        self.0.draw(profile, capabilities, runner, max_ops)
    }

    /// Checks `ops` on `config` with `subject` against this oracle and
    /// returns the first divergence. A subject that cannot run the trace
    /// (refuses the config, lacks a capability) is [`NotChecked`].
    pub fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        self.check_counted(config, ops, subject, &mut Work::default())
    }

    /// [`Oracle::check`], counting the subject runs and ops spent.
    pub fn check_counted(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        self.0.check(config, ops, subject, work)
    }

    /// The failure of `ops` with both runs, for a side-by-side explanation
    /// (`None` when it passes); see [`Judge::find`].
    pub fn find(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
    ) -> Result<Option<Finding>, NotChecked> {
        self.0.find(config, ops, subject, &mut Work::default())
    }
}

impl Default for Oracle {
    /// The model.
    fn default() -> Oracle {
        Oracle::model()
    }
}

impl fmt::Debug for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oracle({})", self.0.name())
    }
}

impl PartialEq for Oracle {
    fn eq(&self, other: &Oracle) -> bool {
        self.0.name() == other.0.name()
    }
}

impl fmt::Display for Oracle {
    /// The form [`Oracle::parse`] takes back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.name())
    }
}

impl std::str::FromStr for Oracle {
    type Err = OracleError;

    fn from_str(text: &str) -> Result<Oracle, OracleError> {
        Oracle::parse(text)
    }
}
