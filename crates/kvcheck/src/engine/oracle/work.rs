//! The work a judge did on a trace: runs, ops, what each relation
//! judged, and what the lockstep driver recorded of a stepped run.

use crate::check::coverage::Coverage;
use crate::check::lockstep::Cut;
use crate::check::relation::Relation;

/// What a judge ([`Oracle::check_counted`](super::Oracle::check_counted))
/// did, for callers that count work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Work {
    /// Runs of the subject (the original and every transformed one).
    pub runs: usize,
    /// Ops sent to the subject over all runs.
    pub ops: usize,
    /// What each relation judged.
    pub judged: Judged,
    /// Where the checked trace left the subject's domain (its original
    /// run, or either side of a differential one): the ops from there on
    /// were not judged.
    pub cut: Option<Cut>,
    /// Transformed runs left out because they left the subject's domain.
    pub instances_cut: usize,
    /// What the lockstep driver recorded of the checked run, when the
    /// judge stepped it op by op against the model (none for a judge that
    /// checks traces whole).
    pub walked: Option<Walked>,
}

/// What the lockstep driver recorded of one run it stepped against the
/// model.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Ops judged: up to and including a diverging one, none from a cut on.
    pub judged: usize,
    /// Judged ops the subject served with state
    /// ([`Lockstep::served`](crate::check::lockstep::Lockstep::served)).
    pub served: usize,
    /// The events the judged ops reached.
    pub coverage: Coverage,
}

/// Per relation (indexed like [`Relation::ALL`]): the traces it judged
/// (at least one instance inside its domain ran and was compared) and the
/// ops of the transformed runs it compared. A relation that judges few of
/// the traces an engine draws is a weak one there, whatever it promises.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    /// Traces judged, per relation.
    pub cases: [u64; Relation::ALL.len()],
    /// Ops of the transformed runs compared, per relation.
    pub ops: [u64; Relation::ALL.len()],
}

impl Judged {
    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Judged) {
        for i in 0..Relation::ALL.len() {
            self.cases[i] += other.cases[i];
            self.ops[i] += other.ops[i];
        }
    }

    /// Traces `relation` judged.
    pub fn cases_of(&self, relation: Relation) -> u64 {
        self.cases[relation.index()]
    }

    /// Ops `relation` compared.
    pub fn ops_of(&self, relation: Relation) -> u64 {
        self.ops[relation.index()]
    }

    /// Ops compared over every relation.
    pub fn total_ops(&self) -> u64 {
        self.ops.iter().sum()
    }

    /// Whether no relation judged anything (a run against the model).
    pub fn is_empty(&self) -> bool {
        self.cases.iter().all(|&c| c == 0)
    }

    /// One line per relation: `M7 chunking-invariant  judged 812 of 1000
    /// traces (81%), 20400 ops`, for `drawn` traces.
    pub fn table(&self, drawn: u64) -> String {
        Relation::ALL
            .iter()
            .map(|&r| {
                let cases = self.cases_of(r);
                let percent = if drawn == 0 {
                    0.0
                } else {
                    100.0 * cases as f64 / drawn as f64
                };
                format!(
                    "  {:<4}{:<24} judged {cases:>7} of {drawn} traces ({percent:>3.0}%), {} ops\n",
                    r.id(),
                    r.name(),
                    self.ops_of(r)
                )
            })
            .collect()
    }
}
