//! The bytes of a view against what the run wrote: its shape (I6) and the
//! provenance of every exact-value row (I5). The payload of every write is
//! the harness's own seeded fill ([`crate::check::payload`]), so the
//! bytes a row must hold follow from which accepted write reached it last,
//! with no model: this is provenance, not a model of the cache.

use kvmodel::Config;

use super::state::Derived;
use crate::check::payload::{row_bits, RowId};
use crate::check::record::{Plan, ViewBytes};

/// The bytes K (and V) of `view` must have: `B × |view| × heads × D`
/// elements of the dtype (§3 outcome, §4).
pub fn expected_len(config: &Config, view: &ViewBytes) -> usize {
    config.batch
        * view.positions.len()
        * view.heads.len()
        * config.head_dim
        * config.dtype.size_bytes()
}

/// I6: `Some((expected, actual))` when K or V of `view` holds another
/// number of bytes than its shape.
pub fn shape(config: &Config, view: &ViewBytes) -> Option<(String, String)> {
    let want = expected_len(config, view);
    (view.k.len() != want || view.v.len() != want).then(|| {
        let element = config.dtype.size_bytes().max(1);
        (
            format!(
                "K and V of {} elements each ([B={}, {} positions, {} heads, D={}])",
                want / element,
                config.batch,
                view.positions.len(),
                view.heads.len(),
                config.head_dim
            ),
            format!(
                "K of {} elements, V of {}",
                view.k.len() / element,
                view.v.len() / element
            ),
        )
    })
}

/// The element `index` (of the dtype's size) of `bytes`, as its bit
/// pattern.
fn bits_at(bytes: &[u8], index: usize, size: usize) -> u32 {
    let at = index * size;
    match size {
        4 => u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]),
        _ => u16::from_le_bytes([bytes[at], bytes[at + 1]]) as u32,
    }
}

/// The K and V bit patterns of the row `id` of the harness's fill.
fn row(config: &Config, id: RowId) -> (Vec<u32>, Vec<u32>) {
    let (mut k, mut v) = (Vec::new(), Vec::new());
    row_bits(config.seed, config.dtype, config.head_dim, id, |_, x, y| {
        k.push(x);
        v.push(y);
    });
    (k, v)
}

/// I5: the first row of `view` whose bytes are not those of the latest
/// accepted write to its (position, head) (zeros for a head no write
/// covered since the position was added, §7), among the rows whose values
/// are certainly exact ([`Derived::exact`]); `rows` counts the rows
/// checked. `Some((expected, actual))` names the row.
pub fn provenance(
    plan: &Plan,
    state: &Derived,
    view: &ViewBytes,
    rows: &mut u64,
) -> Option<(String, String)> {
    let config = &plan.config;
    if shape(config, view).is_some() {
        // Rows cannot be told apart in a view of the wrong shape (I6).
        return None;
    }
    let size = config.dtype.size_bytes();
    let (len, heads, d) = (view.positions.len(), view.heads.len(), config.head_dim);
    for (j, &position) in view.positions.iter().enumerate() {
        if !state.exact(position) {
            continue;
        }
        let Some(writers) = state.writers.get(&position) else {
            return Some((
                format!("position {position} shown only once an accepted write added it"),
                format!("position {position} shown, no accepted write added it since it was last dropped"),
            ));
        };
        for batch in 0..config.batch {
            for (hi, head) in view.heads.clone().enumerate() {
                *rows += 1;
                let first = ((batch * len + j) * heads + hi) * d;
                let actual: Vec<(u32, u32)> = (first..first + d)
                    .map(|e| (bits_at(&view.k, e, size), bits_at(&view.v, e, size)))
                    .collect();
                let expected: Vec<(u32, u32)> = match writers.get(head).copied().flatten() {
                    None => vec![(0, 0); d],
                    Some(payload) => {
                        let id = RowId {
                            writer: payload.writer(batch, head),
                            position,
                            batch,
                            head,
                        };
                        let (k, v) = row(config, id);
                        k.into_iter().zip(v).collect()
                    }
                };
                if actual != expected {
                    let which = match writers.get(head).copied().flatten() {
                        None => "zeros (no write covered this head since the position was added)"
                            .to_string(),
                        Some(p) => format!("the row op {} wrote", p.writer(batch, head)),
                    };
                    return Some((
                        format!(
                            "row (position {position}, head {head}, batch {batch}) holds {which}"
                        ),
                        format!(
                            "it holds {}",
                            identify(plan, state.global_end, &actual, batch, head)
                        ),
                    ));
                }
            }
        }
    }
    None
}

/// What a wrong row holds, in words: zeros, or the row some write of the
/// plan carried for some position below `global_end` (the first found),
/// or other bytes.
fn identify(
    plan: &Plan,
    global_end: u64,
    actual: &[(u32, u32)],
    batch: usize,
    head: usize,
) -> String {
    if actual.iter().all(|&(k, v)| k == 0 && v == 0) {
        return "zeros".to_string();
    }
    let config = &plan.config;
    for (i, step) in plan.steps.iter().enumerate() {
        if !matches!(step.op, kvmodel::Op::Write(_)) {
            continue;
        }
        for position in 0..global_end.min(4096) {
            let id = RowId {
                writer: step.payload.writer(batch, head),
                position,
                batch,
                head,
            };
            let (k, v) = row(config, id);
            if k.iter()
                .zip(&v)
                .zip(actual)
                .all(|((&k, &v), &(x, y))| k == x && v == y)
            {
                return format!("the row op {i} wrote for position {position}");
            }
        }
    }
    "bytes no write of the run carried (a quantized or mixed row)".to_string()
}
