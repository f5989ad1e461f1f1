//! What a transformed run is made of: the parts of a step compared, the
//! pairs of corresponding steps, an instance of a relation, and the plan
//! edits every transformation is built from.

use std::ops::Range;

use kvmodel::{Op, Quant, Trim, Variant, Write};

use crate::check::record::{Plan, Step, Transcript, FRESH_SOURCE};
use crate::check::relation::Relation;

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
pub(super) const MOST_PIECES: i64 = 16;

pub(super) fn is_write(step: &Step) -> Option<&Write> {
    match &step.op {
        Op::Write(w) => Some(w),
        _ => None,
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
pub(super) fn chunking_prefix(original: &Plan, run: &Transcript) -> usize {
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
pub(super) fn pieces(len: i64) -> Vec<i64> {
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
pub(super) fn splice(original: &Plan, at: usize, replacement: Vec<Step>) -> (Plan, Vec<Pair>) {
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

pub(super) fn insert_pairs(mut pairs: Vec<Pair>, pair: Pair) -> Vec<Pair> {
    let at = pairs
        .iter()
        .position(|p| p.original > pair.original)
        .unwrap_or(pairs.len());
    pairs.insert(at, pair);
    pairs
}
