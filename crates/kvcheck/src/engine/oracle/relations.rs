//! The relations as an oracle (`self`, `self:M9`): the subject against its
//! own transformed runs ([`crate::engine::relation`]), no model, so that a
//! cache whose contract is not the project's can still be judged. Cases
//! are shaped into the relations' domains before they are checked
//! ([`domain`]).

use kvmodel::{Config, Op};
use proptest::test_runner::TestRunner;

use super::{Judge, Oracle};
use crate::check::divergence::{Divergence, DivergenceKind};
use crate::check::trace::OracleTag;
use crate::engine::machine::CaseError;
use crate::engine::relation::{self, domain, Finding, NotChecked, OracleError, Relation, Work};
use crate::subject::SubjectSpec;

/// Every relation (`only` none) or one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelationsJudge {
    /// The one relation checked, if not all.
    pub only: Option<Relation>,
    /// Instances of each relation tried per trace (`limit` of
    /// [`relation::find`]; `KVCHECK_RELATION_INSTANCES` at the entry
    /// points).
    pub instances: usize,
}

/// `self`, `self:M9` or `self:refusal-pure`.
pub fn parse(text: &str) -> Option<Result<Oracle, OracleError>> {
    if text == "self" {
        return Some(Ok(Oracle::relations(None)));
    }
    let name = text.strip_prefix("self:")?;
    Some(
        Relation::parse(name)
            .map(|r| Oracle::relations(Some(r)))
            .ok_or_else(|| OracleError::UnknownRelation {
                name: name.to_string(),
            }),
    )
}

impl Judge for RelationsJudge {
    fn name(&self) -> String {
        match self.only {
            None => "self".to_string(),
            Some(r) => format!("self:{}", r.id()),
        }
    }

    fn describe(&self) -> String {
        match self.only {
            None => "the subject against its own transformed runs, relations M1–M10".to_string(),
            Some(r) => format!("the subject against its own runs, relation {r}"),
        }
    }

    fn tag(&self) -> Option<OracleTag> {
        Some(match self.only {
            None => OracleTag::all_relations(),
            Some(r) => OracleTag::relation(r),
        })
    }

    fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        Ok(self.find(config, ops, subject, work)?.map(|f| f.divergence))
    }

    fn find(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Finding>, NotChecked> {
        let relations = self.relations();
        relation::find(config, ops, subject, &relations, self.instances, work)
    }

    /// Only the relation that failed needs to keep failing.
    fn narrowed(&self, divergence: &Divergence) -> Option<Oracle> {
        match (self.only, divergence.kind) {
            (None, DivergenceKind::Relation(r)) => {
                Some(Oracle::relations(Some(r)).with_relation_instances(self.instances))
            }
            _ => None,
        }
    }

    fn draw(
        &self,
        profile: usize,
        runner: &mut TestRunner,
        max_ops: usize,
        subject: &SubjectSpec,
    ) -> Result<(Config, Vec<Op>), CaseError> {
        let capabilities = subject
            .capabilities()
            .map_err(|source| CaseError::Capabilities {
                subject: subject.to_string(),
                source,
            })?;
        domain::draw(profile, runner, max_ops, subject, &capabilities)
    }

    fn relations(&self) -> Vec<Relation> {
        match self.only {
            None => Relation::ALL.to_vec(),
            Some(r) => vec![r],
        }
    }

    fn with_relation_instances(&self, instances: usize) -> Option<Oracle> {
        Some(Oracle::new(RelationsJudge { instances, ..*self }))
    }

    fn relation_instances(&self) -> Option<usize> {
        Some(self.instances)
    }
}
