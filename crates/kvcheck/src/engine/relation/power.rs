//! The power of the relations alone: the zoo of faults
//! ([`kvcache::fault::CacheFault`]) checked with no model, and for each
//! fault the relation that catches it, after how much work, and whether the
//! minimized counterexample replays.
//!
//! Cases are drawn like the `run` engine's (every profile the subject
//! allows, round robin, fixed seeds) and checked whole by
//! [`super::check`] with every relation. A fault no relation sees is
//! explained by [`invisible`]: the bugs a cache can make consistently, so
//! that every transformed run agrees with the original one and only the
//! model can tell.

use std::time::{Duration, Instant};

use kvcache::fault::CacheFault;

use super::domain::draw;
use super::{check, Relation, Work};
use crate::check::divergence::DivergenceKind;
use crate::engine::minimize::minimize_with;
use crate::engine::oracle::Oracle;
use crate::engine::power::{profile_runners, Target};
use crate::engine::replay::replay_with;
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
/// trace, see [`super::find`]), drawing cases from `seed` until the first
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
    let Ok(capabilities) = subject.capabilities() else {
        row.note = "no capabilities".into();
        return row;
    };
    let (selected, mut runners) = profile_runners(&capabilities, seed);
    while started.elapsed() < budget && row.cases < max_cases && !selected.is_empty() {
        for (slot, &profile) in selected.iter().enumerate() {
            row.cases += 1;
            let drawn = draw(
                profile,
                &mut runners[slot],
                max_ops,
                &subject,
                &capabilities,
            );
            let Ok((config, ops)) = drawn else {
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

/// Why no relation can see `fault`: what it does is the same in every run
/// a relation compares, so the original and the transformed runs agree.
pub fn invisible(fault: CacheFault) -> &'static str {
    match fault {
        CacheFault::EvictedRewriteOnSink => {
            "accepts a rewrite of evicted positions where docs/contract.md refuses it; it does so in every run alike, and the rows it lands on the sink are the same bytes whatever the transformation: a different contract, consistent with itself"
        }
        CacheFault::WindowDropsSink => {
            "with W < C the view leaves out the sink in every run (sglang's D1): consistent with itself, only the model says the sink belongs in the view"
        }
        CacheFault::ZeroLengthAdvances => {
            "a zero-length write past the global end moves it, in every run alike; M6 probes at the global end, not past it, so no transformation adds or removes such a write"
        }
        CacheFault::WindowDoubleCountsSink => {
            "the window shows S fewer recent positions than W allows, in every run alike: another window rule, consistent with itself"
        }
        CacheFault::PinLostOnMisalignedRoll => {
            "whether the pin is lost depends on the chunk lengths against the pin's distance to the sink; the one relation that changes chunk lengths (M7) leaves pins out, and every other run rolls with the same steps"
        }
        CacheFault::PinDuplicatedInView => {
            "the pinned range is listed twice in every view of every run: a consistent view rule that only the model calls wrong"
        }
        CacheFault::EvictRemovesSink => {
            "eviction drops the first sink position in every run alike (M8 and M9 add or remove no eviction): consistent with itself"
        }
        CacheFault::PackedReturnsEveryHead => {
            "a head-range write returns every head in every run alike (D10); the relations read such a view by the heads its bytes hold, so the rows they compare agree"
        }
        CacheFault::GapWriteAccepted => {
            "a write past the global end is accepted in every run alike: a different contract, consistent with itself"
        }
        CacheFault::KeepRecentCountsCurrent
        | CacheFault::SinkChunkPacked
        | CacheFault::Int4NibblesSwapped
        | CacheFault::ScaleReciprocal => {
            "the cold values are a fixed function of each row and its chunk's age, the same in every run: M3 and M4 change rows independently and quantization stays per row, M7 leaves quantized caches out (chunk sizes decide which chunks go cold); only the model's reference quantizer knows the right codes"
        }
        _ => "not caught within the budget",
    }
}
