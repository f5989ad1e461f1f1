//! The device-generic quantizer: the numbers of the module docs of
//! [`quant`](super), from candle's elementwise, reduction and cast ops only,
//! so it runs on any device. On the CPU it is bit-exact with the scalar
//! reference `kvmodel::quant` (the suites compare bit for bit); each step
//! says why.
//!
//! # What may round differently on a GPU
//!
//! Every step below is exact or correctly rounded on the CPU. A GPU backend
//! can differ in three places, and a GPU run that disagrees with the
//! reference should be explained by one of them first:
//!
//! - **division** `amax / q` and `x / scale`: the CPU divides in IEEE f32;
//!   a GPU kernel compiled with fast math (`-use_fast_math`, `__fdividef`)
//!   divides approximately (up to 2 ulp), which can flip a code whose ratio
//!   sits near `k + 0.5`;
//! - **round half away from zero**: candle's `round` is `f32::round` on the
//!   CPU and `roundf` in CUDA, both half-away; a backend using `rint`
//!   (half-to-even) would turn `2.5` into `2`;
//! - **f32 → bf16 / f16**: the CPU converts with round-to-nearest-even
//!   (`half`); CUDA's `__float2bfloat16` rounds the same way, but older
//!   paths that truncate would drop the last bit of dequantized values.
//!
//! Casts to and from `u8` and the `· 16`, `/ 16`, `+ 256` arithmetic on
//! small integers are exact in f32 on every backend, and so is the max of
//! absolute values.

use candle_core::{DType, Result, Tensor, D};
use kvmodel::Quant;

use super::{code_bytes, max_code, QuantizedTensor};

/// Quantizes `x` (f32, f16 or bf16, rows along the last dimension) with
/// tensor ops; same result as [`quantize`](super::quantize).
pub fn quantize(x: &Tensor, quant: Quant) -> Result<QuantizedTensor> {
    let q = max_code(quant)?;
    let head_dim = x.dims().last().copied().unwrap_or(0);
    if !matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16) {
        candle_core::bail!("quantize: unsupported dtype {:?}", x.dtype());
    }
    // f16 / bf16 → f32 is exact.
    let x = x.to_dtype(DType::F32)?;
    let q_tensor = Tensor::new(q as f32, x.device())?;
    // A true f32 division, never a multiplication by 1 / q.
    let scale = x.abs()?.max_keepdim(D::Minus1)?.broadcast_div(&q_tensor)?;
    // A zero scale means an all-zero row: divide by 1 instead, which gives
    // ±0 and so code 0, as the reference's special case does.
    let divisor = scale.eq(0f32)?.where_cond(&scale.ones_like()?, &scale)?;
    let codes = x
        .broadcast_div(&divisor)?
        .round()?
        .clamp(-(q as f32), q as f32)?;
    let bytes = match quant {
        Quant::Int4 => {
            let nibbles = two_complement(&codes, 16.0)?;
            let nibbles = if head_dim % 2 == 1 {
                nibbles.pad_with_zeros(D::Minus1, 0, 1)?
            } else {
                nibbles
            };
            let mut pairs = nibbles.dims().to_vec();
            let last = pairs.len() - 1;
            pairs[last] = code_bytes(quant, head_dim);
            pairs.push(2);
            let pairs = nibbles.reshape(pairs)?;
            let low = pairs.narrow(D::Minus1, 0, 1)?;
            let high = pairs.narrow(D::Minus1, 1, 1)?;
            (low + (high * 16.0)?)?.squeeze(D::Minus1)?
        }
        _ => two_complement(&codes, 256.0)?,
    };
    Ok(QuantizedTensor {
        codes: bytes.to_dtype(DType::U8)?,
        scales: scale.squeeze(D::Minus1)?,
        quant,
        head_dim,
    })
}

/// Integer-valued f32 codes in `[-m/2, m/2)` as their unsigned two's
/// complement in `[0, m)`.
fn two_complement(codes: &Tensor, modulus: f64) -> Result<Tensor> {
    codes.lt(0f32)?.where_cond(&(codes + modulus)?, codes)
}

/// Unsigned two's complement values in `[0, m)` back to signed ones.
fn signed(values: &Tensor, modulus: f64) -> Result<Tensor> {
    values
        .ge((modulus / 2.0) as f32)?
        .where_cond(&(values - modulus)?, values)
}

/// Dequantizes into a new contiguous tensor of `dtype` with tensor ops;
/// same values as [`dequantize_into`](super::dequantize_into).
pub fn dequantize(quantized: &QuantizedTensor, dtype: DType) -> Result<Tensor> {
    max_code(quantized.quant)?;
    let bytes = quantized.codes.to_dtype(DType::F32)?;
    let codes = match quantized.quant {
        Quant::Int4 => {
            // `/ 16` is a multiplication by 2^-4: exact.
            let high = (&bytes / 16.0)?.floor()?;
            let low = (&bytes - (&high * 16.0)?)?;
            let pairs = Tensor::stack(&[&low, &high], D::Minus1)?;
            let mut dims = bytes.dims().to_vec();
            let last = dims.len() - 1;
            dims[last] *= 2;
            let nibbles = pairs
                .reshape(dims)?
                .narrow(D::Minus1, 0, quantized.head_dim)?;
            signed(&nibbles, 16.0)?
        }
        _ => signed(&bytes, 256.0)?,
    };
    codes
        .broadcast_mul(&quantized.scales.unsqueeze(D::Minus1)?)?
        .to_dtype(dtype)?
        .contiguous()
}
