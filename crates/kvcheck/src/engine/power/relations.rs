//! The power of the relations and invariants alone: the zoo of faults
//! ([`kvcache::fault::CacheFault`]) checked with no model, and for each
//! fault the relation that catches it, after how much work, and whether the
//! minimized counterexample replays.
//!
//! Cases are drawn like the `run` engine's (every profile the subject
//! allows, round robin, fixed seeds) and checked whole by
//! [`check`] with every relation and invariant. A fault no check
//! sees is explained by [`invisible`]: the bugs a cache can make
//! consistently, so that every transformed run agrees with the original
//! one, and that break no rule one run can be judged by without the
//! model.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvcache::fault::CacheFault;

use crate::check::divergence::DivergenceKind;
use crate::check::relation::Relation;
use crate::engine::minimize::minimize_with;
use crate::engine::oracle::Oracle;
use crate::engine::oracle::Work;
use crate::engine::power::{profile_runners, Target};
use crate::engine::relation::check;
use crate::engine::relation::domain::draw;
use crate::engine::replay::replay_with;
use crate::engine::strategy::{Case, PROFILES};
use crate::subject::SubjectSpec;

/// Candidates the minimizer may try per catch.
const MINIMIZE_TESTS: usize = 400;

/// What the relations did with one row of the zoo.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfCatch {
    /// The divergence kind of the catch (`relation_m9`, or `crash`, …).
    pub caught: Option<DivergenceKind>,
    /// Cases drawn until the catch (or in all).
    pub cases: u64,
    /// Subject runs and ops spent until the catch (or in all).
    pub work: Work,
    /// Seconds until the catch (or spent).
    pub seconds: f64,
    /// Ops of the minimized counterexample.
    pub minimized_ops: Option<usize>,
    /// Whether the minimized trace, replayed from its file form, fails the
    /// same way again.
    pub replayed: Option<bool>,
    /// The divergence in one line, or why nothing was found.
    pub note: String,
}

/// Checks `target` with `relations` (`instances` instances of each per
/// trace, see [`find`](crate::engine::relation::find)), drawing cases from `seed` until the first
/// failure, `max_cases` cases or `budget`; a catch is minimized (the same
/// relation kept) and its trace replayed.
pub fn catch(
    target: Target,
    relations: &[Relation],
    instances: usize,
    seed: u64,
    budget: Duration,
    max_cases: u64,
    max_ops: usize,
) -> SelfCatch {
    let mut row = catch_on(
        &target.subject(),
        relations,
        instances,
        seed,
        budget,
        max_cases,
        max_ops,
    );
    if row.caught.is_none() && target.fault.is_none() {
        row.note = "the correct cache agrees with itself".to_string();
    }
    row
}

/// [`catch`] on any subject (an `exec:` one, a factory).
pub fn catch_on(
    subject: &SubjectSpec,
    relations: &[Relation],
    instances: usize,
    seed: u64,
    budget: Duration,
    max_cases: u64,
    max_ops: usize,
) -> SelfCatch {
    let started = Instant::now();
    let subject = subject.clone();
    let mut row = SelfCatch {
        caught: None,
        cases: 0,
        work: Work::default(),
        seconds: 0.0,
        minimized_ops: None,
        replayed: None,
        note: String::new(),
    };
    let Ok(capabilities) = subject.capabilities().map(Arc::new) else {
        row.note = "no capabilities".into();
        return row;
    };
    let (selected, mut runners) = profile_runners(&capabilities, seed);
    while started.elapsed() < budget && row.cases < max_cases && !selected.is_empty() {
        for (slot, &profile) in selected.iter().enumerate() {
            row.cases += 1;
            let drawn = draw(
                &PROFILES[profile],
                &capabilities,
                &mut runners[slot],
                max_ops,
            );
            let Ok(Case { config, ops }) = drawn else {
                continue;
            };
            let found = check(&config, &ops, &subject, relations, instances, &mut row.work);
            let Ok(Some(divergence)) = found else {
                continue;
            };
            row.seconds = started.elapsed().as_secs_f64();
            row.caught = Some(divergence.kind);
            row.note = divergence.summary();
            let oracle = Oracle::relations(None)
                .with_relation_instances(instances)
                .narrowed(&divergence);
            if let Ok(m) =
                minimize_with(&divergence.trace, subject.clone(), &oracle, MINIMIZE_TESTS)
            {
                row.minimized_ops = Some(m.trace.ops.len());
                // The file form: what `kvcheck replay` reads back, checked
                // against the relation it names with as many instances.
                let again = crate::check::trace::Trace::from_json(&m.trace.to_json())
                    .ok()
                    .map(|t| {
                        let named = t.oracle.as_ref().map(Oracle::of_tag);
                        let oracle = match named {
                            Some(Ok(named)) => named.with_relation_instances(instances),
                            _ => Oracle::model(),
                        };
                        replay_with(&t, None, Some(subject.clone()), None, &oracle)
                    });
                row.replayed = Some(
                    again.is_some_and(|r| r.divergence.is_some_and(|d| d.kind == divergence.kind)),
                );
            }
            return row;
        }
    }
    row.seconds = started.elapsed().as_secs_f64();
    row.note = "not caught".to_string();
    row
}

/// Why no relation and no invariant can see `fault` (or, for a fault some
/// check sees, why the relations alone miss it): what it does is the same
/// in every run a relation compares, so the original and the transformed
/// runs agree, and no single run breaks a rule of the contract that holds
/// without the model.
pub fn invisible(fault: CacheFault) -> &'static str {
    match fault {
        CacheFault::Int4NibblesSwapped | CacheFault::ScaleReciprocal => {
            "only cold (quantized) values are wrong, the same function of each row and its chunk's age in every run: M3 and M4 change rows independently and quantization stays per row, M7 leaves quantized caches out, and I5 judges exact-value rows only (a cold row's codes are the reference quantizer's, the model's to judge)"
        }
        CacheFault::KeepRecentCountsCurrent | CacheFault::SinkChunkPacked => {
            "the relations see the cold values as a fixed function of each row in every run; I5 sees a chunk the contract keeps hot (§6: among the keep_recent_chunks most recent, or starting below the sink without pack_sink) come back quantized"
        }
        CacheFault::EvictedRewriteOnSink => {
            "accepts a rewrite of evicted positions in every run alike (a different contract, consistent with itself); I5 sees the sink rows holding the rewrite's bytes"
        }
        CacheFault::WindowDropsSink | CacheFault::EvictRemovesSink => {
            "the view leaves out a sink in every run alike; I2 sees a written sink missing from a view"
        }
        CacheFault::WindowDoubleCountsSink => {
            "another window rule, consistent with itself; I4 sees S fewer recent positions than W − |P| allows"
        }
        CacheFault::PinLostOnMisalignedRoll => {
            "the one relation that changes chunk lengths (M7) leaves pins out; I3 sees the pinned positions gone while the pin stands"
        }
        CacheFault::PinDuplicatedInView => {
            "the pinned range is listed twice in every run; I1 sees it in one"
        }
        CacheFault::PackedReturnsEveryHead => {
            "a head-range write returns every head in every run alike (D10); I6 sees a view with more heads than written"
        }
        _ => "not caught within the budget",
    }
}
