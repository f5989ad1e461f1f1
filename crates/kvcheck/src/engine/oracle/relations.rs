//! The self checks as an oracle: the subject against its own transformed
//! runs ([`crate::engine::relation`], M1–M10) and its one run against the
//! invariants of docs/contract.md §9 ([`crate::engine::invariant`],
//! I1–I8), no model. `self` checks both, `relations` and `invariants` one
//! kind, `self:M9` or `self:I2` one check. Cases are shaped into the
//! relations' domains before they are checked ([`domain`]).

use std::sync::Arc;

use kvmodel::{Config, Op};
use proptest::test_runner::TestRunner;

use super::{Judge, Oracle};
use crate::check::divergence::{Divergence, DivergenceKind};
use crate::check::relation::Relation;
use crate::check::trace::OracleTag;
use crate::engine::oracle::{NotChecked, OracleError, Work};
use crate::engine::relation::{self, domain, Finding};
use crate::engine::strategy::{Case, DrawError, Profile};
use crate::subject::{Capabilities, SubjectSpec};

/// Which self checks a [`RelationsJudge`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checks {
    /// Every relation and every invariant (`self`).
    All,
    /// The relations between two runs, M1–M10 (`relations`): what a cache
    /// whose contract is not the project's can still be asked, since the
    /// invariants read the contract's own rules on one run.
    Relations,
    /// The invariants of one run, I1–I8 (`invariants`).
    Invariants,
    /// One relation or invariant (`self:M9`, `self:I2`).
    One(Relation),
}

/// The relations and invariants of [`Checks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelationsJudge {
    /// The checks run.
    pub checks: Checks,
    /// Instances of each relation tried per trace (`limit` of
    /// [`relation::find`]; `KVCHECK_RELATION_INSTANCES` at the entry
    /// points).
    pub instances: usize,
}

/// `self`, `relations`, `invariants`, `self:M9` or `self:refusal-pure`
/// (`self:I2`, `self:sinks-stay`).
pub fn parse(text: &str) -> Option<Result<Oracle, OracleError>> {
    match text {
        "self" => return Some(Ok(Oracle::self_checks(Checks::All))),
        "relations" => return Some(Ok(Oracle::self_checks(Checks::Relations))),
        "invariants" => return Some(Ok(Oracle::self_checks(Checks::Invariants))),
        _ => {}
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
        match self.checks {
            Checks::All => "self".to_string(),
            Checks::Relations => "relations".to_string(),
            Checks::Invariants => "invariants".to_string(),
            Checks::One(r) => format!("self:{}", r.id()),
        }
    }

    fn describe(&self) -> String {
        match self.checks {
            Checks::All => "the subject against its own transformed runs and the invariants of one run, relations M1–M10 and invariants I1–I8".to_string(),
            Checks::Relations => "the subject against its own transformed runs, relations M1–M10".to_string(),
            Checks::Invariants => "each run against the invariants of one run, I1–I8".to_string(),
            Checks::One(r) if r.is_invariant() => format!("each run against invariant {r}"),
            Checks::One(r) => format!("the subject against its own runs, relation {r}"),
        }
    }

    /// A failure's trace names the check that failed; this tag (every
    /// check, `self`) is only that of a run that misbehaved outright,
    /// which every selection finds alike.
    fn tag(&self) -> Option<OracleTag> {
        Some(match self.checks {
            Checks::One(r) => OracleTag::relation(r),
            _ => OracleTag::all_relations(),
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
        match (self.checks, divergence.kind) {
            (Checks::One(_), _) => None,
            (_, DivergenceKind::Relation(r)) => {
                Some(Oracle::relations(Some(r)).with_relation_instances(self.instances))
            }
            _ => None,
        }
    }

    fn draw(
        &self,
        profile: &'static Profile,
        capabilities: &Arc<Capabilities>,
        runner: &mut TestRunner,
        max_ops: usize,
    ) -> Result<Case, DrawError> {
        domain::draw(profile, capabilities, runner, max_ops)
    }

    fn relations(&self) -> Vec<Relation> {
        match self.checks {
            Checks::All => Relation::ALL.to_vec(),
            Checks::Relations => Relation::RELATIONS.to_vec(),
            Checks::Invariants => Relation::INVARIANTS.to_vec(),
            Checks::One(r) => vec![r],
        }
    }

    fn with_relation_instances(&self, instances: usize) -> Option<Oracle> {
        Some(Oracle::new(RelationsJudge { instances, ..*self }))
    }

    fn relation_instances(&self) -> Option<usize> {
        Some(self.instances)
    }
}
