//! Shrinking a failing prefix trace by delta debugging: drop ops (halves,
//! quarters, ... single ops), shorten token lists, lower counts, while the
//! same failure remains (the same [`PrefixDivergenceKind`] on an op of the
//! same name, [`PrefixDivergence::same_failure`]).

use kvcache::{PrefixCache, PrefixCacheError};
use kvmodel::prefix::{PrefixConfig, PrefixOp, PrefixOutcome, PrefixTrace, PrefixTraceError};

use super::drive::Driven;
use super::lockstep::{PrefixDivergence, PrefixDivergenceKind, PrefixLockstep};

/// A minimized prefix trace and how it was obtained.
#[derive(Clone, Debug)]
pub struct PrefixMinimized {
    /// The minimized trace. Its `expect` (present when the input had one)
    /// holds the model's outcome of every op but, for an
    /// [`PrefixDivergenceKind::Expect`] failure, the wrong expected
    /// outcome of the last op, the one kept.
    pub trace: PrefixTrace,
    /// The failure the minimized trace shows (replayed on a fresh cache).
    pub divergence: PrefixDivergence,
    /// Ops before.
    pub before: usize,
    /// Ops after.
    pub after: usize,
    /// Lockstep runs spent.
    pub tests_run: usize,
}

/// Why a trace could not be minimized.
#[derive(Debug, thiserror::Error)]
pub enum PrefixMinimizeError {
    /// The trace breaks a loading rule.
    #[error(transparent)]
    Trace(#[from] PrefixTraceError),
    /// The cache could not be built.
    #[error("the cache: {0}")]
    Cache(#[from] PrefixCacheError),
    /// The subject could not be opened or driven.
    #[error("the subject: {0}")]
    Subject(String),
    /// The trace does not fail: nothing to keep.
    #[error("the trace does not fail: every op agrees, with the model and with expect")]
    Passes,
}

/// One op and the outcome it must have (only the op whose expectation
/// failed keeps one).
#[derive(Clone, Debug)]
struct Item {
    op: PrefixOp,
    expect: Option<PrefixOutcome>,
}

/// Runs a candidate on a fresh subject: its first divergence, and the
/// ops as the driver ran them (a `whole` subject's computes are the
/// driver's), whose first `step + 1` a kept candidate becomes.
type Runner<'a> =
    dyn FnMut(&[Item]) -> Result<Option<(PrefixDivergence, Vec<Item>)>, PrefixMinimizeError> + 'a;

struct Search<'a> {
    run: &'a mut Runner<'a>,
    target: PrefixDivergence,
    tests: usize,
    max_tests: usize,
    /// The size of the smallest failing candidate so far: a candidate is
    /// kept only when the ops run are smaller still, since a driver that
    /// adds its own computes can hand back what it was given.
    best: (usize, usize, u64),
}

/// Ops, then tokens, then the counts' magnitudes: what shrinking lowers.
fn size(items: &[Item]) -> (usize, usize, u64) {
    let tokens = items
        .iter()
        .filter_map(|i| tokens(&i.op))
        .map(<[_]>::len)
        .sum();
    let counts = items
        .iter()
        .filter_map(|i| count(&i.op))
        .map(i64::unsigned_abs)
        .sum();
    (items.len(), tokens, counts)
}

impl Search<'_> {
    /// Whether `candidate` still fails the same way; on success it becomes
    /// the ops run, cut after the failing one. `false` once the budget is
    /// spent.
    fn keeps(&mut self, candidate: &mut Vec<Item>) -> bool {
        if self.tests >= self.max_tests {
            return false;
        }
        self.tests += 1;
        match (self.run)(candidate) {
            Ok(Some((d, mut ran))) if d.same_failure(&self.target) => {
                ran.truncate(d.step + 1);
                if size(&ran) >= self.best {
                    return false;
                }
                self.best = size(&ran);
                *candidate = ran;
                true
            }
            _ => false,
        }
    }
}

/// The first divergence of `items` on a fresh cache from `make`, `expect`
/// checked only where an item has one.
fn run_lockstep<C: PrefixCache>(
    config: &PrefixConfig,
    make: &dyn Fn(&PrefixConfig) -> Result<C, PrefixCacheError>,
    items: &[Item],
) -> Result<Option<(PrefixDivergence, Vec<Item>)>, PrefixMinimizeError> {
    let cache = make(config)?;
    let mut lockstep = PrefixLockstep::new(cache).map_err(PrefixCacheError::from)?;
    for (i, item) in items.iter().enumerate() {
        let outcome = match lockstep.step(i as u64, &item.op) {
            Ok(outcome) => outcome,
            Err(divergence) => return Ok(Some((divergence, items.to_vec()))),
        };
        if let Some(expected) = item.expect.as_ref().filter(|e| **e != outcome) {
            let divergence = PrefixDivergence {
                step: i,
                op: item.op.to_string(),
                op_name: item.op.name(),
                kind: PrefixDivergenceKind::Expect,
                expected: expected.to_string(),
                actual: format!("{outcome} (the model's outcome)"),
                class: super::lockstep::outcome_class(&outcome),
            };
            return Ok(Some((divergence, items.to_vec())));
        }
    }
    Ok(None)
}

/// The delta-debugging passes over `items`, until none changes them or the
/// budget is spent; the tests run.
fn shrink(search: &mut Search<'_>, items: &mut Vec<Item>) {
    loop {
        let changed = drop_chunks(search, items)
            | shorten_tokens(search, items)
            | lower_counts(search, items);
        if !changed || search.tests >= search.max_tests {
            return;
        }
    }
}

/// Minimizes `trace` against the caches `make` builds (a fresh one per
/// run), spending at most `max_tests` runs. Guarantee: the result fails
/// the same way as the input (same divergence kind on an op of the same
/// name), has at most as many ops, and no single op of it can be removed
/// without losing the failure unless the budget ran out first.
pub fn minimize<C: PrefixCache>(
    trace: &PrefixTrace,
    make: &dyn Fn(&PrefixConfig) -> Result<C, PrefixCacheError>,
    max_tests: usize,
) -> Result<PrefixMinimized, PrefixMinimizeError> {
    trace.validate()?;
    let full: Vec<Item> = trace
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| Item {
            op: op.clone(),
            expect: trace.expect.as_ref().map(|e| e[i].clone()),
        })
        .collect();
    let mut run = |items: &[Item]| run_lockstep(&trace.config, make, items);
    let (target, _) = run(&full)?.ok_or(PrefixMinimizeError::Passes)?;
    // Only the op whose expectation failed keeps one: every other op may
    // change its outcome as ops around it go.
    let mut items: Vec<Item> = full[..=target.step]
        .iter()
        .enumerate()
        .map(|(i, item)| Item {
            op: item.op.clone(),
            expect: item
                .expect
                .clone()
                .filter(|_| target.kind == PrefixDivergenceKind::Expect && i == target.step),
        })
        .collect();
    let mut search = Search {
        run: &mut run,
        target,
        tests: 1,
        max_tests,
        best: size(&items),
    };
    shrink(&mut search, &mut items);
    let tests_run = search.tests;
    // Every kept candidate failed the same way on a fresh cache; a cache
    // that does not repeat itself is reported as a trace that passes.
    let (divergence, _) = run(&items)?.ok_or(PrefixMinimizeError::Passes)?;
    let mut out = PrefixTrace::new(
        trace.config.clone(),
        items.iter().map(|i| i.op.clone()).collect(),
    );
    out.note = Some(format!(
        "minimized by kvcheck: {} divergence at step {} ({})",
        divergence.kind, divergence.step, divergence.op
    ));
    if trace.expect.is_some() {
        let mut expect = out.model_outcomes()?;
        if let (Some(last), Some(kept)) = (
            expect.last_mut(),
            items.last().and_then(|i| i.expect.clone()),
        ) {
            *last = kept;
        }
        out.expect = Some(expect);
    }
    Ok(PrefixMinimized {
        before: trace.ops.len(),
        after: out.ops.len(),
        trace: out,
        divergence,
        tests_run,
    })
}

/// Minimizes the failing case `ops` of a subject: `run` drives a
/// candidate on a fresh cache of the subject (see
/// [`super::drive::drive`]). The same guarantees as [`minimize`]; the
/// result has no `expect` (a subject of its own policy has no model
/// outcomes), and its ops are those the driver ran, so that it replays on
/// any subject in a free order.
pub fn minimize_driven(
    config: &PrefixConfig,
    ops: &[PrefixOp],
    run: &mut dyn FnMut(&[PrefixOp]) -> Result<Driven, PrefixMinimizeError>,
    max_tests: usize,
) -> Result<PrefixMinimized, PrefixMinimizeError> {
    let mut runner = |items: &[Item]| {
        let ops: Vec<PrefixOp> = items.iter().map(|i| i.op.clone()).collect();
        let driven = run(&ops)?;
        Ok(driven.divergence.map(|d| {
            let ran: Vec<Item> = driven
                .executed
                .into_iter()
                .map(|op| Item { op, expect: None })
                .collect();
            (d, ran)
        }))
    };
    let items: Vec<Item> = ops
        .iter()
        .map(|op| Item {
            op: op.clone(),
            expect: None,
        })
        .collect();
    let (target, mut items) = runner(&items)?.ok_or(PrefixMinimizeError::Passes)?;
    items.truncate(target.step + 1);
    let mut search = Search {
        run: &mut runner,
        target,
        tests: 1,
        max_tests,
        best: size(&items),
    };
    shrink(&mut search, &mut items);
    let tests_run = search.tests;
    let (divergence, ran) = runner(&items)?.ok_or(PrefixMinimizeError::Passes)?;
    let mut trace = PrefixTrace::new(
        config.clone(),
        ran[..=divergence.step]
            .iter()
            .map(|i| i.op.clone())
            .collect(),
    );
    trace.note = Some(format!(
        "minimized by kvcheck: {} divergence at step {} ({})",
        divergence.kind, divergence.step, divergence.op
    ));
    Ok(PrefixMinimized {
        before: ops.len(),
        after: trace.ops.len(),
        trace,
        divergence,
        tests_run,
    })
}

/// Delta debugging over the op list: removes chunks of halving size.
fn drop_chunks(search: &mut Search<'_>, items: &mut Vec<Item>) -> bool {
    let mut changed = false;
    let mut size = items.len().div_ceil(2).max(1);
    loop {
        let mut start = 0;
        while start < items.len() {
            let end = (start + size).min(items.len());
            let mut candidate: Vec<Item> = items[..start]
                .iter()
                .chain(&items[end..])
                .cloned()
                .collect();
            if !candidate.is_empty() && search.keeps(&mut candidate) {
                *items = candidate;
                changed = true;
            } else {
                start = end;
            }
            if search.tests >= search.max_tests {
                return changed;
            }
        }
        if size == 1 {
            return changed;
        }
        size = size.div_ceil(2);
    }
}

/// Removes single tokens of `start` and `extend` ops, last first.
fn shorten_tokens(search: &mut Search<'_>, items: &mut Vec<Item>) -> bool {
    let mut changed = false;
    let mut i = 0;
    while i < items.len() {
        let len = tokens(&items[i].op).map_or(0, <[_]>::len);
        for j in (0..len).rev() {
            let mut candidate = items.clone();
            if let Some(t) = tokens_mut(&mut candidate[i].op) {
                if j < t.len() {
                    t.remove(j);
                } else {
                    continue;
                }
            }
            if search.keeps(&mut candidate) {
                *items = candidate;
                changed = true;
            }
            if i >= items.len() {
                break;
            }
        }
        i += 1;
    }
    changed
}

/// Lowers the counts of `compute`, `rollback` and `evict`: to 0, 1, half,
/// one less, the first value that keeps the failure.
fn lower_counts(search: &mut Search<'_>, items: &mut Vec<Item>) -> bool {
    let mut changed = false;
    for i in 0..items.len() {
        if i >= items.len() {
            break;
        }
        let Some(count) = count(&items[i].op) else {
            continue;
        };
        let lower = if count > 0 {
            vec![0, 1, count / 2, count - 1]
        } else {
            vec![-1, count / 2, count + 1]
        };
        for value in lower
            .into_iter()
            .filter(|v| v.unsigned_abs() < count.unsigned_abs())
        {
            let mut candidate = items.clone();
            set_count(&mut candidate[i].op, value);
            if search.keeps(&mut candidate) {
                *items = candidate;
                changed = true;
                break;
            }
        }
    }
    changed
}

fn tokens(op: &PrefixOp) -> Option<&[kvmodel::prefix::Token]> {
    match op {
        PrefixOp::Start { tokens, .. } | PrefixOp::Extend { tokens, .. } => Some(tokens),
        _ => None,
    }
}

fn tokens_mut(op: &mut PrefixOp) -> Option<&mut Vec<kvmodel::prefix::Token>> {
    match op {
        PrefixOp::Start { tokens, .. } | PrefixOp::Extend { tokens, .. } => Some(tokens),
        _ => None,
    }
}

fn count(op: &PrefixOp) -> Option<i64> {
    match op {
        PrefixOp::Compute { count, .. } | PrefixOp::Rollback { count, .. } => Some(*count),
        PrefixOp::Evict { blocks } => Some(*blocks),
        _ => None,
    }
}

fn set_count(op: &mut PrefixOp, value: i64) {
    match op {
        PrefixOp::Compute { count, .. } | PrefixOp::Rollback { count, .. } => *count = value,
        PrefixOp::Evict { blocks } => *blocks = value,
        _ => {}
    }
}
