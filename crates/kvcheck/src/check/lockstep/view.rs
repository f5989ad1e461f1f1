//! The heads a write carries and the checks of a view: positions, segment
//! shapes and storage, aliasing claims, and values bit for bit.

use crate::check::divergence::{decode_row, DivergenceKind, RowMismatch, RowSource};
use crate::check::payload::expected_view;
use crate::check::segments::{check_segments, materialize, Claim};
use crate::check::viewcheck::{compare_values, REPORTED_ROWS};
use crate::codec::{tensor_values, Kv};
use candle_core::Device;
use kvcache::{SegmentedView, View};
use kvmodel::{Effect, Model, Op};
use std::ops::Range;

/// How the driver compares a view's values with what the model's writers
/// imply. Both compare every element of every view bit for bit (as f32,
/// which every dtype widens to exactly), check the same segment shapes and
/// aliasing claims first and report the same divergences, rows included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueCheck {
    /// Each segment read in place from the storage the cache handed out,
    /// row by row against expected rows built K and V together
    /// ([`crate::check::payload::row_bits`]); nothing copied or converted to a
    /// tensor. Payloads are built the same way.
    #[default]
    InPlace,
    /// The consumer's route: the segments concatenated with
    /// [`kvcache::Segments::to_contiguous_into`] into fresh tensors,
    /// converted to f32 vectors and compared with payload rows computed
    /// one element at a time ([`crate::check::payload::element`], the payload's
    /// definition). Several times slower; kept as the independent second
    /// implementation that [`ValueCheck::InPlace`] is tested against and
    /// as the baseline of the `fuzz_exec` benchmark.
    Materialized,
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
