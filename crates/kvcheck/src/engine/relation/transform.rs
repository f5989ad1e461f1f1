//! The transformed runs of each relation: from a trace and what its run
//! showed, the plans that must show the same thing, and which of their
//! steps correspond.
//!
//! Every parameter of a transformation comes from the original run as a
//! caller saw it (global ends returned, refusals) and from the
//! configuration, never from the model, so relations check caches whose
//! contract the model does not implement.

use std::ops::Range;

use kvmodel::{Op, Quant, Trim, Variant, Write};

mod build;

use super::Relation;
use crate::check::record::{Payload, Plan, Salt, Step, Transcript, FRESH_SOURCE};
use crate::subject::{Capabilities, Feature, OpKind};
use build::build;

/// How an original step's observation is compared with a transformed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Everything.
    Whole,
    /// The transformed step reports only these heads: the original's view
    /// is compared on them.
    Heads(Range<usize>),
    /// Every byte except those of this batch row.
    ExceptBatch(usize),
    /// Every byte except those of this head.
    ExceptHead(usize),
}

/// Original step `original` corresponds to transformed step `transformed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// Index in the original plan.
    pub original: usize,
    /// Index in the transformed plan.
    pub transformed: usize,
    /// What is compared.
    pub part: Part,
}

/// One application of a relation: the transformed plan and the pairs.
#[derive(Clone, Debug)]
pub struct Instance {
    /// The relation.
    pub relation: Relation,
    /// What was done, in words (`without op 3`, `op 5 split at head 1`).
    pub what: String,
    /// The transformed plan.
    pub plan: Plan,
    /// The plan the transformed one is compared with when it is not the
    /// original (the same ops, other payloads: M10 projected onto an
    /// append that no rewrite follows); `pairs` then index it.
    pub base: Option<Plan>,
    /// Corresponding steps, in original order.
    pub pairs: Vec<Pair>,
    /// Transformed steps that must succeed for the relation to apply (the
    /// pieces of a rechunked append, an added rewind or rewrite): a
    /// subject that refuses one by design is outside the relation's
    /// domain there, not in breach of it.
    pub required: Vec<usize>,
}

/// Source ids of the rows a replayed history writes before a reset (M1):
/// far from every op index, salted row and added write, so that a row the
/// reset failed to forget never equals the row written in its place.
pub const HISTORY_SOURCE: u64 = 2 * FRESH_SOURCE;

/// Most pieces M7 cuts one append into: single tokens up to this length,
/// so that a fault of any multi-token path shows against the one-token
/// path; longer appends are cut into this many equal pieces.
const MOST_PIECES: i64 = 16;

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

fn is_write(step: &Step) -> Option<&Write> {
    match &step.op {
        Op::Write(w) => Some(w),
        _ => None,
    }
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

/// The longest prefix of the trace inside M7's domain (its length in
/// steps): dense, or packed without quantization; every write an append
/// (`s = G` as the run showed it) of all heads' rows with no recent
/// window, and accepted; no pin; packed prefixes hold nothing but appends
/// and resets (a rewind target that is a chunk boundary in one run is not
/// in the other). M7 judges that prefix whatever follows it.
///
/// Under `trim = "after_read"` the domain is empty: a chunk reads the
/// whole view before it, so one append of `n` rows shows up to `n − 1`
/// older positions more than its last one-row piece, which reads a state
/// the earlier pieces have already trimmed (docs/contract.md §9).
fn chunking_prefix(original: &Plan, run: &Transcript) -> usize {
    let config = &original.config;
    if config.trim == Trim::AfterRead {
        return 0;
    }
    let variant_ok = match config.variant {
        Variant::Dense => true,
        Variant::Packed => config.packed_policy().quant == Quant::None,
    };
    if !variant_ok {
        return 0;
    }
    let eligible = |i: usize, step: &Step| match &step.op {
        Op::Write(w) => {
            w.recent_window.is_none()
                && w.heads.is_none()
                && w.start >= 0
                && w.start as u64 == run.global_end_before(i)
                && !run.seen[i].is_refused()
        }
        Op::Pin { .. } => false,
        Op::Reset => true,
        Op::Rewind { .. } | Op::Evict { .. } => config.variant == Variant::Dense,
    };
    original
        .steps
        .iter()
        .take(run.seen.len())
        .enumerate()
        .take_while(|&(i, step)| eligible(i, step))
        .count()
}

/// The lengths M7 cuts an append of `len` rows into (see [`MOST_PIECES`]).
fn pieces(len: i64) -> Vec<i64> {
    let size = (len + MOST_PIECES - 1) / MOST_PIECES;
    let mut left = len;
    let mut out = Vec::new();
    while left > 0 {
        out.push(size.min(left));
        left -= size;
    }
    out
}

/// The plan with `replacement` in place of step `at`; pairs shift the
/// later steps by `replacement.len() - 1`.
fn splice(original: &Plan, at: usize, replacement: Vec<Step>) -> (Plan, Vec<Pair>) {
    let added = replacement.len();
    let mut steps = original.steps[..at].to_vec();
    steps.extend(replacement);
    steps.extend_from_slice(&original.steps[at + 1..]);
    let pairs = (0..original.steps.len())
        .filter(|&i| i != at)
        .map(|i| Pair {
            original: i,
            transformed: if i < at { i } else { i + added - 1 },
            part: Part::Whole,
        })
        .collect();
    (
        Plan {
            config: original.config.clone(),
            steps,
        },
        pairs,
    )
}

fn insert_pairs(mut pairs: Vec<Pair>, pair: Pair) -> Vec<Pair> {
    let at = pairs
        .iter()
        .position(|p| p.original > pair.original)
        .unwrap_or(pairs.len());
    pairs.insert(at, pair);
    pairs
}
