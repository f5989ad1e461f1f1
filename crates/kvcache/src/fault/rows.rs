//! Row surgery on view tensors `[B, L, H, D]`: what a faulty cache returns
//! instead of the right rows.

use candle_core::{DType, Device, Tensor};
use kvmodel::Quant;

use crate::quant;
use crate::Result;

/// The rows `which` (indices on the token axis) of `t`, in that order.
pub fn select(t: &Tensor, which: &[usize]) -> Result<Tensor> {
    let index: Vec<u32> = which.iter().map(|&i| i as u32).collect();
    let index = Tensor::from_vec(index, which.len(), t.device())?;
    // index_select reads contiguous storage only; views may be narrows.
    Ok(t.contiguous()?.index_select(&index, 1)?)
}

/// `t` with each row `i` listed in `which` replaced by `f(i, row)` (a
/// `[B, 1, H, D]` tensor); the others are copied unchanged.
pub fn replace(
    t: &Tensor,
    which: &[usize],
    f: impl Fn(usize, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let len = t.dim(1)?;
    if which.is_empty() || len == 0 {
        return Ok(t.copy()?);
    }
    let mut rows = Vec::with_capacity(len);
    for i in 0..len {
        let row = t.narrow(1, i, 1)?;
        rows.push(if which.contains(&i) { f(i, &row)? } else { row });
    }
    Ok(Tensor::cat(&rows, 1)?)
}

/// Quantizes and dequantizes a hot row, as a cache that froze it would
/// return it.
pub fn quantized(row: &Tensor, quant: Quant) -> Result<Tensor> {
    let codes = quant::quantize(row, quant)?;
    Ok(quant::dequantize(&codes, row.dtype(), row.device())?)
}

/// The row with values `2j` and `2j + 1` swapped along `D` (int4 nibbles
/// read in the wrong order); a lone last value stays.
pub fn nibbles_swapped(row: &Tensor) -> Result<Tensor> {
    let d = row.dim(3)?;
    let order: Vec<u32> = (0..d as u32)
        .map(|j| {
            if j % 2 == 0 {
                (j + 1).min(d as u32 - 1)
            } else {
                j - 1
            }
        })
        .collect();
    let index = Tensor::from_vec(order, d, row.device())?;
    Ok(row.contiguous()?.index_select(&index, 3)?)
}

/// A cold row dequantized as `code / (1 / scale)` instead of `code * scale`:
/// the scale and codes are recovered from the right values (the largest
/// magnitude of a row is `q · scale`).
pub fn reciprocal_scale(row: &Tensor, quant: Quant) -> Result<Tensor> {
    let q = quant.max_code().unwrap_or(127) as f32;
    let dtype = row.dtype();
    let dims = row.dims().to_vec();
    let d = dims[3];
    let values: Vec<f32> = row.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let mut out = Vec::with_capacity(values.len());
    for chunk in values.chunks(d.max(1)) {
        let a = chunk.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = a / q;
        for &x in chunk {
            if scale == 0.0 {
                out.push(x);
            } else {
                let code = (x / scale).round();
                out.push(code / (1.0 / scale));
            }
        }
    }
    let device: &Device = row.device();
    Ok(Tensor::from_vec(out, dims, device)?.to_dtype(dtype)?)
}
