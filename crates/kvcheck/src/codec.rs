//! The tensor codec every wing shares: which tensor a row belongs to
//! ([`Kv`]), f32 values to a tensor of the cache's dtype and back, and the
//! heads a write's payload carries. A leaf: it names nothing else of the
//! crate, so the subjects and the lockstep driver both build on it.

use std::ops::Range;

use candle_core::{Device, Tensor};
use half::{bf16, f16};
use kvmodel::{Dtype, Write};

/// Which of the two tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kv {
    /// Keys.
    K,
    /// Values.
    V,
}

/// A tensor of the dtype from f32 values that the dtype represents exactly.
pub fn to_dtype_tensor(
    data: Vec<f32>,
    shape: [usize; 4],
    dtype: Dtype,
    device: &Device,
) -> candle_core::Result<Tensor> {
    match dtype {
        Dtype::F32 => Tensor::from_vec(data, &shape, device),
        Dtype::F16 => Tensor::from_vec(
            data.into_iter().map(f16::from_f32).collect::<Vec<_>>(),
            &shape,
            device,
        ),
        Dtype::Bf16 => Tensor::from_vec(
            data.into_iter().map(bf16::from_f32).collect::<Vec<_>>(),
            &shape,
            device,
        ),
    }
}

/// A view tensor's elements as f32 (exact for every dtype), in row-major
/// `[B, len, heads, D]` order.
pub fn tensor_values(tensor: &Tensor) -> candle_core::Result<Vec<f32>> {
    tensor
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()
}

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
