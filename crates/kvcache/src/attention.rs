//! Reference attention over a [`SegmentedView`](crate::SegmentedView)'s
//! segments, without concatenating them: each segment's scores are
//! computed on its own and merged with an online softmax (a running max
//! and a running sum, as flash attention does), accumulated in f32.
//!
//! It is what lets a pipeline consume a [`RingCache`](crate::RingCache)
//! view without the contiguous copy. Over one segment it is exactly the
//! contiguous computation ([`attention_contiguous`]); over several it
//! agrees with it within f32 rounding of the merge (the property test in
//! `tests/caches/attention.rs` states the tolerance). Built from device-generic
//! candle ops.

use candle_core::{DType, Tensor, D};

use crate::{Result, Segments};

/// `softmax(q · kᵀ · scale) · v` per batch row and head, over the keys
/// and values given as segments (positions ascending across segments, the
/// same split for K and V).
///
/// `q` is `[B, Tq, H, D]`; each K / V segment `[B, len, H, D]`. The result
/// is `[B, Tq, H, D]` in f32. Inputs of any float dtype are widened to f32
/// first. With no key at all the result is zeros.
pub fn attention(q: &Tensor, k: &Segments, v: &Segments, scale: f64) -> Result<Tensor> {
    // [B, H, Tq, D]
    let q = q.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?;
    let (batch, heads, queries, head_dim) = q.dims4()?;
    let mut running: Option<(Tensor, Tensor, Tensor)> = None;
    for (ks, vs) in k.parts.iter().zip(&v.parts) {
        if ks.is_empty() {
            continue;
        }
        let ks = ks
            .rows
            .to_dtype(DType::F32)?
            .transpose(1, 2)?
            .contiguous()?;
        let vs = vs
            .rows
            .to_dtype(DType::F32)?
            .transpose(1, 2)?
            .contiguous()?;
        // [B, H, Tq, len]
        let scores = (q.matmul(&ks.t()?.contiguous()?)? * scale)?;
        let local_max = scores.max_keepdim(D::Minus1)?;
        running = Some(match running {
            None => {
                let p = scores.broadcast_sub(&local_max)?.exp()?;
                let sum = p.sum_keepdim(D::Minus1)?;
                (local_max, sum, p.matmul(&vs)?)
            }
            Some((max, sum, out)) => {
                let new_max = max.maximum(&local_max)?;
                let keep = (max - &new_max)?.exp()?;
                let p = scores.broadcast_sub(&new_max)?.exp()?;
                let sum = ((sum * &keep)? + p.sum_keepdim(D::Minus1)?)?;
                let out = (out.broadcast_mul(&keep)? + p.matmul(&vs)?)?;
                (new_max, sum, out)
            }
        });
    }
    let out = match running {
        Some((_, sum, out)) => out.broadcast_div(&sum)?,
        None => Tensor::zeros((batch, heads, queries, head_dim), DType::F32, q.device())?,
    };
    Ok(out.transpose(1, 2)?.contiguous()?)
}

/// [`attention`] over one contiguous K and V (`[B, len, H, D]` each): the
/// baseline a segmented consumer is compared with.
pub fn attention_contiguous(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    attention(
        q,
        &Segments::single(k.clone()),
        &Segments::single(v.clone()),
        scale,
    )
}
