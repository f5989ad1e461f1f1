//! What a subject is checked against: the reference model, its own
//! transformed runs (relations, docs/contract.md §9), or another subject.
//!
//! Every engine asks one question of a trace, [`Oracle::check`]: does the
//! subject diverge, and where? With [`Oracle::Model`] that is the lockstep
//! driver ([`crate::check::lockstep::Lockstep`]); with [`Oracle::Relations`] the
//! relations of [`crate::engine::relation`], which need no model and so check
//! caches whose contract is not docs/contract.md's; with [`Oracle::Subject`] the
//! same steps on another implementation ([`crate::engine::relation::differential`]).
//! The command line takes `--oracle model|self|self:M9|SUBJECT`
//! (`KVCHECK_ORACLE`), and a trace saved from a relation or differential
//! failure names its oracle ([`crate::check::trace::OracleTag`]), so replaying it
//! checks the same thing again.

use std::fmt;

use candle_core::Device;
use kvmodel::{Config, Model, Op};
use proptest::test_runner::TestRunner;

use crate::check::coverage::{Before, Coverage};
use crate::check::divergence::Divergence;
use crate::check::lockstep::{Lockstep, SetupError};
use std::path::PathBuf;

use crate::check::trace::{OracleKind, OracleTag};
use crate::engine::machine::{
    CaseDraw, CaseError, CaseOutcome, SuiteSettings, CASE_DRAWS, CASE_RUNNERS,
};
use crate::engine::minimize::{max_tests_default, minimize_with};
use crate::engine::relation::{
    self, domain, instances_from_env, Finding, NotChecked, Relation, Work,
};
use crate::engine::strategy::Profile;
use crate::subject::SubjectSpec;

/// What a subject is checked against (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Oracle {
    /// The reference model, op by op (`model`, the default).
    #[default]
    Model,
    /// The subject's own transformed runs: every relation (`self`) or one
    /// (`self:M9`).
    Relations(Option<Relation>),
    /// Another implementation (`cache:ring`, `exec:…`, any subject form).
    Subject(SubjectSpec),
}

impl Oracle {
    /// Parses `model`, `self`, `self:M9` (or `self:refusal-pure`), or any
    /// form [`SubjectSpec::parse`] takes.
    pub fn parse(text: &str) -> Result<Oracle, relation::OracleError> {
        match text.trim() {
            "model" | "" => Ok(Oracle::Model),
            "self" => Ok(Oracle::Relations(None)),
            other => match other.strip_prefix("self:") {
                Some(name) => Relation::parse(name)
                    .map(|r| Oracle::Relations(Some(r)))
                    .ok_or_else(|| relation::OracleError::UnknownRelation {
                        name: name.to_string(),
                    }),
                None => SubjectSpec::parse(other)
                    .map(Oracle::Subject)
                    .map_err(relation::OracleError::NotAnOracle),
            },
        }
    }

    /// `KVCHECK_ORACLE` (any form [`Oracle::parse`] takes), else the model.
    pub fn from_env() -> Result<Oracle, relation::OracleEnvError> {
        match std::env::var("KVCHECK_ORACLE") {
            Err(_) => Ok(Oracle::Model),
            Ok(text) => Oracle::parse(&text).map_err(|source| relation::OracleEnvError { source }),
        }
    }

    /// The oracle a trace's `oracle` field names.
    pub fn of_tag(tag: &OracleTag) -> Result<Oracle, relation::OracleError> {
        match tag.kind {
            OracleKind::SelfCheck => Ok(Oracle::Relations(tag.relation)),
            OracleKind::Subject => {
                let subject = tag.subject.as_deref().unwrap_or_default();
                SubjectSpec::parse(subject)
                    .map(Oracle::Subject)
                    .map_err(relation::OracleError::TraceSubject)
            }
        }
    }

    /// The oracle to check a trace with: `chosen` when the command line or
    /// the environment chose one other than the model, else the one the
    /// trace names, else the model.
    pub fn for_trace(
        chosen: &Oracle,
        tag: Option<&OracleTag>,
    ) -> Result<Oracle, relation::OracleError> {
        match (chosen, tag) {
            (Oracle::Model, Some(tag)) => Oracle::of_tag(tag),
            (chosen, _) => Ok(chosen.clone()),
        }
    }

    /// What the oracle compares, in words, for reports.
    pub fn describe(&self) -> String {
        match self {
            Oracle::Model => "every op against the reference model".to_string(),
            Oracle::Relations(None) => {
                "the subject against its own transformed runs, relations M1–M10".to_string()
            }
            Oracle::Relations(Some(r)) => format!("the subject against its own runs, relation {r}"),
            Oracle::Subject(other) => format!("every op against the subject {other}"),
        }
    }

    /// The `oracle` field of a trace checked against this (none for the
    /// model).
    pub fn tag(&self) -> Option<OracleTag> {
        match self {
            Oracle::Model => None,
            Oracle::Relations(None) => Some(OracleTag::all_relations()),
            Oracle::Relations(Some(r)) => Some(OracleTag::relation(*r)),
            Oracle::Subject(other) => Some(OracleTag::subject(&other.to_string())),
        }
    }

    /// Whether this is the model.
    pub fn is_model(&self) -> bool {
        *self == Oracle::Model
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
        match self {
            Oracle::Model => {
                let mut lockstep =
                    Lockstep::open(config, subject, &Device::Cpu).map_err(|e| match e {
                        SetupError::Unsupported(e) => NotChecked::Unsupported(e),
                        e => NotChecked::Setup(e.to_string()),
                    })?;
                lockstep.capabilities().supports_trace(config, ops)?;
                let result = lockstep.run(ops).err();
                work.runs += 1;
                work.ops += lockstep.ops().len();
                Ok(result)
            }
            other => Ok(other
                .find_counted(config, ops, subject, work)?
                .map(|f| f.divergence)),
        }
    }

    /// For an oracle other than the model: the failure of `ops` with both
    /// runs, for a side-by-side explanation (`None` when it passes). The
    /// model's walk is [`crate::engine::explain::walk`].
    pub fn find(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
    ) -> Result<Option<Finding>, NotChecked> {
        self.find_counted(config, ops, subject, &mut Work::default())
    }

    fn find_counted(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Finding>, NotChecked> {
        match self {
            Oracle::Model => Err(NotChecked::Setup(
                "the model's walk is explain::walk".to_string(),
            )),
            Oracle::Relations(only) => {
                let all = Relation::ALL;
                let relations = match only {
                    Some(r) => std::slice::from_ref(r),
                    None => &all[..],
                };
                relation::find(config, ops, subject, relations, instances_from_env(), work)
            }
            Oracle::Subject(other) => {
                relation::find_differential(config, ops, subject, other, work)
            }
        }
    }
}

impl fmt::Display for Oracle {
    /// The form [`Oracle::parse`] takes back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Oracle::Model => f.write_str("model"),
            Oracle::Relations(None) => f.write_str("self"),
            Oracle::Relations(Some(r)) => write!(f, "self:{}", r.id()),
            Oracle::Subject(subject) => write!(f, "{subject}"),
        }
    }
}

impl std::str::FromStr for Oracle {
    type Err = relation::OracleError;

    fn from_str(text: &str) -> Result<Oracle, relation::OracleError> {
        Oracle::parse(text)
    }
}

/// Draws case `profile` from `runner` (as the campaign and the suites do)
/// and checks it against `oracle`. With the model this is the lockstep
/// case runner; otherwise the drawn trace (shaped into the relations'
/// domains for `self`, [`domain::shape`]) is checked whole, its coverage
/// labelled from the model alone and what each relation judged counted.
pub fn run_case(
    profile: usize,
    runner: &mut TestRunner,
    max_ops: usize,
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<CaseOutcome, CaseError> {
    let (config, ops) = match oracle {
        Oracle::Model => return CASE_RUNNERS[profile](runner, max_ops, subject),
        Oracle::Relations(_) => {
            let capabilities =
                subject
                    .capabilities()
                    .map_err(|source| CaseError::Capabilities {
                        subject: subject.to_string(),
                        source,
                    })?;
            domain::draw(profile, runner, max_ops, subject, &capabilities)?
        }
        Oracle::Subject(_) => CASE_DRAWS[profile](runner, max_ops, subject)?,
    };
    let mut work = Work::default();
    let divergence = oracle.check_counted(&config, &ops, subject, &mut work)?;
    Ok(CaseOutcome {
        ops_checked: ops.len(),
        coverage: model_coverage(&config, &ops),
        divergence,
        judged: work.judged,
    })
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

/// The suite of one profile against an oracle other than the model:
/// `settings.cases` sequences drawn by `draw` (seeded like the lockstep
/// suites), each checked whole. The first divergence is minimized against
/// the same oracle, saved under `target/kvcheck-failures/` and returned as
/// the message; otherwise the coverage, which must reach `required`.
pub fn check_cases(
    profile: &Profile,
    draw: CaseDraw,
    settings: &SuiteSettings,
    required: &[&str],
) -> Result<Coverage, crate::engine::machine::SuiteError> {
    let subject = &settings.subject;
    let mut runner = TestRunner::new(settings.proptest_config(profile));
    let mut coverage = Coverage::default();
    for case in 0..settings.cases {
        let (config, ops) = draw(&mut runner, settings.max_ops, subject)?;
        let found = settings
            .oracle
            .check(&config, &ops, subject)
            .map_err(|source| crate::engine::machine::SuiteError::NotChecked {
                profile: profile.name,
                source,
            })?;
        coverage.merge(&model_coverage(&config, &ops));
        let Some(found) = found else { continue };
        let trace = found.trace.clone();
        let small = minimize_with(
            &trace,
            subject.clone(),
            &settings.oracle,
            max_tests_default(),
        )
        .map(|m| m.divergence)
        .unwrap_or(found);
        let mut small = small;
        let dir =
            PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
                .join("kvcheck-failures");
        let saved = small.save_in(&dir).map(|path| path.display().to_string());
        return Err(crate::engine::machine::SuiteError::OracleDiverged {
            profile: profile.name,
            case,
            cases: settings.cases,
            subject: subject.name(&config),
            oracle: settings.oracle.to_string(),
            divergence: small,
            trace: saved.unwrap_or_else(|e| format!("(not saved: {e})")),
        });
    }
    let missing = coverage.missing(required);
    if !missing.is_empty() {
        return Err(crate::engine::machine::SuiteError::EventsMissed {
            profile: profile.name,
            cases: settings.cases,
            missing: missing.iter().map(|e| e.to_string()).collect(),
            coverage: None,
        });
    }
    Ok(coverage)
}
