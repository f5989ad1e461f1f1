//! Relations: checking a cache against itself, with no model (docs/contract.md §9,
//! and M10 beyond it).
//!
//! A relation says that two runs must show a caller the same thing: a
//! trace, and the same trace transformed in a way the contract says cannot
//! change what a caller sees (a reset replaced by a fresh cache, a write
//! split by heads, a refused op removed, …). [`check`] runs a trace on a
//! subject, builds each relation's transformed plans from what that run
//! showed ([`transform`]), runs them on the same subject and compares the
//! corresponding steps ([`compare`]): outcomes (ok or refused, and the
//! kind when the subject gives docs/contract.md kinds), global ends, visible
//! positions and view bytes. Corresponding writes carry identical payload
//! bytes ([`crate::check::record::Payload`]); writer ids are not compared.
//!
//! A disagreement is a [`Divergence`] of kind
//! [`DivergenceKind::Relation`] naming the relation; its trace is the
//! original one, tagged with the relation ([`crate::check::trace::OracleTag`]) so
//! that replaying it checks that relation again. [`differential`] is the
//! same comparison between two subjects on one plan.
//!
//! Each relation's precondition is checked on the original run as a
//! caller saw it; `tests/relations.rs` proves every relation on the
//! reference model over random traces.

pub mod compare;
pub mod domain;
mod explain;
mod finding;

pub mod transform;

use kvmodel::{Config, Op};

use crate::check::divergence::{Divergence, DivergenceKind};
use crate::check::lockstep::Cut;
use crate::check::record::ObserveError;
use crate::check::record::{observe, Plan, Seen, Transcript};
use crate::check::relation::Relation;
use crate::check::trace::{OracleTag, Trace};
use crate::engine::invariant::first_violation;
use crate::engine::oracle::{NotChecked, Work};
use crate::subject::{SubjectSpec, Unsupported};
use compare::{first_mismatch, Compared, Mismatch};
pub use explain::render;
pub use finding::{Finding, Side};
use transform::{instances, Pair, Part};

/// Runs `ops` on `subject`, judges the invariants among `relations` on
/// that run ([`crate::engine::invariant`], no second run), then runs every
/// instance of the other relations (at most `limit` per relation), and
/// returns the first failure as a divergence. `work` counts the runs and
/// ops spent.
pub fn check(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    relations: &[Relation],
    limit: usize,
    work: &mut Work,
) -> Result<Option<Box<Divergence>>, NotChecked> {
    Ok(find(config, ops, subject, relations, limit, work)?.map(|f| f.divergence))
}

/// [`check`] with both runs of the failure.
pub fn find(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    relations: &[Relation],
    limit: usize,
    work: &mut Work,
) -> Result<Option<Finding>, NotChecked> {
    let capabilities = subject
        .capabilities()
        .map_err(|f| NotChecked::Setup(f.to_string()))?;
    capabilities.supports_trace(config, ops)?;
    let original = Plan::of(config, ops);
    let run = run_counted(subject, &original, work)?;
    if let Some(reason) = &run.cut {
        // Judged up to the cut: the relations see the prefix inside.
        let step = run.seen.len();
        work.cut = Some(Cut::at(config, ops, step, reason.clone(), true));
        if step >= ops.len() {
            // Cut before any op it could drop (the subject's open answered
            // outside): nothing is left to judge.
            return Ok(None);
        }
        let found = find(config, &ops[..step], subject, relations, limit, work)?;
        return Ok(found);
    }
    let name = subject.name(config);
    let left = Side {
        title: "original run".to_string(),
        plan: original.clone(),
        run: run.clone(),
    };
    if run.failure.is_some() {
        let identity = identity(ops.len());
        let tag = match relations {
            [one] => OracleTag::relation(*one),
            _ => OracleTag::all_relations(),
        };
        return Ok(Some(settle(left.clone(), left, identity, None, &name, tag)));
    }
    // The invariants first: they need no second run.
    let (invariants, relations): (Vec<Relation>, Vec<Relation>) =
        relations.iter().partition(|r| r.is_invariant());
    let values = capabilities.values;
    if let Some((invariant, v)) =
        first_violation(&invariants, &original, &run, values, &mut work.judged)
    {
        let required = Side {
            title: format!("what {invariant} requires"),
            ..left.clone()
        };
        let mismatch = Mismatch {
            original: v.step,
            transformed: v.step,
            expected: v.expected,
            actual: v.actual,
        };
        let (pairs, tag) = (identity(ops.len()), OracleTag::relation(invariant));
        let mut finding = settle(required, left, pairs, Some(mismatch), &name, tag);
        finding.divergence.kind = DivergenceKind::Relation(invariant);
        return Ok(Some(finding));
    }
    let compared = Compared {
        values,
        exact: subject.exact_kinds(),
    };
    for &relation in &relations {
        let mut judged = false;
        for instance in instances(relation, &original, &run, &capabilities, limit) {
            let other = run_counted(subject, &instance.plan, work)?;
            if other.cut.is_some() {
                // The transformed run left the subject's domain: no verdict.
                work.instances_cut += 1;
                continue;
            }
            let refused = |&t: &usize| other.seen.get(t).is_some_and(Seen::is_refused);
            if other.failure.is_none() && instance.required.iter().any(refused) {
                // Outside the relation's domain on this subject.
                continue;
            }
            // The side compared with: the original run, or the instance's
            // own base run (the same ops with other payloads).
            let based;
            let reference = match instance.base {
                Some(plan) => {
                    let run = run_counted(subject, &plan, work)?;
                    if run.cut.is_some() {
                        work.instances_cut += 1;
                        continue;
                    }
                    work.judged.ops[relation.index()] += run.seen.len() as u64;
                    based = Side {
                        title: "the same ops with the rewrite's rows appended".to_string(),
                        plan,
                        run,
                    };
                    &based
                }
                None => &left,
            };
            if !judged {
                judged = true;
                work.judged.cases[relation.index()] += 1;
            }
            work.judged.ops[relation.index()] += other.seen.len() as u64;
            let mismatch =
                first_mismatch(config, &reference.run, &other, &instance.pairs, compared);
            if mismatch.is_none() && other.failure.is_none() && reference.run.failure.is_none() {
                continue;
            }
            let right = Side {
                title: format!("{} ({relation})", instance.what),
                plan: instance.plan,
                run: other,
            };
            let tag = OracleTag::relation(relation);
            let mut finding = settle(
                reference.clone(),
                right,
                instance.pairs,
                mismatch,
                &name,
                tag,
            );
            if finding.mismatch.is_some() {
                finding.divergence.kind = DivergenceKind::Relation(relation);
            }
            return Ok(Some(finding));
        }
    }
    Ok(None)
}

fn identity(n: usize) -> Vec<Pair> {
    (0..n)
        .map(|i| Pair {
            original: i,
            transformed: i,
            part: Part::Whole,
        })
        .collect()
}

/// Runs `ops` on `subject` and on `oracle` with the same payloads and
/// returns the first step where they differ, compared on what both can
/// express (values only when both return them, kinds only when both give
/// docs/contract.md kinds).
pub fn differential(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    oracle: &SubjectSpec,
    work: &mut Work,
) -> Result<Option<Box<Divergence>>, NotChecked> {
    Ok(find_differential(config, ops, subject, oracle, work)?.map(|f| f.divergence))
}

/// [`differential`] with both runs of the failure.
pub fn find_differential(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    oracle: &SubjectSpec,
    work: &mut Work,
) -> Result<Option<Finding>, NotChecked> {
    let mut compared = Compared {
        values: true,
        exact: true,
    };
    for side in [subject, oracle] {
        let capabilities = side
            .capabilities()
            .map_err(|f| NotChecked::Setup(f.to_string()))?;
        capabilities
            .supports_trace(config, ops)
            .map_err(|e| Unsupported {
                what: format!("{} ({})", e.what, side.name(config)),
            })?;
        compared.values &= capabilities.values;
        compared.exact &= side.exact_kinds();
    }
    let plan = Plan::of(config, ops);
    let side = |spec: &SubjectSpec, work: &mut Work| -> Result<Side, NotChecked> {
        Ok(Side {
            title: spec.name(config),
            plan: plan.clone(),
            run: run_counted(spec, &plan, work)?,
        })
    };
    let left = side(oracle, work)?;
    let right = side(subject, work)?;
    let cut = [&left, &right]
        .into_iter()
        .filter_map(|side| {
            side.run
                .cut
                .clone()
                .map(|reason| (side.run.seen.len(), reason))
        })
        .min_by_key(|(step, _)| *step);
    if let Some((step, reason)) = cut {
        // Compared up to where either left its domain.
        let found = find_differential(config, &ops[..step], subject, oracle, work)?;
        work.cut = Some(Cut::at(config, ops, step, reason, true));
        return Ok(found);
    }
    let pairs = identity(ops.len());
    let mismatch = first_mismatch(config, &left.run, &right.run, &pairs, compared);
    if mismatch.is_none() && left.run.failure.is_none() && right.run.failure.is_none() {
        return Ok(None);
    }
    // The subject alone, so that the replay command names it; the summary
    // names the oracle from the trace's tag.
    let name = subject.name(config);
    let tag = OracleTag::subject(&oracle.to_string());
    let mut finding = settle(left, right, pairs, mismatch, &name, tag);
    if finding.mismatch.is_some() {
        finding.divergence.kind = DivergenceKind::Differential;
    }
    Ok(Some(finding))
}

fn run_counted(
    subject: &SubjectSpec,
    plan: &Plan,
    work: &mut Work,
) -> Result<Transcript, NotChecked> {
    let run = match observe(subject, plan) {
        Ok(run) => run,
        // A configuration outside the subject's domain: cut before op 0.
        Err(ObserveError::Open(kvcache::Error::Outside { reason })) => Transcript {
            cut: Some(format!(
                "the configuration is outside its domain ({reason})"
            )),
            ..Transcript::default()
        },
        Err(e) => return Err(NotChecked::Setup(e.to_string())),
    };
    work.runs += 1;
    work.ops += run.seen.len() + usize::from(run.failure.is_some());
    Ok(run)
}

/// The finding of two runs that part at `mismatch`, or of a run that
/// ended in misbehaviour (a divergence of that kind, at the original step
/// the failing step corresponds to). The divergence's kind is set by the
/// caller for a mismatch.
fn settle(
    left: Side,
    right: Side,
    pairs: Vec<Pair>,
    mismatch: Option<Mismatch>,
    subject: &str,
    tag: OracleTag,
) -> Finding {
    let ops = left.plan.ops();
    let mut trace = Trace::new(left.plan.config.clone(), ops.clone());
    trace.oracle = Some(tag);
    let failure = [&left, &right]
        .into_iter()
        .find_map(|side| side.run.failure.clone().map(|f| (side, f)));
    let (step, kind, expected, actual) = match (&mismatch, failure) {
        (Some(m), _) => (
            m.original,
            DivergenceKind::Differential,
            format!("{}: {}", left.title, m.expected),
            format!("{}, its op {}: {}", right.title, m.transformed, m.actual),
        ),
        (None, Some((side, (kind, message)))) => {
            let failed = side.run.seen.len();
            let step = pairs
                .iter()
                .filter(|p| p.transformed <= failed)
                .map(|p| p.original)
                .max()
                .unwrap_or(0);
            (
                step,
                kind,
                "an answer".to_string(),
                format!("{}, its op {failed}: {message}", side.title),
            )
        }
        (None, None) => (
            0,
            DivergenceKind::Differential,
            String::new(),
            String::new(),
        ),
    };
    let step = step.min(ops.len().saturating_sub(1));
    let divergence = Box::new(Divergence {
        step,
        op: ops[step],
        kind,
        expected,
        actual,
        rows: Vec::new(),
        trace,
        subject: subject.to_string(),
        saved: None,
        reproduce: None,
    });
    Finding {
        divergence,
        left,
        right,
        pairs,
        mismatch,
    }
}
