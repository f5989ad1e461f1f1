//! A segmented view's values compared against the payload the model
//! implies, read straight from the segments' storage.
//!
//! No contiguous copy of the view is made and no f32 tensor is built:
//! every element of every segment is read where the cache keeps it (the
//! segment's own layout gives its offset), widened to f32 exactly as
//! `to_dtype(F32)` widens it, and compared bit for bit with the expected
//! f32, one row of `D` elements at a time. The expected rows come from
//! [`row_pair`], K and V together. What is compared, the order rows are
//! visited in and the report are those of the materialized comparison
//! (`ValueCheck::Materialized` in [`crate::lockstep`]), which is kept as
//! the independent second implementation the tests hold this one to.

use std::borrow::Cow;
use std::ops::Range;

use candle_core::{CpuStorage, Device, Storage, Tensor};
use half::{bf16, f16};
use kvcache::{SegmentedView, Segments};
use kvmodel::quant::cold_round_trip;
use kvmodel::{Model, Op, Quant, Variant};

use crate::divergence::{decode_row, DivergenceKind, RowMismatch, RowSource};
use crate::payload::{row_pair, Kv, RowId};

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
}

impl Part<'_> {
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
                out.extend(e[range].iter().map(|x| x.to_f32().to_bits()))
            }
            Elements::Bf16(e) if step == 1 => {
                out.extend(e[range].iter().map(|x| x.to_f32().to_bits()))
            }
            Elements::F32(e) => out.extend((0..dims).map(|d| e[base + d * step].to_bits())),
            Elements::F16(e) => {
                out.extend((0..dims).map(|d| e[base + d * step].to_f32().to_bits()))
            }
            Elements::Bf16(e) => {
                out.extend((0..dims).map(|d| e[base + d * step].to_f32().to_bits()))
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
    })
}

/// For each view row, its segment and the row within it.
fn locate(side: &Segments) -> Vec<(usize, usize)> {
    side.parts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| (0..p.len()).map(move |t| (i, t)))
        .collect()
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
    let (k_rows, v_rows) = (locate(&view.k), locate(&view.v));
    let positions = &view.positions;
    let quant = match config.variant {
        Variant::Packed => config.packed_policy().quant,
        Variant::Dense => Quant::None,
    };
    let rows: Vec<(Option<&[Option<u64>]>, bool)> = positions
        .iter()
        .map(|&p| (model.writers(p), quant != Quant::None && model.is_cold(p)))
        .collect();
    let d = config.head_dim;
    let (mut ek, mut ev) = (Vec::with_capacity(d), Vec::with_capacity(d));
    let (mut ak, mut av) = (Vec::with_capacity(d), Vec::with_capacity(d));
    let (mut wrong_k, mut wrong_v) = (Wrong::default(), Wrong::default());
    for batch in 0..config.batch {
        for (i, (&position, &(writers, cold))) in positions.iter().zip(&rows).enumerate() {
            let (kp, kt) = k_rows[i];
            let (vp, vt) = v_rows[i];
            for (hi, head) in heads.clone().enumerate() {
                ek.clear();
                ev.clear();
                let writer = writers.and_then(|w| w.get(head).copied().flatten());
                match writer {
                    None => {
                        ek.resize(d, 0);
                        ev.resize(d, 0);
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
                ak.clear();
                av.clear();
                if !k_parts[kp].row_into(batch, kt, hi, d, &mut ak)
                    || !v_parts[vp].row_into(batch, vt, hi, d, &mut av)
                {
                    return Err(backend(
                        "a segment's layout reaches past its storage".into(),
                    ));
                }
                let source = || match writer {
                    Some(writer) => RowSource::Payload {
                        id: RowId {
                            writer,
                            position,
                            batch,
                            head,
                        },
                        // `is_cold` as the materialized comparison reports it
                        // (also for unquantized packed chunks).
                        cold: model.is_cold(position),
                    },
                    None => RowSource::Zeros,
                };
                for (kv, actual, expected, wrong) in [
                    (Kv::K, &ak, &ek, &mut wrong_k),
                    (Kv::V, &av, &ev, &mut wrong_v),
                ] {
                    if actual == expected {
                        continue;
                    }
                    wrong.count += 1;
                    if wrong.rows.len() < REPORTED_ROWS {
                        let found: Vec<f32> = actual.iter().map(|&b| f32::from_bits(b)).collect();
                        wrong.rows.push(RowMismatch {
                            kv,
                            row: i,
                            position,
                            head,
                            batch,
                            expected: source(),
                            found: decode_row(config, ops, kv, batch, &found),
                            slot: None,
                        });
                    }
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

/// The expected K and V rows of `id` as f32 bits: the payload, or its
/// quantization round trip when the row's chunk is cold.
fn expected_rows(
    model: &Model,
    id: RowId,
    cold: bool,
    quant: Quant,
    ek: &mut Vec<u32>,
    ev: &mut Vec<u32>,
) {
    let config = model.config();
    if !cold {
        row_pair(config.seed, config.dtype, config.head_dim, id, |_, k, v| {
            ek.push(k.to_bits());
            ev.push(v.to_bits());
        });
        return;
    }
    let (mut k, mut v) = (
        Vec::with_capacity(config.head_dim),
        Vec::with_capacity(config.head_dim),
    );
    row_pair(config.seed, config.dtype, config.head_dim, id, |_, x, y| {
        k.push(x);
        v.push(y);
    });
    ek.extend(
        cold_round_trip(&k, quant, config.dtype)
            .iter()
            .map(|x| x.to_bits()),
    );
    ev.extend(
        cold_round_trip(&v, quant, config.dtype)
            .iter()
            .map(|x| x.to_bits()),
    );
}
