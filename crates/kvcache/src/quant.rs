//! Quantization kernels of the packed cache (docs/contract.md §6) on candle tensors.
//!
//! A *row* is the `D` values of one (batch row, position, head): the last
//! dimension of a tensor. Every row gets one f32 scale and `D` codes:
//!
//! - `amax = max |x|` over the row, with each value converted to f32;
//! - `scale = amax / q` (f32), `q = 127` (int8) or `q = 7` (int4);
//! - `code = clamp(round_half_away_from_zero(x / scale), -q, q)`, with a true
//!   f32 division (never a multiplication by `1 / scale`: the two differ in
//!   the last bit), and every code 0 when `scale = 0`;
//! - dequantized value `= code as f32 * scale`, converted to the dtype with
//!   round-to-nearest-even.
//!
//! These are exactly the numbers of `kvmodel::quant`, the scalar reference;
//! the property tests compare the two bit for bit.
//!
//! **Code storage.** Codes live in a `u8` tensor whose last dimension is
//! [`code_bytes`]`(quant, D)`:
//!
//! - int8: one byte per value, the code's two's complement (`code as i8 as u8`);
//! - int4: two codes per byte, value `2j` in the **low** nibble and value
//!   `2j + 1` in the **high** nibble of byte `j`, each as a 4-bit two's
//!   complement (`code & 0xF`, so -7..=7 map to 0x9..=0x7). For odd `D` the
//!   high nibble of the last byte is 0.
//!
//! The kernels are candle custom ops ([`CustomOp1`] for quantizing, an
//! in-place [`InplaceOp3`] for dequantizing straight into a slice of an
//! output tensor); they have CPU bodies only. [`generic`] computes the same
//! numbers from candle's public tensor ops and runs on every device; its docs
//! list the operations that may round differently on a GPU.

use candle_core::{
    backend::BackendStorage, CpuStorage, CustomOp1, DType, Device, InplaceOp3, Layout, Shape,
    Tensor,
};
use half::{bf16, f16};
use kvmodel::Quant;

pub mod generic;

/// One quantized tensor: codes and per-row scales.
#[derive(Clone, Debug)]
pub struct QuantizedTensor {
    /// `u8` codes, shape `[..rows, code_bytes(quant, D)]` (see the module docs
    /// for the byte layout).
    pub codes: Tensor,
    /// One f32 scale per row, shape `[..rows]`.
    pub scales: Tensor,
    /// `Int8` or `Int4`.
    pub quant: Quant,
    /// `D`, the number of values per row (int4 cannot recover it from the
    /// byte count when `D` is odd).
    pub head_dim: usize,
}

impl QuantizedTensor {
    /// Narrows every row dimension alike: `dim` must be a row dimension
    /// (not the last dimension of the values). Zero-copy.
    pub fn narrow(
        &self,
        dim: usize,
        start: usize,
        len: usize,
    ) -> candle_core::Result<QuantizedTensor> {
        Ok(QuantizedTensor {
            codes: self.codes.narrow(dim, start, len)?,
            scales: self.scales.narrow(dim, start, len)?,
            quant: self.quant,
            head_dim: self.head_dim,
        })
    }

    /// A deep copy, so that a trimmed tensor no longer keeps the storage of
    /// the rows it dropped alive.
    pub fn copy(&self) -> candle_core::Result<QuantizedTensor> {
        Ok(QuantizedTensor {
            codes: self.codes.force_contiguous()?,
            scales: self.scales.force_contiguous()?,
            quant: self.quant,
            head_dim: self.head_dim,
        })
    }

    /// Bytes held by codes and scales.
    pub fn bytes(&self) -> usize {
        self.codes.elem_count() + 4 * self.scales.elem_count()
    }
}

/// Bytes of codes per row of `head_dim` values: `D` (int8), `ceil(D / 2)`
/// (int4), `0` for `Quant::None` (which keeps exact values instead).
pub fn code_bytes(quant: Quant, head_dim: usize) -> usize {
    match quant {
        Quant::None => 0,
        Quant::Int8 => head_dim,
        Quant::Int4 => head_dim.div_ceil(2),
    }
}

/// Quantizes `x` (f32, f16 or bf16, any shape of rank ≥ 1, rows along the
/// last dimension) with `quant` (`Int8` or `Int4`).
///
/// Fails for `Quant::None`, for other dtypes, and on devices without a
/// kernel body (everything but the CPU for now).
pub fn quantize(x: &Tensor, quant: Quant) -> candle_core::Result<QuantizedTensor> {
    let q = max_code(quant)?;
    let x = x.contiguous()?;
    let head_dim = x.dims().last().copied().unwrap_or(0);
    let codes = x.apply_op1_no_bwd(&RowCodes { quant, q })?;
    let scales = x.apply_op1_no_bwd(&RowScales { q })?;
    Ok(QuantizedTensor {
        codes,
        scales,
        quant,
        head_dim,
    })
}

/// Dequantizes `quantized` straight into `out`, which must have the row shape
/// of `quantized` times `D` in f32, f16 or bf16 and may be any strided view
/// (a `narrow` of a larger tensor) whose last dimension is contiguous: only
/// the elements of `out` are written, no temporary of its size is made.
pub fn dequantize_into(quantized: &QuantizedTensor, out: &Tensor) -> candle_core::Result<()> {
    let mut rows = quantized.scales.dims().to_vec();
    rows.push(quantized.head_dim);
    if out.dims() != rows.as_slice() {
        candle_core::bail!(
            "dequantize_into: out has shape {:?}, the quantized rows need {:?}",
            out.dims(),
            rows
        );
    }
    max_code(quantized.quant)?;
    out.inplace_op3(
        &quantized.codes,
        &quantized.scales,
        &DequantizeInto {
            quant: quantized.quant,
            head_dim: quantized.head_dim,
        },
    )
}

/// Dequantizes into a new tensor of `dtype` on `device` (convenience for
/// tests and callers that want a standalone tensor).
pub fn dequantize(
    quantized: &QuantizedTensor,
    dtype: DType,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let mut shape = quantized.scales.dims().to_vec();
    shape.push(quantized.head_dim);
    let out = Tensor::zeros(shape, dtype, device)?;
    dequantize_into(quantized, &out)?;
    Ok(out)
}

fn max_code(quant: Quant) -> candle_core::Result<i32> {
    match quant.max_code() {
        Some(q) => Ok(q),
        None => candle_core::bail!("quant \"none\" keeps exact values and has no codes"),
    }
}

/// The element types the kernels read and write.
trait Element: Copy {
    fn to_f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
}

impl Element for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Element for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// `max |x| / q` of one row, in f32 (docs/contract.md §6).
fn row_scale<T: Element>(row: &[T], q: i32) -> f32 {
    let amax = row.iter().fold(0.0f32, |m, x| m.max(x.to_f32().abs()));
    amax / q as f32
}

/// The code of one value: a true division, rounding half away from zero
/// (`f32::round`), clamped to `[-q, q]`; 0 when the scale is 0.
fn code_of(x: f32, scale: f32, q: i32) -> i8 {
    if scale == 0.0 {
        0
    } else {
        (x / scale).round().clamp(-(q as f32), q as f32) as i8
    }
}

/// Writes the code bytes of one row (see the module docs for the layout).
fn encode_row<T: Element>(row: &[T], quant: Quant, q: i32, out: &mut [u8]) {
    let scale = row_scale(row, q);
    match quant {
        Quant::Int4 => {
            for (byte, pair) in out.iter_mut().zip(row.chunks(2)) {
                let lo = code_of(pair[0].to_f32(), scale, q) as u8 & 0x0F;
                let hi = pair
                    .get(1)
                    .map_or(0, |x| code_of(x.to_f32(), scale, q) as u8 & 0x0F);
                *byte = lo | (hi << 4);
            }
        }
        _ => {
            for (byte, x) in out.iter_mut().zip(row) {
                *byte = code_of(x.to_f32(), scale, q) as u8;
            }
        }
    }
}

/// The contiguous values of a tensor as a slice of `T`.
fn contiguous<'a, T>(values: &'a [T], layout: &Layout) -> candle_core::Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&values[start..end]),
        None => candle_core::bail!("quantize: input must be contiguous"),
    }
}

/// Custom op: the code bytes of every row.
struct RowCodes {
    quant: Quant,
    q: i32,
}

impl RowCodes {
    fn run<T: Element>(
        &self,
        values: &[T],
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let values = contiguous(values, layout)?;
        let dims = layout.dims();
        let head_dim = dims.last().copied().unwrap_or(0);
        let bytes = code_bytes(self.quant, head_dim);
        let rows = values.len().checked_div(head_dim).unwrap_or(0);
        let mut codes = vec![0u8; rows * bytes];
        if head_dim > 0 {
            for (row, out) in values
                .chunks_exact(head_dim)
                .zip(codes.chunks_exact_mut(bytes.max(1)))
            {
                encode_row(row, self.quant, self.q, out);
            }
        }
        let mut shape = dims.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = bytes;
        }
        Ok((CpuStorage::U8(codes), Shape::from(shape)))
    }
}

impl CustomOp1 for RowCodes {
    fn name(&self) -> &'static str {
        "kvcache-quantize-codes"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match storage {
            CpuStorage::F32(v) => self.run(v, layout),
            CpuStorage::F16(v) => self.run(v, layout),
            CpuStorage::BF16(v) => self.run(v, layout),
            other => candle_core::bail!("quantize: unsupported dtype {:?}", other.dtype()),
        }
    }
}

/// Custom op: the f32 scale of every row.
struct RowScales {
    q: i32,
}

impl RowScales {
    fn run<T: Element>(
        &self,
        values: &[T],
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let values = contiguous(values, layout)?;
        let dims = layout.dims();
        let head_dim = dims.last().copied().unwrap_or(0);
        let scales = if head_dim == 0 {
            Vec::new()
        } else {
            values
                .chunks_exact(head_dim)
                .map(|row| row_scale(row, self.q))
                .collect()
        };
        let shape = dims[..dims.len().saturating_sub(1)].to_vec();
        Ok((CpuStorage::F32(scales), Shape::from(shape)))
    }
}

impl CustomOp1 for RowScales {
    fn name(&self) -> &'static str {
        "kvcache-quantize-scales"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match storage {
            CpuStorage::F32(v) => self.run(v, layout),
            CpuStorage::F16(v) => self.run(v, layout),
            CpuStorage::BF16(v) => self.run(v, layout),
            other => candle_core::bail!("quantize: unsupported dtype {:?}", other.dtype()),
        }
    }
}

/// In-place op: `out[row] = dtype(code as f32 * scale)`, row by row, through
/// the strides of all three layouts.
struct DequantizeInto {
    quant: Quant,
    head_dim: usize,
}

/// Walks the rows (all dimensions but the last) of several strided layouts
/// in lockstep, in row-major order, yielding each layout's offset of the row.
/// An odometer over the row index: no table of offsets is materialized.
struct RowWalk<'a, const N: usize> {
    row_dims: &'a [usize],
    strides: [&'a [usize]; N],
    index: Vec<usize>,
    offsets: [usize; N],
    remaining: usize,
}

impl<'a, const N: usize> RowWalk<'a, N> {
    fn new(row_dims: &'a [usize], layouts: [&'a Layout; N]) -> Self {
        RowWalk {
            row_dims,
            strides: layouts.map(|l| l.stride()),
            index: vec![0; row_dims.len()],
            offsets: layouts.map(|l| l.start_offset()),
            remaining: row_dims.iter().product(),
        }
    }
}

impl<const N: usize> Iterator for RowWalk<'_, N> {
    type Item = [usize; N];

    fn next(&mut self) -> Option<[usize; N]> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let current = self.offsets;
        // Advance the odometer from the innermost row dimension.
        for axis in (0..self.row_dims.len()).rev() {
            self.index[axis] += 1;
            for (offset, stride) in self.offsets.iter_mut().zip(&self.strides) {
                *offset += stride[axis];
            }
            if self.index[axis] < self.row_dims[axis] {
                break;
            }
            for (offset, stride) in self.offsets.iter_mut().zip(&self.strides) {
                *offset -= stride[axis] * self.row_dims[axis];
            }
            self.index[axis] = 0;
        }
        Some(current)
    }
}

impl DequantizeInto {
    fn run<T: Element>(
        &self,
        out: &mut [T],
        out_layout: &Layout,
        codes: &[u8],
        codes_layout: &Layout,
        scales: &[f32],
        scales_layout: &Layout,
    ) -> candle_core::Result<()> {
        let row_dims = scales_layout.dims();
        if out_layout.stride().last() != Some(&1) && self.head_dim > 1
            || codes_layout.stride().last() != Some(&1) && codes_layout.dims().last() > Some(&1)
        {
            candle_core::bail!("dequantize: the last dimension must be contiguous");
        }
        let bytes = code_bytes(self.quant, self.head_dim);
        for [o, c, s] in RowWalk::new(row_dims, [out_layout, codes_layout, scales_layout]) {
            let scale = scales[s];
            let row_codes = &codes[c..c + bytes];
            let row_out = &mut out[o..o + self.head_dim];
            // The quant is matched once per row, not per value, so that the
            // inner loops are straight-line code.
            match self.quant {
                Quant::Int4 => {
                    for (pair, &byte) in row_out.chunks_mut(2).zip(row_codes) {
                        for (value, nibble) in pair.iter_mut().zip([byte << 4, byte & 0xF0]) {
                            // Sign-extend the 4-bit two's complement.
                            *value = T::from_f32(((nibble as i8) >> 4) as f32 * scale);
                        }
                    }
                }
                _ => {
                    for (value, &code) in row_out.iter_mut().zip(row_codes) {
                        *value = T::from_f32(code as i8 as f32 * scale);
                    }
                }
            }
        }
        Ok(())
    }
}

impl InplaceOp3 for DequantizeInto {
    fn name(&self) -> &'static str {
        "kvcache-dequantize-into"
    }

    fn cpu_fwd(
        &self,
        out: &mut CpuStorage,
        out_layout: &Layout,
        codes: &CpuStorage,
        codes_layout: &Layout,
        scales: &CpuStorage,
        scales_layout: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::U8(codes), CpuStorage::F32(scales)) = (codes, scales) else {
            candle_core::bail!("dequantize: codes must be u8 and scales f32");
        };
        match out {
            CpuStorage::F32(v) => {
                self.run(v, out_layout, codes, codes_layout, scales, scales_layout)
            }
            CpuStorage::F16(v) => {
                self.run(v, out_layout, codes, codes_layout, scales, scales_layout)
            }
            CpuStorage::BF16(v) => {
                self.run(v, out_layout, codes, codes_layout, scales, scales_layout)
            }
            other => candle_core::bail!("dequantize: unsupported dtype {:?}", other.dtype()),
        }
    }
}
