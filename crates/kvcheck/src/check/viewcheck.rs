//! A segmented view's values compared against the payload the model
//! implies, read straight from the segments' storage.
//!
//! No contiguous copy of the view is made and no f32 tensor is built:
//! every element of every segment is read where the cache keeps it (the
//! segment's own layout gives its offset) and its bit pattern in the dtype
//! is compared with the expected one, a whole batch row of the view at a
//! time (rows are told apart only when something differs). The expected
//! patterns come from [`row_bits`], K and V together. Expected values are
//! finite and exact in the dtype, and widening to f32 is injective on
//! such values, so equal patterns are exactly equal f32 values: the
//! verdict of comparing `to_dtype(F32)` vectors, without converting. What is compared, the order rows are
//! visited in and the report are those of the materialized comparison
//! (`ValueCheck::Materialized` in [`crate::check::lockstep`]), which is kept as
//! the independent second implementation the tests hold this one to.

use std::borrow::Cow;
use std::ops::Range;

use candle_core::{CpuStorage, Device, Storage, Tensor};
use half::{bf16, f16};
use kvcache::{SegmentedView, Segments};
use kvmodel::quant::cold_round_trip;
use kvmodel::{Model, Op, Quant, Variant};

use crate::check::divergence::{decode_row, DivergenceKind, RowMismatch, RowSource};
use crate::check::payload::{bits_value, dtype_bits, row_bits, RowId};
use crate::codec::Kv;

/// What a failed comparison reports: kind, the actual side in words and
/// the first wrong rows.
pub(crate) type ValueFailure = (DivergenceKind, String, Vec<RowMismatch>);

/// Rows listed at most in a report.
pub(crate) const REPORTED_ROWS: usize = 6;

/// A segment's elements, borrowed from its CPU storage.
enum Elements<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

/// One segment as offsets into its storage.
struct Part<'a> {
    elements: Elements<'a>,
    start: usize,
    stride: [usize; 4],
    /// Rows (positions) in the segment.
    len: usize,
}

impl Part<'_> {
    /// Appends the f32 bits of every element of batch row `b`, `[len,
    /// heads, D]` row-major, to `out`: one block copy when the segment's
    /// rows of one batch row are contiguous (a view of all heads), row by
    /// row otherwise. `false` when the layout points outside the storage.
    fn batch_into(&self, b: usize, heads: usize, dims: usize, out: &mut Vec<u32>) -> bool {
        let [s0, s1, s2, s3] = self.stride;
        let block = self.len * heads * dims;
        if block == 0 {
            return true;
        }
        let contiguous = (dims == 1 || s3 == 1)
            && (heads == 1 || s2 == dims)
            && (self.len == 1 || s1 == heads * dims);
        if !contiguous {
            for t in 0..self.len {
                for h in 0..heads {
                    if !self.row_into(b, t, h, dims, out) {
                        return false;
                    }
                }
            }
            return true;
        }
        let base = self.start + b * s0;
        let range = base..base + block;
        match self.elements {
            Elements::F32(e) if range.end <= e.len() => {
                out.extend(e[range].iter().map(|x| x.to_bits()))
            }
            Elements::F16(e) if range.end <= e.len() => {
                out.extend(e[range].iter().map(|x| u32::from(x.to_bits())))
            }
            Elements::Bf16(e) if range.end <= e.len() => {
                out.extend(e[range].iter().map(|x| u32::from(x.to_bits())))
            }
            _ => return false,
        }
        true
    }

    /// Appends the f32 bits of elements `(b, t, h, 0..dims)` to `out`;
    /// `false` when the layout points outside the storage.
    fn row_into(&self, b: usize, t: usize, h: usize, dims: usize, out: &mut Vec<u32>) -> bool {
        let base = self.start + b * self.stride[0] + t * self.stride[1] + h * self.stride[2];
        let step = self.stride[3];
        let end = base + (dims.max(1) - 1) * step + 1;
        let len = match self.elements {
            Elements::F32(e) => e.len(),
            Elements::F16(e) => e.len(),
            Elements::Bf16(e) => e.len(),
        };
        if dims > 0 && end > len {
            return false;
        }
        let range = base..base + dims * step;
        match self.elements {
            Elements::F32(e) if step == 1 => out.extend(e[range].iter().map(|x| x.to_bits())),
            Elements::F16(e) if step == 1 => {
                out.extend(e[range].iter().map(|x| u32::from(x.to_bits())))
            }
            Elements::Bf16(e) if step == 1 => {
                out.extend(e[range].iter().map(|x| u32::from(x.to_bits())))
            }
            Elements::F32(e) => out.extend((0..dims).map(|d| e[base + d * step].to_bits())),
            Elements::F16(e) => {
                out.extend((0..dims).map(|d| u32::from(e[base + d * step].to_bits())))
            }
            Elements::Bf16(e) => {
                out.extend((0..dims).map(|d| u32::from(e[base + d * step].to_bits())))
            }
        }
        true
    }
}

fn backend(what: String) -> ValueFailure {
    (
        DivergenceKind::Backend,
        format!("reading the view failed: {what}"),
        Vec::new(),
    )
}

/// The segments of one side on the CPU (a device tensor is copied once).
fn on_cpu(side: &Segments) -> Result<Vec<Cow<'_, Tensor>>, ValueFailure> {
    side.parts
        .iter()
        .map(|p| {
            if p.rows.device().is_cpu() {
                Ok(Cow::Borrowed(&p.rows))
            } else {
                p.rows
                    .to_device(&Device::Cpu)
                    .map(Cow::Owned)
                    .map_err(|e| backend(e.to_string()))
            }
        })
        .collect()
}

fn part<'a>(storage: &'a Storage, layout: &candle_core::Layout) -> Result<Part<'a>, ValueFailure> {
    let elements = match storage {
        Storage::Cpu(CpuStorage::F32(e)) => Elements::F32(e),
        Storage::Cpu(CpuStorage::F16(e)) => Elements::F16(e),
        Storage::Cpu(CpuStorage::BF16(e)) => Elements::Bf16(e),
        _ => return Err(backend("a segment of an unexpected dtype or device".into())),
    };
    let stride = match layout.stride() {
        &[a, b, c, d] => [a, b, c, d],
        other => return Err(backend(format!("a segment with strides {other:?}"))),
    };
    Ok(Part {
        elements,
        start: layout.start_offset(),
        stride,
        len: layout.dims().get(1).copied().unwrap_or(0),
    })
}

/// Wrong rows of one side: how many, and the first [`REPORTED_ROWS`].
#[derive(Default)]
struct Wrong {
    count: usize,
    rows: Vec<RowMismatch>,
}

/// Compares every element of `view` (whose segment shapes were checked:
/// `[B, positions, heads, D]` of the config's dtype) with the payload the
/// model's writers imply, K before V as in the materialized comparison.
/// `None` when equal.
pub(crate) fn compare_values(
    model: &Model,
    ops: &[Op],
    view: &SegmentedView<'_>,
    heads: Range<usize>,
) -> Option<ValueFailure> {
    match compare(model, ops, view, heads) {
        Ok(failure) => failure,
        Err(failure) => Some(failure),
    }
}

fn compare(
    model: &Model,
    ops: &[Op],
    view: &SegmentedView<'_>,
    heads: Range<usize>,
) -> Result<Option<ValueFailure>, ValueFailure> {
    let config = model.config();
    let (k_cpu, v_cpu) = (on_cpu(&view.k)?, on_cpu(&view.v)?);
    let k_guards: Vec<_> = k_cpu.iter().map(|t| t.storage_and_layout()).collect();
    let v_guards: Vec<_> = v_cpu.iter().map(|t| t.storage_and_layout()).collect();
    let k_parts = k_guards
        .iter()
        .map(|(s, l)| part(s, l))
        .collect::<Result<Vec<_>, _>>()?;
    let v_parts = v_guards
        .iter()
        .map(|(s, l)| part(s, l))
        .collect::<Result<Vec<_>, _>>()?;
    let positions = &view.positions;
    let quant = match config.variant {
        Variant::Packed => config.packed_policy().quant,
        Variant::Dense => Quant::None,
    };
    let rows: Vec<(Option<&[Option<u64>]>, bool)> = positions
        .iter()
        .map(|&p| {
            (
                model.read_writers(p),
                quant != Quant::None && model.is_cold(p),
            )
        })
        .collect();
    let (d, hc) = (config.head_dim, heads.len());
    let elements = positions.len() * hc * d;
    let (mut ek, mut ev) = (Vec::with_capacity(elements), Vec::with_capacity(elements));
    let (mut ak, mut av) = (Vec::with_capacity(elements), Vec::with_capacity(elements));
    let (mut wrong_k, mut wrong_v) = (Wrong::default(), Wrong::default());
    for batch in 0..config.batch {
        // One batch row of the view at a time: expected and actual side by
        // side, compared whole; rows are only told apart when they differ.
        for buffer in [&mut ek, &mut ev, &mut ak, &mut av] {
            buffer.clear();
        }
        for (&position, &(writers, cold)) in positions.iter().zip(&rows) {
            for head in heads.clone() {
                match writers.and_then(|w| w.get(head).copied().flatten()) {
                    None => {
                        ek.resize(ek.len() + d, 0);
                        ev.resize(ev.len() + d, 0);
                    }
                    Some(writer) => {
                        let id = RowId {
                            writer,
                            position,
                            batch,
                            head,
                        };
                        expected_rows(model, id, cold, quant, &mut ek, &mut ev);
                    }
                }
            }
        }
        for (parts, actual) in [(&k_parts, &mut ak), (&v_parts, &mut av)] {
            if !parts.iter().all(|p| p.batch_into(batch, hc, d, actual)) {
                return Err(backend(
                    "a segment's layout reaches past its storage".into(),
                ));
            }
        }
        for (kv, actual, expected, wrong) in [
            (Kv::K, &ak, &ek, &mut wrong_k),
            (Kv::V, &av, &ev, &mut wrong_v),
        ] {
            if actual == expected {
                continue;
            }
            let pairs = actual.chunks(d.max(1)).zip(expected.chunks(d.max(1)));
            for (r, (a, e)) in pairs.enumerate() {
                if a == e {
                    continue;
                }
                wrong.count += 1;
                if wrong.rows.len() < REPORTED_ROWS {
                    let (i, head) = (r / hc, heads.start + r % hc);
                    let position = positions[i];
                    let found: Vec<f32> = a.iter().map(|&b| bits_value(b, config.dtype)).collect();
                    wrong.rows.push(RowMismatch {
                        kv,
                        row: i,
                        position,
                        head,
                        batch,
                        expected: RowSource::expected(model, position, batch, head),
                        found: decode_row(config, ops, kv, batch, &found),
                        slot: None,
                    });
                }
            }
        }
    }
    for (kv, wrong) in [(Kv::K, wrong_k), (Kv::V, wrong_v)] {
        if wrong.count > 0 {
            return Ok(Some((
                DivergenceKind::Values,
                format!(
                    "ok G={} visible {} but {} {kv:?} rows hold wrong values",
                    view.global_end,
                    kvmodel::format_ranges(positions.iter().copied()),
                    wrong.count
                ),
                wrong.rows,
            )));
        }
    }
    Ok(None)
}

/// The expected K and V rows of `id` as bit patterns in the dtype: the
/// payload, or its quantization round trip when the row's chunk is cold
/// (rounded to the dtype by the reference quantizer, so exact in it).
fn expected_rows(
    model: &Model,
    id: RowId,
    cold: bool,
    quant: Quant,
    ek: &mut Vec<u32>,
    ev: &mut Vec<u32>,
) {
    let config = model.config();
    let dtype = config.dtype;
    if !cold {
        row_bits(config.seed, dtype, config.head_dim, id, |_, k, v| {
            ek.push(k);
            ev.push(v);
        });
        return;
    }
    let (mut k, mut v) = (
        Vec::with_capacity(config.head_dim),
        Vec::with_capacity(config.head_dim),
    );
    row_bits(config.seed, dtype, config.head_dim, id, |_, x, y| {
        k.push(bits_value(x, dtype));
        v.push(bits_value(y, dtype));
    });
    let bits = |values: Vec<f32>| values.into_iter().map(move |x| dtype_bits(x, dtype));
    ek.extend(bits(cold_round_trip(&k, quant, dtype)));
    ev.extend(bits(cold_round_trip(&v, quant, dtype)));
}

#[cfg(test)]
mod tests {
    use kvcache::Segment;
    use kvmodel::{Config, Dtype};

    use super::*;
    use crate::check::payload::write_tensors;
    use crate::codec::{tensor_values, to_dtype_tensor};

    /// A model after `write 0+5` on a `[2, 8, 3, 4]` dense config.
    fn model(dtype: Dtype) -> (Model, Vec<Op>) {
        let mut config = Config::dense(8);
        (config.batch, config.heads, config.head_dim, config.dtype) = (2, 3, 4, dtype);
        let mut model = Model::new(&config).unwrap();
        let ops = vec![Op::write(0, 5, None, None)];
        model.apply(0, &ops[0]).unwrap();
        (model, ops)
    }

    /// The view of positions 0..5 over `heads`, in two segments (rows
    /// `[0, 2)` and `[2, 5)`), with element `flip` of V (row-major in the
    /// full `[2, 5, 3, 4]` payload) changed.
    fn view(model: &Model, heads: Range<usize>, flip: Option<usize>) -> SegmentedView<'static> {
        let config = model.config();
        let (k, v) = write_tensors(config, &Device::Cpu, 0, 0, 5, 0..config.heads).unwrap();
        let v = match flip {
            None => v,
            Some(at) => {
                let mut values = tensor_values(&v).unwrap();
                values[at] = -values[at];
                to_dtype_tensor(values, [2, 5, 3, 4], config.dtype, &Device::Cpu).unwrap()
            }
        };
        let side = |t: Tensor| {
            let t = t.narrow(2, heads.start, heads.len()).unwrap();
            Segments {
                shape: [2, 5, heads.len(), 4],
                parts: vec![
                    Segment {
                        rows: t.narrow(1, 0, 2).unwrap(),
                        slot: None,
                    },
                    Segment {
                        rows: t.narrow(1, 2, 3).unwrap(),
                        slot: None,
                    },
                ],
            }
        };
        SegmentedView::new(5, (0..5).collect(), side(k), side(v))
    }

    #[test]
    fn a_right_view_passes_in_every_dtype_and_head_range() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            let (model, ops) = model(dtype);
            for heads in [0..3, 1..3, 2..3] {
                let view = view(&model, heads.clone(), None);
                assert!(compare_values(&model, &ops, &view, heads).is_none());
            }
        }
    }

    #[test]
    fn one_flipped_v_element_is_found_with_its_row() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            let (model, ops) = model(dtype);
            // Batch 1, position 3, head 2, dim 1.
            let at = ((5 + 3) * 3 + 2) * 4 + 1;
            for heads in [0..3, 1..3, 2..3] {
                let view = view(&model, heads.clone(), Some(at));
                let (kind, actual, rows) = compare_values(&model, &ops, &view, heads.clone())
                    .expect("the flipped element is seen");
                assert_eq!(kind, DivergenceKind::Values);
                assert!(
                    actual.contains("but 1 V rows hold wrong values"),
                    "{actual}"
                );
                assert_eq!(rows.len(), 1);
                let row = &rows[0];
                assert_eq!(
                    (row.kv, row.batch, row.position, row.head, row.row),
                    (Kv::V, 1, 3, 2, 3)
                );
            }
            // A head range without head 2 does not show the element.
            let view = view(&model, 0..2, Some(at));
            assert!(compare_values(&model, &ops, &view, 0..2).is_none());
        }
    }

    #[test]
    fn never_written_heads_must_read_zero() {
        let (mut model, mut ops) = model(Dtype::F32);
        // Position 5 written on head 0 only; heads 1 and 2 read zero.
        ops.push(Op::write(5, 1, Some([0, 1]), None));
        model.apply(1, &ops[1]).unwrap();
        let config = model.config().clone();
        let (k0, v0) = write_tensors(&config, &Device::Cpu, 0, 0, 5, 0..3).unwrap();
        let (k1, v1) = write_tensors(&config, &Device::Cpu, 1, 5, 1, 0..1).unwrap();
        let side = |old: Tensor, new: Tensor, fill: f32| {
            let pad = Tensor::full(fill, (2, 1, 2, 4), &Device::Cpu).unwrap();
            let last = Tensor::cat(&[&new, &pad], 2).unwrap();
            Segments::single(Tensor::cat(&[&old, &last], 1).unwrap())
        };
        let positions: Vec<u64> = (0..6).collect();
        let good = SegmentedView::new(
            6,
            positions.clone(),
            side(k0.clone(), k1.clone(), 0.0),
            side(v0.clone(), v1.clone(), 0.0),
        );
        assert!(compare_values(&model, &ops, &good, 0..3).is_none());
        let bad = SegmentedView::new(6, positions, side(k0, k1, 0.5), side(v0, v1, 0.0));
        let (kind, actual, rows) = compare_values(&model, &ops, &bad, 0..3).unwrap();
        assert_eq!(kind, DivergenceKind::Values);
        // Heads 1 and 2 of position 5 in both batch rows.
        assert!(
            actual.contains("but 4 K rows hold wrong values"),
            "{actual}"
        );
        assert!(rows.iter().all(|r| r.position == 5 && r.head > 0));
        assert!(rows.iter().all(|r| r.expected == RowSource::Zeros));
    }
}
