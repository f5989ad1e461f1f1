//! One driver for every prefix engine: a subject's cache, the judge its
//! policy calls for (the model op by op, or the invariants of §17), and the
//! order of ops the subject accepts (`steps`).

use std::collections::BTreeSet;

use kvmodel::prefix::{PrefixError, PrefixOp, PrefixOutcome, RequestId};

use super::invariants::{Invariant, PrefixInvariants};
use super::lockstep::{PrefixDivergence, PrefixDivergenceKind, PrefixLockstep};
use crate::subject::prefix::{Policy, PrefixSubjectCache, Steps};

/// Which judge decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judge {
    /// The model, op by op: effects, hits, counts and refusal kinds exactly,
    /// then every running request's rows.
    Model,
    /// The invariants of docs/contract.md §17 but those waived.
    Invariants(BTreeSet<Invariant>),
}

impl Judge {
    /// The judge a subject of `policy` is held to by default.
    pub fn for_policy(policy: Policy) -> Judge {
        match policy {
            Policy::Contract => Judge::Model,
            Policy::Own => Judge::Invariants(BTreeSet::new()),
        }
    }

    /// `model`, or `invariants` with what it waives.
    pub fn describe(&self) -> String {
        match self {
            Judge::Model => "the model".into(),
            Judge::Invariants(w) if w.is_empty() => "the invariants of §17".into(),
            Judge::Invariants(w) => {
                let ids: Vec<_> = w.iter().map(|i| i.id()).collect();
                format!("the invariants of §17 but {}", ids.join(", "))
            }
        }
    }
}

/// A running judge over one cache.
enum Running<C: PrefixSubjectCache> {
    Model(Box<PrefixLockstep<C>>),
    Invariants(Box<PrefixInvariants<C>>),
}

impl<C: PrefixSubjectCache> Running<C> {
    fn step(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixOutcome, PrefixDivergence> {
        match self {
            Running::Model(l) => l.step(index, op),
            Running::Invariants(j) => j.step(index, op),
        }
    }

    fn uncomputed(&self, request: RequestId) -> Option<usize> {
        match self {
            Running::Model(l) => l
                .model
                .request(request)
                .filter(|r| !r.is_preempted())
                .map(|r| r.tokens().len() - r.computed()),
            Running::Invariants(j) => j.uncomputed(request),
        }
    }
}

/// What driving a case showed.
#[derive(Clone, Debug)]
pub struct Driven {
    /// The ops run, in order: the case's, less a `compute` a `whole`
    /// subject is never drawn, plus the driver's own computes. Replaying
    /// them in a free order gives the same run.
    pub executed: Vec<PrefixOp>,
    /// The judged outcome of each executed op that agreed (the model's
    /// under [`Judge::Model`], the subject's under the invariants).
    pub outcomes: Vec<PrefixOutcome>,
    /// The first disagreement, if any (never an `outside` answer).
    pub divergence: Option<PrefixDivergence>,
    /// Why the case was cut: the subject answered that an op lies outside
    /// its domain. The op is not in `executed`.
    pub cut: Option<String>,
}

impl Driven {
    /// Whether nothing diverged (a cut case passes as far as it went).
    pub fn passed(&self) -> bool {
        self.divergence.is_none()
    }
}

/// Drives `ops` on `cache` under `judge`, in the order `steps` asks for:
/// under [`Steps::Whole`] every accepted `start`, `extend` and `resume`
/// is followed by a `compute` of the request's every uncomputed token, and
/// the case's own computes are skipped. Refuses only a config the model
/// refuses (under [`Judge::Model`]).
pub fn drive<C: PrefixSubjectCache>(
    cache: C,
    judge: &Judge,
    steps: Steps,
    ops: &[PrefixOp],
) -> Result<Driven, PrefixError> {
    let mut running = match judge {
        Judge::Model => Running::Model(Box::new(PrefixLockstep::new(cache)?)),
        Judge::Invariants(waived) => {
            Running::Invariants(Box::new(PrefixInvariants::new(cache, waived.clone())))
        }
    };
    let mut driven = Driven {
        executed: Vec::with_capacity(ops.len()),
        outcomes: Vec::with_capacity(ops.len()),
        divergence: None,
        cut: None,
    };
    for op in ops {
        if steps == Steps::Whole && matches!(op, PrefixOp::Compute { .. }) {
            continue;
        }
        let mut next = Some(op.clone());
        while let Some(op) = next.take() {
            let index = driven.executed.len() as u64;
            match running.step(index, &op) {
                Ok(outcome) => {
                    let allocated = matches!(
                        op,
                        PrefixOp::Start { .. } | PrefixOp::Extend { .. } | PrefixOp::Resume { .. }
                    );
                    if steps == Steps::Whole && allocated && matches!(outcome, PrefixOutcome::Ok(_))
                    {
                        let request = op.request().expect("these ops name a request");
                        next = running.uncomputed(request).filter(|&n| n > 0).map(|n| {
                            PrefixOp::Compute {
                                request,
                                count: n as i64,
                            }
                        });
                    }
                    driven.executed.push(op);
                    driven.outcomes.push(outcome);
                }
                Err(d) if d.kind == PrefixDivergenceKind::Outside => {
                    driven.cut = Some(d.actual);
                    return Ok(driven);
                }
                Err(d) => {
                    driven.executed.push(op);
                    driven.divergence = Some(d);
                    return Ok(driven);
                }
            }
        }
    }
    Ok(driven)
}
