//! The transformed runs of each relation: from a trace and what its run
//! showed, the plans that must show the same thing, and which of their
//! steps correspond.
//!
//! Every parameter of a transformation comes from the original run as a
//! caller saw it (global ends returned, refusals) and from the
//! configuration, never from the model, so relations check caches whose
//! contract the model does not implement.

use kvmodel::{Op, Variant};

mod build;
mod parts;

use crate::check::record::{Plan, Transcript};
use crate::check::relation::Relation;
use crate::subject::{Capabilities, Feature, OpKind};
use build::build;
use parts::*;
pub use parts::{Instance, Pair, Part, HISTORY_SOURCE};

/// The instances of `relation` on `original` (whose run showed `run`), at
/// most `limit` of them spread over the candidates (first and last first).
pub fn instances(
    relation: Relation,
    original: &Plan,
    run: &Transcript,
    capabilities: &Capabilities,
    limit: usize,
) -> Vec<Instance> {
    let candidates = candidates(relation, original, run, capabilities);
    spread(candidates.len(), limit)
        .into_iter()
        .filter_map(|i| build(relation, original, run, candidates[i]))
        .collect()
}

/// Up to `limit` indices of `0..n`: the first, the last, then evenly between.
fn spread(n: usize, limit: usize) -> Vec<usize> {
    if n <= limit {
        return (0..n).collect();
    }
    let mut picked: Vec<usize> = match limit {
        0 => Vec::new(),
        1 => vec![0],
        _ => (0..limit).map(|i| i * (n - 1) / (limit - 1)).collect(),
    };
    picked.dedup();
    picked
}

/// The candidate positions of `relation` in the original plan (a step
/// index; M3 and M4 have one candidate, 0). Preconditions on the whole
/// trace are checked here.
fn candidates(
    relation: Relation,
    original: &Plan,
    run: &Transcript,
    capabilities: &Capabilities,
) -> Vec<usize> {
    let config = &original.config;
    let steps = &original.steps;
    let ok = |i: usize| run.seen.get(i).is_some_and(|s| !s.is_refused());
    let indices = 0..steps.len().min(run.seen.len());
    match relation {
        Relation::ResetIsFresh => {
            let mut resets: Vec<usize> = indices
                .filter(|&i| steps[i].op == Op::Reset && ok(i))
                .filter(|&i| !config.growth || run.capacity.get(i).is_some())
                .collect();
            // Projected into the domain: the whole trace replayed after a
            // history and a reset (candidate `steps.len()`), unless growth
            // may have left a capacity no fresh cache has.
            if !config.growth && capabilities.has_op(OpKind::Reset) {
                resets.push(steps.len());
            }
            resets
        }
        Relation::HeadSplit => {
            if config.heads < 2 || !capabilities.has(Feature::HeadRanges) {
                return Vec::new();
            }
            let all = [0, config.heads as i64];
            indices
                .filter(|&i| {
                    is_write(&steps[i]).is_some_and(|w| w.heads.is_none_or(|h| h == all)) && ok(i)
                })
                .collect()
        }
        // Every batch row and every head is a candidate for the part that
        // changes: a row that reads another's bytes shows only when the
        // row it reads from is the one changed.
        Relation::BatchRowsIndependent if config.batch >= 2 => (0..config.batch).collect(),
        Relation::HeadsIndependent if config.heads >= 2 => (0..config.heads).collect(),
        Relation::BatchRowsIndependent | Relation::HeadsIndependent => Vec::new(),
        Relation::RewriteIdempotent => indices
            .filter(|&i| is_write(&steps[i]).is_some_and(|w| w.len >= 1) && ok(i))
            .collect(),
        // A probe added after each op; and every zero-length write of the
        // trace removed (candidate `steps.len() + i`): a probe is pure
        // wherever it starts, past the global end too (refused there).
        Relation::ProbePure => {
            let n = steps.len();
            let probes: Vec<usize> = indices
                .clone()
                .filter(|&i| is_write(&steps[i]).is_some_and(|w| w.len == 0))
                .map(|i| n + i)
                .collect();
            indices.chain(probes).collect()
        }
        Relation::ChunkingInvariant => (0..chunking_prefix(original, run))
            .filter(|&i| is_write(&steps[i]).is_some_and(|w| w.len >= 2))
            .collect(),
        Relation::AppendRewound => {
            if config.variant != Variant::Dense || !capabilities.has_op(OpKind::Rewind) {
                return Vec::new();
            }
            indices
                .filter(|&i| run.global_end_before(i + 1) < config.capacity as u64)
                .collect()
        }
        Relation::RefusalPure => indices.filter(|&i| run.seen[i].is_refused()).collect(),
        Relation::LastWriteWins => {
            let append = |i: usize| {
                is_write(&steps[i]).is_some_and(|w| {
                    w.len >= 1 && w.start >= 0 && w.start as u64 == run.global_end_before(i)
                }) && ok(i)
            };
            let rewritten =
                |i: usize| steps.get(i + 1).and_then(is_write) == is_write(&steps[i]) && ok(i + 1);
            let (pairs, lone): (Vec<usize>, Vec<usize>) =
                indices.filter(|&i| append(i)).partition(|&i| rewritten(i));
            // An accepted append that no rewrite follows is projected into
            // the domain (candidate `steps.len() + i`): one is added.
            pairs
                .into_iter()
                .chain(lone.into_iter().map(|i| steps.len() + i))
                .collect()
        }
        // An invariant judges the original run alone (`engine::invariant`).
        _ => Vec::new(),
    }
}
