//! Building one instance of a relation: the transformed plan for one
//! candidate place, and the pairs of steps it is compared on.

use kvmodel::{Op, Trim, Write};

use super::parts::*;
use crate::check::record::{Payload, Plan, Salt, Step, Transcript, FRESH_SOURCE};
use crate::check::relation::Relation;

/// Whether the view of a write in the transformed run can be compared
/// with the view of the same request in the other run when the two read
/// different states. Under `trim = "before_read"` a write's view depends
/// only on the state after it, which both runs share; under `after_read`
/// it depends on the state before it, which differs once an earlier
/// write of the pair (a first head half, the first of a repeated write,
/// an append the rewrite follows) has added positions and trimmed. The
/// write at step `at` of `original` added positions when it ends past the
/// global end before it, as the run showed.
fn reread_view_comparable(original: &Plan, run: &Transcript, at: usize) -> bool {
    if original.config.trim != Trim::AfterRead {
        return true;
    }
    let adds = match original.steps.get(at).map(|s| &s.op) {
        Some(Op::Write(w)) => {
            w.start.saturating_add(w.len).max(0) as u64 > run.global_end_before(at)
        }
        _ => false,
    };
    !adds
}

/// The instance of `relation` at candidate `at` (see `candidates`), or
/// none when that place turns out to lie outside the relation's domain
/// (an invariant has no instance: it judges the original run alone).
pub(super) fn build(
    relation: Relation,
    original: &Plan,
    run: &Transcript,
    at: usize,
) -> Option<Instance> {
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
            let mut pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Heads(0..h as usize),
                },
            );
            // Under after_read the second half reads the state the first
            // half trimmed, and is refused where that trim took rows of
            // its own chunk (see `reread_view_comparable`).
            if config.trim == Trim::AfterRead {
                required.push(at + 1);
            }
            if reread_view_comparable(original, run, at) {
                pairs = insert_pairs(
                    pairs,
                    Pair {
                        original: at,
                        transformed: at + 1,
                        part: Part::Heads(h as usize..config.heads),
                    },
                );
            }
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
            if reread_view_comparable(original, run, at) {
                pairs = insert_pairs(
                    pairs,
                    Pair {
                        original: at,
                        transformed: at + 1,
                        part: Part::Whole,
                    },
                );
            }
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
            let mut pairs = insert_pairs(
                pairs,
                Pair {
                    original: at,
                    transformed: at,
                    part: Part::Whole,
                },
            );
            // After a zero-length write at `g` (every head, no recent
            // window), the added probe repeats it on the same state: it
            // must show what op `at` showed (on a packed cache, which
            // refuses both, a refusal in both runs).
            if is_write(&step).is_some_and(|w| *w == Write::new(g as i64, 0)) {
                pairs = insert_pairs(
                    pairs,
                    Pair {
                        original: at,
                        transformed: at + 1,
                        part: Part::Whole,
                    },
                );
            }
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
            let (plan, mut pairs) = splice(original, i, vec![original.steps[i], rewrite]);
            // An append adds positions: under after_read its rewrite reads
            // the trimmed state, so only the later ops are compared.
            if reread_view_comparable(original, run, i) {
                pairs = insert_pairs(
                    pairs,
                    Pair {
                        original: i,
                        transformed: i + 1,
                        part: Part::Whole,
                    },
                );
            }
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
            if reread_view_comparable(original, run, at) {
                pairs = insert_pairs(
                    pairs,
                    Pair {
                        original: at + 1,
                        transformed: at,
                        part: Part::Whole,
                    },
                );
            }
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
