//! The heads a write carries and the checks of a view: positions, segment
//! shapes and storage, aliasing claims, and values bit for bit.

use crate::check::divergence::{decode_row, DivergenceKind, RowMismatch, RowSource};
use crate::check::lockstep::ValueCheck;
use crate::check::payload::{expected_view, tensor_values, Kv};
use crate::check::segments::{check_segments, materialize, Claim};
use crate::check::viewcheck::{compare_values, REPORTED_ROWS};
use candle_core::Device;
use kvcache::{SegmentedView, View};
use kvmodel::{Effect, Model, Op, Write};
use std::ops::Range;

/// The head range of a write, when its arguments are valid.
pub fn valid_heads(w: &Write, heads: usize) -> Option<Range<usize>> {
    w.check_arguments(heads).ok().map(|checked| checked.heads)
}

/// The heads a write's payload carries: its valid range; else, for a range
/// `[h0, hc]` the contract refuses, `hc` heads whenever `hc >= 0` (what a
/// caller of a real library passes, so a foreign cache sees the request a
/// caller would make), named from `h0` (or 0 when `h0 < 0`); else all heads.
pub fn payload_heads(w: &Write, heads: usize) -> Range<usize> {
    if let Some(range) = valid_heads(w, heads) {
        return range;
    }
    match w.heads {
        Some([first, count]) if count >= 0 => {
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            let first = usize::try_from(first).unwrap_or(0);
            match first.checked_add(count) {
                Some(end) => first..end,
                None => 0..count,
            }
        }
        _ => 0..heads,
    }
}

pub(super) type ViewFailure = (DivergenceKind, String, Vec<RowMismatch>);

/// A segmented view's check before the layout is consulted: its aliasing
/// claims and positions, or what failed.
pub(super) type SegmentedCheck = Result<(Vec<Claim>, Vec<u64>), ViewFailure>;

/// Checks a segmented view: segment shapes and storage, then the
/// concatenation against the model's expectation like [`check_view`].
/// `ring` demands zero-copy segments.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_segmented(
    model: &Model,
    ops: &[Op],
    device: &Device,
    view: &SegmentedView<'_>,
    effect: &Effect,
    heads: Range<usize>,
    values: bool,
    ring: bool,
    value_check: ValueCheck,
) -> SegmentedCheck {
    // Global end and positions first: the shapes follow from them.
    if let Some(failure) = check_positions(&view.positions, view.global_end, effect) {
        return Err(failure);
    }
    let positions = view.positions.clone();
    if !values {
        return Ok((Vec::new(), positions));
    }
    let config = model.config();
    match value_check {
        ValueCheck::InPlace => {
            let claims = check_segments(view, config, heads.clone(), ring)
                .map_err(|(kind, actual)| (kind, actual, Vec::new()))?;
            match compare_values(model, ops, view, heads) {
                Some(failure) => Err(failure),
                None => Ok((claims, positions)),
            }
        }
        ValueCheck::Materialized => {
            let materialized = materialize(view, config, heads.clone(), device, ring)
                .map_err(|(kind, actual)| (kind, actual, Vec::new()))?;
            match check_view(model, ops, &materialized.view, effect, heads, true) {
                Some(failure) => Err(failure),
                None => Ok((materialized.claims, positions)),
            }
        }
    }
}

/// The view's global end and visible positions against the model's.
pub(super) fn check_positions(
    positions: &[u64],
    global_end: u64,
    effect: &Effect,
) -> Option<ViewFailure> {
    let expected = effect.visible.as_deref().unwrap_or(&[]);
    if global_end != effect.global_end {
        return Some((
            DivergenceKind::GlobalEnd,
            format!("ok G={global_end}"),
            Vec::new(),
        ));
    }
    if positions != expected {
        return Some((
            DivergenceKind::Visible,
            format!(
                "ok G={global_end} visible {}",
                kvmodel::format_ranges(positions.iter().copied())
            ),
            Vec::new(),
        ));
    }
    None
}

/// Compares a view against the model's expectation (tensors only when the
/// subject returns `values`). `None` when equal.
pub(super) fn check_view(
    model: &Model,
    ops: &[Op],
    view: &View<'_>,
    effect: &Effect,
    heads: Range<usize>,
    values: bool,
) -> Option<ViewFailure> {
    let config = model.config();
    let positions = effect.visible.as_deref().unwrap_or(&[]);
    let shown = |positions: &[u64]| kvmodel::format_ranges(positions.iter().copied());
    if let Some(failure) = check_positions(&view.positions, view.global_end, effect) {
        return Some(failure);
    }
    if !values {
        return None;
    }
    let shape = [config.batch, positions.len(), heads.len(), config.head_dim];
    for (kv, tensor) in [(Kv::K, &view.k), (Kv::V, &view.v)] {
        if tensor.dims() != shape || tensor.dtype() != kvcache::candle_dtype(config.dtype) {
            return Some((
                DivergenceKind::Shape,
                format!(
                    "{kv:?} has shape {:?} {:?}, expected {shape:?} {:?}",
                    tensor.dims(),
                    tensor.dtype(),
                    config.dtype
                ),
                Vec::new(),
            ));
        }
        let actual = match tensor_values(tensor) {
            Ok(values) => values,
            Err(e) => {
                return Some((
                    DivergenceKind::Backend,
                    format!("reading the view failed: {e}"),
                    Vec::new(),
                ))
            }
        };
        let expected = expected_view(model, kv, positions, heads.clone());
        let d = config.head_dim;
        let mut rows = Vec::new();
        let mut wrong = 0;
        for (r, (a, e)) in actual.chunks(d).zip(expected.chunks(d)).enumerate() {
            if a.iter().zip(e).all(|(x, y)| x.to_bits() == y.to_bits()) {
                continue;
            }
            wrong += 1;
            if rows.len() < REPORTED_ROWS {
                let hc = heads.len();
                let (batch, rest) = (r / (positions.len() * hc), r % (positions.len() * hc));
                let (i, head) = (rest / hc, heads.start + rest % hc);
                let position = positions[i];
                rows.push(RowMismatch {
                    kv,
                    row: i,
                    position,
                    head,
                    batch,
                    expected: RowSource::expected(model, position, batch, head),
                    found: decode_row(config, ops, kv, batch, a),
                    slot: None,
                });
            }
        }
        if wrong > 0 {
            return Some((
                DivergenceKind::Values,
                format!(
                    "ok G={} visible {} but {wrong} {kv:?} rows hold wrong values",
                    view.global_end,
                    shown(&view.positions)
                ),
                rows,
            ));
        }
    }
    None
}
