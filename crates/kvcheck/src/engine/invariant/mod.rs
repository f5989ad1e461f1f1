//! Invariants of one run: what docs/contract.md says every single run
//! shows a caller, checked against the original run's record alone, with
//! no model and no second run (the contract's §9, invariants I1–I8).
//!
//! A relation compares two runs, so a cache that makes the same mistake
//! in both passes it; an invariant reads one run and knows, from the ops,
//! the outcomes a caller saw (accepted or refused) and the configuration
//! alone, what the contract guarantees there ([`state::Derived`]): the
//! global end, which sink and pinned positions are certainly resident,
//! the resident count while no pin makes it depend on the resident set,
//! which write reached each (position, head) last, and which packed rows
//! certainly hold exact values. Nothing is asked of `kvmodel::Model`; where
//! the contract's exact retention would need the resident set, an
//! invariant judges only what is certain.
//!
//! | id | invariant | judged on |
//! |---|---|---|
//! | I1 | no view lists a position twice (§4) | every accepted write |
//! | I2 | a written sink stays visible (§2, §4) | `[0, GS)`, and `[0, S)` while no pin stands, until a rewind below it or a reset |
//! | I3 | a pinned position stays visible while its pin stands (§5) | accepted pins |
//! | I4 | the view shows `min(held, W − |P|)` recent positions (with `r`: those `≥ s − r`); under `trim = "after_read"` those of the state before the write, and the chunk | from a reset (or the start) to the first accepted pin |
//! | I5 | every exact-value row holds the latest accepted write's bytes, zeros where none (§3 step 9, §7) | dense, packed `quant = none`, and packed chunks certainly hot (§6); quantized cold rows stay the model's |
//! | I6 | K and V hold `B × |view| × heads written × D` elements (§4) | subjects that return values |
//! | I7 | an accepted op returns the contract's global end (§3) | every accepted op |
//! | I8 | an op refused in every state the run agrees with is refused (§3, §6) | negative arguments, bad head ranges, gaps, rewinds and pins past `G`, evictions past the evictable count, packed requests outside §6 |
//!
//! A run that accepts an op I8 says must be refused has left the
//! contract: the other invariants stop judging there (what they would
//! derive no longer follows), and I8 reports it.

mod rows;
pub mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use kvmodel::{Op, Trim};

use crate::check::record::{Plan, Seen, Transcript, ViewBytes};
use crate::check::relation::Relation;
use crate::engine::oracle::Judged;
use state::{checked, Derived};

/// Where and how a run breaks an invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The step of the run that breaks it.
    pub step: usize,
    /// What the invariant requires there, in words.
    pub expected: String,
    /// What the run showed, in words.
    pub actual: String,
}

/// What judging one invariant on one run found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judgement {
    /// The first step that breaks the invariant, if any.
    pub violation: Option<Violation>,
    /// Ops of the run the invariant judged (inside its domain).
    pub ops: u64,
}

/// Judges `invariant` (one of [`Relation::INVARIANTS`]) on `run`, the
/// record of `plan` on a subject; `values` says whether the subject
/// returns view bytes (I5 and I6 judge nothing without them). A relation
/// between two runs judges nothing here.
pub fn judge(invariant: Relation, plan: &Plan, run: &Transcript, values: bool) -> Judgement {
    let mut state = Derived::new(&plan.config);
    let mut ops = 0;
    for (step, (planned, seen)) in plan.steps.iter().zip(&run.seen).enumerate() {
        let op = &planned.op;
        let refuse = state.must_refuse(op);
        let Seen::Ok { global_end, view } = seen else {
            ops += u64::from(invariant == Relation::MustRefuse && refuse.is_some());
            continue;
        };
        if let Some(why) = refuse {
            if invariant == Relation::MustRefuse {
                return broken(step, ops + 1, format!("refused: {why}"), seen.describe());
            }
            // Outside the contract: nothing after this follows from it.
            break;
        }
        let end = state.end_after(op);
        // Under after_read a write's view is read from the state before
        // it (§3, trim modes): I4's width is taken before the write.
        let read_width = match op {
            Op::Write(w)
                if invariant == Relation::WindowWidth && plan.config.trim == Trim::AfterRead =>
            {
                checked(w, plan.config.heads).and_then(|c| state.recent_shown_read(&c))
            }
            _ => None,
        };
        state.accept(op, planned.payload);
        let found = match (invariant, view, op) {
            (Relation::GlobalEnd, _, _) => {
                ops += 1;
                (*global_end != end).then(|| (format!("G={end}"), seen.describe()))
            }
            (_, Some(view), Op::Write(w)) => {
                let Some(c) = checked(w, plan.config.heads) else {
                    continue;
                };
                let width = Width {
                    read: read_width,
                    values,
                };
                on_view(invariant, plan, &state, &c, view, width, &mut ops)
            }
            _ => None,
        };
        if let Some((expected, actual)) = found {
            return broken(step, ops, expected, actual);
        }
    }
    Judgement {
        violation: None,
        ops,
    }
}

/// The first of `invariants` (in the order given) that `run` breaks,
/// with its violation; `judged` counts, per invariant, the run if the
/// invariant judged any op of it and the ops it judged.
pub fn first_violation(
    invariants: &[Relation],
    plan: &Plan,
    run: &Transcript,
    values: bool,
    judged: &mut Judged,
) -> Option<(Relation, Violation)> {
    invariants.iter().find_map(|&invariant| {
        let judgement = judge(invariant, plan, run, values);
        if judgement.ops > 0 {
            judged.cases[invariant.index()] += 1;
            judged.ops[invariant.index()] += judgement.ops;
        }
        judgement.violation.map(|v| (invariant, v))
    })
}

fn broken(step: usize, ops: u64, expected: String, actual: String) -> Judgement {
    Judgement {
        violation: Some(Violation {
            step,
            expected,
            actual,
        }),
        ops,
    }
}

/// What [`on_view`] needs besides the state after the write.
struct Width {
    /// Under after_read, I4's width taken from the state before the write
    /// ([`Derived::recent_shown_read`]); unused under before_read.
    read: Option<u64>,
    /// Whether the subject returns view bytes.
    values: bool,
}

/// The invariants read on the view of an accepted write, after the write
/// was applied to `state`; `ops` counts the views judged.
fn on_view(
    invariant: Relation,
    plan: &Plan,
    state: &Derived,
    c: &state::Checked,
    view: &ViewBytes,
    width: Width,
    ops: &mut u64,
) -> Option<(String, String)> {
    let values = width.values;
    let after_read = plan.config.trim == Trim::AfterRead;
    let shown: BTreeSet<u64> = view.positions.iter().copied().collect();
    let seen = || {
        format!(
            "ok G={} visible {}",
            view.global_end,
            kvmodel::format_ranges(view.positions.iter().copied())
        )
    };
    let missing = |what: &str, positions: &mut dyn Iterator<Item = u64>| {
        let gone: Vec<u64> = positions.filter(|p| !shown.contains(p)).collect();
        (!gone.is_empty()).then(|| {
            (
                format!(
                    "{what} {} in the view",
                    kvmodel::format_ranges(gone.iter().copied())
                ),
                seen(),
            )
        })
    };
    match invariant {
        Relation::NoDuplicates => {
            *ops += 1;
            let twice = view
                .positions
                .iter()
                .enumerate()
                .find(|(i, p)| view.positions[..*i].contains(p));
            twice.map(|(_, p)| {
                (
                    format!("position {p} listed once"),
                    format!("{} (position {p} twice)", seen()),
                )
            })
        }
        Relation::SinksStay if !state.sinks.is_empty() => {
            *ops += 1;
            missing("written sink positions", &mut state.sinks.iter().copied())
        }
        Relation::PinsStay => {
            let pin = state.pin.clone()?;
            *ops += 1;
            missing("pinned positions", &mut pin.into_iter())
        }
        Relation::WindowWidth => {
            let want = if after_read {
                width.read?
            } else {
                state.recent_shown(c)?
            };
            *ops += 1;
            let sink = plan.config.sink as u64;
            let got = shown.iter().filter(|&&p| p >= sink).count() as u64;
            (got != want).then(|| {
                let rule = match (c.recent, after_read) {
                    (None, false) => "as many as W − |P| allows of those held",
                    (Some(_), false) => "as many as the recent window reaches of those held",
                    (None, true) => {
                        "as many as W − |P| allowed of those held before the write, and the whole chunk"
                    }
                    (Some(_), true) => {
                        "as many as the recent window reached of those held before the write, and the whole chunk"
                    }
                };
                (
                    format!("{want} recent positions (≥ S = {sink}) in the view: {rule}"),
                    format!("{} ({got} recent)", seen()),
                )
            })
        }
        Relation::ViewShape if values => {
            *ops += 1;
            rows::shape(&plan.config, view)
        }
        Relation::Provenance if values => {
            let mut checked = 0;
            let found = rows::provenance(plan, state, view, &mut checked);
            *ops += u64::from(checked > 0);
            found
        }
        _ => None,
    }
}
