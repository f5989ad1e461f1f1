//! The transformed runs of each relation: from a trace and what its run
//! showed, the plans that must show the same thing, and which of their
//! steps correspond.
//!
//! Every parameter of a transformation comes from the original run as a
//! caller saw it (global ends returned, refusals) and from the
//! configuration, never from the model, so relations check caches whose
//! contract the model does not implement.

use std::ops::Range;

use kvmodel::{Op, Quant, Variant, Write};

use super::Relation;
use crate::check::record::{Payload, Plan, Salt, Step, Transcript, FRESH_SOURCE};
use crate::subject::{Capabilities, Feature, OpKind};

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
fn chunking_prefix(original: &Plan, run: &Transcript) -> usize {
    let config = &original.config;
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

fn build(relation: Relation, original: &Plan, run: &Transcript, at: usize) -> Option<Instance> {
    let config = &original.config;
    // M1's projected candidate is `n`, one past the last step, and those
    // of M6 and M10 are `n + i`: their arms read the steps they need.
    let step = *original.steps.get(at).or(original.steps.last())?;
    let n = original.steps.len();
    let mut required = Vec::new();
    let mut base = None;
    let (what, plan, pairs) = match relation {
        Relation::ResetIsFresh if at == n => {
            // The trace run again after a history of its own ops (with
            // other rows) and a reset: the second pass must show what the
            // original, fresh run showed.
            let mut steps: Vec<Step> = original
                .steps
                .iter()
                .enumerate()
                .map(|(i, step)| Step {
                    op: step.op,
                    payload: Payload::of(HISTORY_SOURCE + i as u64),
                })
                .collect();
            steps.push(Step {
                op: Op::Reset,
                payload: Payload::of(0),
            });
            steps.extend_from_slice(&original.steps);
            let pairs = (0..n)
                .map(|i| Pair {
                    original: i,
                    transformed: n + 1 + i,
                    part: Part::Whole,
                })
                .collect();
            (
                format!("the trace run after itself (other rows) and a reset at op {n}"),
                Plan {
                    config: config.clone(),
                    steps,
                },
                pairs,
            )
        }
        Relation::ResetIsFresh => {
            let mut fresh = config.clone();
            if let Some(&capacity) = run.capacity.get(at) {
                // Growth moves the window with the capacity when they were
                // equal (docs/contract.md §3 step 7).
                if config.window.is_none_or(|w| w == config.capacity) {
                    fresh.window = None;
                }
                fresh.capacity = capacity;
            }
            fresh.validate().ok()?;
            let plan = Plan {
                config: fresh,
                steps: original.steps[at + 1..].to_vec(),
            };
            let pairs = (at + 1..n)
                .map(|i| Pair {
                    original: i,
                    transformed: i - at - 1,
                    part: Part::Whole,
                })
                .collect();
            (
                format!(
                    "the ops after the reset at op {at} on a fresh cache (capacity {})",
                    plan.config.capacity
                ),
                plan,
                pairs,
            )
        }
        Relation::HeadSplit => {
            let w = *is_write(&step)?;
            let heads = config.heads as i64;
            let h = heads / 2;
            let part = |first: i64, count: i64| Step {
                op: Op::Write(Write {
                    heads: Some([first, count]),
                    ..w
                }),
                payload: step.payload,
            };
            let (plan, pairs) = splice(original, at, vec![part(0, h), part(h, heads - h)]);
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Heads(0..h as usize),
                },
            );
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at + 1,
                    part: Part::Heads(h as usize..config.heads),
                },
            );
            (
                format!("op {at} written as heads [0, {h}) then [{h}, {heads})"),
                plan,
                pairs,
            )
        }
        Relation::BatchRowsIndependent | Relation::HeadsIndependent => {
            let (salt, part, what) = if relation == Relation::BatchRowsIndependent {
                let b = at;
                (
                    Salt::Batch(b),
                    Part::ExceptBatch(b),
                    format!("every write with other rows in batch row {b}"),
                )
            } else {
                let h = at;
                (
                    Salt::Head(h),
                    Part::ExceptHead(h),
                    format!("every write with other rows in head {h}"),
                )
            };
            let mut plan = original.clone();
            for step in &mut plan.steps {
                step.payload.salt = Some(salt);
            }
            let pairs = (0..n)
                .map(|i| Pair {
                    original: i,
                    transformed: i,
                    part: part.clone(),
                })
                .collect();
            (what, plan, pairs)
        }
        Relation::RewriteIdempotent => {
            let (plan, pairs) = splice(original, at, vec![step, step]);
            required.push(at + 1);
            let mut pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Whole,
                },
            );
            pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at + 1,
                    part: Part::Whole,
                },
            );
            (format!("op {at} repeated with the same rows"), plan, pairs)
        }
        Relation::ProbePure if at >= n => {
            let i = at - n;
            let (plan, pairs) = splice(original, i, Vec::new());
            (format!("without op {i}, a zero-length write"), plan, pairs)
        }
        Relation::ProbePure => {
            let g = run.global_end_before(at + 1);
            let probe = Step {
                op: Op::Write(Write::new(g as i64, 0)),
                payload: Payload::of(FRESH_SOURCE - 1),
            };
            let (plan, pairs) = splice(original, at, vec![step, probe]);
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Whole,
                },
            );
            (
                format!("a zero-length write at {g} added after op {at}"),
                plan,
                pairs,
            )
        }
        Relation::ChunkingInvariant => {
            let w = *is_write(&step)?;
            let lengths = pieces(w.len);
            let mut start = w.start;
            let replacement: Vec<Step> = lengths
                .iter()
                .map(|&len| {
                    let piece = Step {
                        op: Op::Write(Write { start, len, ..w }),
                        payload: step.payload,
                    };
                    start += len;
                    piece
                })
                .collect();
            // Only the prefix inside the domain is judged; what follows it
            // is left out of both sides.
            let prefix = Plan {
                config: config.clone(),
                steps: original.steps[..chunking_prefix(original, run)].to_vec(),
            };
            let (plan, pairs) = splice(&prefix, at, replacement);
            let last = at + lengths.len() - 1;
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: last,
                    part: Part::Whole,
                },
            );
            required = (at..=last).collect();
            let cut = if lengths.len() == w.len as usize {
                format!("{} single rows", w.len)
            } else {
                format!("{} pieces of at most {} rows", lengths.len(), lengths[0])
            };
            (format!("op {at} appended as {cut}"), plan, pairs)
        }
        Relation::AppendRewound => {
            let g = run.global_end_before(at + 1);
            // |R| ≤ G (nothing past the global end is resident) and the
            // capacity never shrinks, so n ≤ C₀ − G appends without
            // eviction or growth.
            let room = config.capacity as u64 - g;
            let len = room.div_ceil(2).max(1);
            let append = Step {
                op: Op::Write(Write::new(g as i64, len as i64)),
                payload: Payload::of(FRESH_SOURCE - 2),
            };
            let rewind = Step {
                op: Op::Rewind { to: g as i64 },
                payload: Payload::of(0),
            };
            let (plan, pairs) = splice(original, at, vec![step, append, rewind]);
            required.extend([at + 1, at + 2]);
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Whole,
                },
            );
            (
                format!("write {g}+{len} then rewind {g} added after op {at}"),
                plan,
                pairs,
            )
        }
        Relation::RefusalPure => {
            let (plan, pairs) = splice(original, at, Vec::new());
            (format!("without op {at}, which was refused"), plan, pairs)
        }
        Relation::LastWriteWins if at >= n => {
            // Append `i` carries other rows (`base`) against the original
            // append followed by a rewrite of exactly its rows with those.
            let i = at - n;
            let other = Payload::of(FRESH_SOURCE - 3);
            let mut with_rows = original.clone();
            with_rows.steps[i].payload = other;
            let rewrite = Step {
                op: original.steps[i].op,
                payload: other,
            };
            let (plan, pairs) = splice(original, i, vec![original.steps[i], rewrite]);
            let pairs = insert_pairs(
                pairs,
                Pair {
                    original: i,
                    transformed: i + 1,
                    part: Part::Whole,
                },
            );
            base = Some(with_rows);
            required.push(i + 1);
            (
                format!("op {i} rewritten at once with other rows, against op {i} appending them"),
                plan,
                pairs,
            )
        }
        Relation::LastWriteWins => {
            // Op `at + 1` rewrites exactly the rows op `at` appended: drop
            // it and let the append carry its rows.
            let mut direct = step;
            direct.payload = original.steps[at + 1].payload;
            let (plan, pairs) = splice(original, at + 1, Vec::new());
            let mut plan = plan;
            plan.steps[at] = direct;
            let mut pairs: Vec<Pair> = pairs.into_iter().filter(|p| p.original != at).collect();
            pairs = insert_pairs(
                pairs,
                Pair {
                    original: at + 1,
                    transformed: at,
                    part: Part::Whole,
                },
            );
            (
                format!(
                    "op {at} appending the rows op {} rewrote, without it",
                    at + 1
                ),
                plan,
                pairs,
            )
        }
        _ => return None,
    };
    Some(Instance {
        relation,
        what,
        plan,
        base,
        pairs,
        required,
    })
}
