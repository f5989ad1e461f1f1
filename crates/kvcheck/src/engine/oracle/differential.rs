//! Another implementation as the oracle (`cache:ring`, `exec:…`): the
//! same steps with the same payloads on both subjects, compared on what
//! both can express ([`relation::differential`]).

use std::time::Duration;

use kvmodel::{Config, Op};

use super::{Judge, Oracle};
use crate::check::divergence::Divergence;
use crate::check::trace::OracleTag;
use crate::engine::oracle::{NotChecked, OracleError, Work};
use crate::engine::relation::{self, Finding};
use crate::subject::SubjectSpec;

/// The subject `other` as the judge.
#[derive(Clone, Debug, PartialEq)]
pub struct DifferentialJudge {
    /// The implementation the subject is compared with.
    pub other: SubjectSpec,
}

/// Any form [`SubjectSpec::parse`] takes.
pub fn parse(text: &str) -> Option<Result<Oracle, OracleError>> {
    Some(
        SubjectSpec::parse(text)
            .map(Oracle::subject)
            .map_err(OracleError::NotAnOracle),
    )
}

impl Judge for DifferentialJudge {
    fn name(&self) -> String {
        self.other.to_string()
    }

    fn describe(&self) -> String {
        format!("every op against the subject {}", self.other)
    }

    fn tag(&self) -> Option<OracleTag> {
        Some(OracleTag::subject(&self.other.to_string()))
    }

    fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        relation::differential(config, ops, subject, &self.other, work)
    }

    fn find(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Finding>, NotChecked> {
        relation::find_differential(config, ops, subject, &self.other, work)
    }

    /// Engines draw cases within what both subjects express: an op or
    /// config only one of them has would leave the case unjudged.
    fn runs(&self) -> Option<&SubjectSpec> {
        Some(&self.other)
    }

    fn with_exec_options(&self, timeout: Option<Duration>, exact_kinds: bool) -> Option<Oracle> {
        Some(Oracle::subject(
            self.other.clone().with_exec_options(timeout, exact_kinds),
        ))
    }
}
