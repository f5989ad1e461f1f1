//! The deterministic K/V payload the harness writes, and the values a view
//! must therefore hold.
//!
//! Every element is a pure function of (seed, op index, position, batch
//! row, head, dim, K|V), so the expected view follows from the model's
//! writers alone, and a wrong row can be traced back to the write it came
//! from. Values are `±(1 + m) · 2^e` with `e ∈ [-6, 5]` and `m` using only
//! the dtype's mantissa bits: exactly representable in the dtype, finite,
//! never zero (zero is what never-written heads read as).

use crate::codec::{to_dtype_tensor, Kv};
use candle_core::{Device, Tensor};
use half::{bf16, f16};
use kvmodel::quant::cold_round_trip;
use kvmodel::{Config, Dtype, Model, Quant};

/// Where one row of `D` values was written: the key of a payload row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowId {
    /// The op that wrote it.
    pub writer: u64,
    /// Global position.
    pub position: u64,
    /// Batch row.
    pub batch: usize,
    /// Head.
    pub head: usize,
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finalizer: cheap, and every input bit reaches every output bit.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The payload element for `row`, dim `dim`, of `kv`, as the f32 that the
/// dtype value stands for.
pub fn element(seed: u64, dtype: Dtype, kv: Kv, row: RowId, dim: usize) -> f32 {
    let mut h = seeded(seed);
    for part in [
        row.writer,
        row.position,
        row.batch as u64,
        row.head as u64,
        dim as u64,
        kv as u64,
    ] {
        h = mix(h ^ part.wrapping_mul(GOLDEN));
    }
    let mantissa_bits = match dtype {
        Dtype::F32 => 23,
        Dtype::F16 => 10,
        Dtype::Bf16 => 7,
    };
    let mantissa = (h & ((1 << mantissa_bits) - 1)) as f32 / (1u64 << mantissa_bits) as f32;
    let exponent = ((h >> 32) % 12) as i32 - 6;
    let sign = if (h >> 63) == 1 { -1.0 } else { 1.0 };
    sign * (1.0 + mantissa) * 2f32.powi(exponent)
}

/// The seed, salted: what [`element`] mixes first.
fn seeded(seed: u64) -> u64 {
    mix(seed ^ 0x6b76_6368_6563_6b00)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The same K and V rows as [`row`], computed together and fast: the hash
/// of `(seed, writer, position, batch, head)` once per row, of the dim once
/// per K/V pair, each value built from its bit fields instead of a `powi`.
/// Calls `each(dim, k, v)` for every dim of the row with the values' bit
/// patterns *in the dtype* (f32: 32 bits; f16, bf16: 16 bits, in the low
/// half), which is what the cache stores. Bit-identical to [`element`]
/// converted to the dtype (tested), which stays the definition.
#[inline]
pub fn row_bits(
    seed: u64,
    dtype: Dtype,
    head_dim: usize,
    id: RowId,
    mut each: impl FnMut(usize, u32, u32),
) {
    let mut h = seeded(seed);
    h = mix(h ^ id.writer.wrapping_mul(GOLDEN));
    h = mix(h ^ id.position.wrapping_mul(GOLDEN));
    h = mix(h ^ (id.batch as u64).wrapping_mul(GOLDEN));
    h = mix(h ^ (id.head as u64).wrapping_mul(GOLDEN));
    // (mantissa bits, exponent bits' position, exponent bias, sign bit)
    let (mantissa_bits, bias, sign_at): (u32, u32, u32) = match dtype {
        Dtype::F32 => (23, 127, 31),
        Dtype::F16 => (10, 15, 15),
        Dtype::Bf16 => (7, 127, 15),
    };
    // ±(1 + m / 2^bits) · 2^e with e ∈ [-6, 5]: normal in every dtype, so
    // its fields are exactly the sign, `e + bias` and `m`.
    let value = |h: u64| {
        let mantissa = (h & ((1 << mantissa_bits) - 1)) as u32;
        let exponent = ((h >> 32) % 12) as u32 + bias - 6;
        let sign = (h >> 63) as u32;
        (sign << sign_at) | (exponent << mantissa_bits) | mantissa
    };
    let k_salt = (Kv::K as u64).wrapping_mul(GOLDEN);
    let v_salt = (Kv::V as u64).wrapping_mul(GOLDEN);
    for dim in 0..head_dim {
        let d = mix(h ^ (dim as u64).wrapping_mul(GOLDEN));
        each(dim, value(mix(d ^ k_salt)), value(mix(d ^ v_salt)));
    }
}

/// The bit pattern of `x` in `dtype` (see [`row_bits`]); exact for the
/// values the dtype represents, which are all the harness ever builds.
pub fn dtype_bits(x: f32, dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F32 => x.to_bits(),
        Dtype::F16 => f16::from_f32(x).to_bits() as u32,
        Dtype::Bf16 => bf16::from_f32(x).to_bits() as u32,
    }
}

/// The f32 value of a bit pattern in `dtype` (the inverse of
/// [`dtype_bits`], exact: every dtype widens to f32 exactly).
pub fn bits_value(bits: u32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => f32::from_bits(bits),
        Dtype::F16 => f16::from_bits(bits as u16).to_f32(),
        Dtype::Bf16 => bf16::from_bits(bits as u16).to_f32(),
    }
}

/// The `D` payload values of one row.
pub fn row(config: &Config, kv: Kv, id: RowId) -> Vec<f32> {
    (0..config.head_dim)
        .map(|d| element(config.seed, config.dtype, kv, id, d))
        .collect()
}

/// The rows a write's payload carries, `(start, len, heads)`: the
/// request's own shape ([`crate::codec::payload_heads`], a
/// negative start naming rows from 0) when it holds at most `limit`
/// elements and heads, else none at all (`(0, 0, every head)`): a request
/// that large must be refused before its payload is looked at. Every
/// driver asks a subject the same question with it.
pub fn payload_rows(
    config: &Config,
    w: &kvmodel::Write,
    limit: usize,
) -> (u64, usize, std::ops::Range<usize>) {
    let heads = crate::codec::payload_heads(w, config.heads);
    let len = usize::try_from(w.len).unwrap_or(0);
    let elements = config
        .batch
        .saturating_mul(len)
        .saturating_mul(heads.len())
        .saturating_mul(config.head_dim);
    if elements <= limit && heads.len() <= limit {
        (w.start.max(0) as u64, len, heads)
    } else {
        (0, 0, 0..config.heads)
    }
}

/// The K or V tensor `[B, len, heads.len(), D]` that op `writer` writes.
pub fn write_tensor(
    config: &Config,
    device: &Device,
    kv: Kv,
    writer: u64,
    start: u64,
    len: usize,
    heads: std::ops::Range<usize>,
) -> candle_core::Result<Tensor> {
    let hc = heads.len();
    let mut data = Vec::with_capacity(config.batch * len * hc * config.head_dim);
    for batch in 0..config.batch {
        for i in 0..len as u64 {
            for head in heads.clone() {
                let id = RowId {
                    writer,
                    position: start + i,
                    batch,
                    head,
                };
                data.extend(row(config, kv, id));
            }
        }
    }
    to_dtype_tensor(
        data,
        [config.batch, len, hc, config.head_dim],
        config.dtype,
        device,
    )
}

/// The K and V tensors `[B, len, heads.len(), D]` that op `writer`
/// writes: the same as [`write_tensor`] for each, built in one pass with
/// [`row_bits`] straight into the dtype's element type.
pub fn write_tensors(
    config: &Config,
    device: &Device,
    writer: u64,
    start: u64,
    len: usize,
    heads: std::ops::Range<usize>,
) -> candle_core::Result<(Tensor, Tensor)> {
    mixed_write_tensors(config, device, |_, _| writer, start, len, heads)
}

/// [`write_tensors`] where each (batch row, head) takes the rows of its
/// own writer, `writer(batch, head)`: how a relation changes the payload
/// of one batch row or one head and nothing else (M3, M4).
pub fn mixed_write_tensors(
    config: &Config,
    device: &Device,
    writer: impl Fn(usize, usize) -> u64,
    start: u64,
    len: usize,
    heads: std::ops::Range<usize>,
) -> candle_core::Result<(Tensor, Tensor)> {
    match config.dtype {
        Dtype::F32 => pair_tensors(config, device, writer, start, len, heads, f32::from_bits),
        Dtype::F16 => pair_tensors(config, device, writer, start, len, heads, |b| {
            f16::from_bits(b as u16)
        }),
        Dtype::Bf16 => pair_tensors(config, device, writer, start, len, heads, |b| {
            bf16::from_bits(b as u16)
        }),
    }
}

fn pair_tensors<T: candle_core::WithDType>(
    config: &Config,
    device: &Device,
    writer: impl Fn(usize, usize) -> u64,
    start: u64,
    len: usize,
    heads: std::ops::Range<usize>,
    from_bits: impl Fn(u32) -> T,
) -> candle_core::Result<(Tensor, Tensor)> {
    let shape = [config.batch, len, heads.len(), config.head_dim];
    let elements = shape.iter().product();
    let (mut k, mut v) = (Vec::with_capacity(elements), Vec::with_capacity(elements));
    for batch in 0..config.batch {
        for i in 0..len as u64 {
            for head in heads.clone() {
                let id = RowId {
                    writer: writer(batch, head),
                    position: start + i,
                    batch,
                    head,
                };
                row_bits(config.seed, config.dtype, config.head_dim, id, |_, x, y| {
                    k.push(from_bits(x));
                    v.push(from_bits(y));
                });
            }
        }
    }
    Ok((
        Tensor::from_vec(k, &shape, device)?,
        Tensor::from_vec(v, &shape, device)?,
    ))
}

/// The values a view of `positions` reporting `heads` must hold, row-major
/// `[B, len, heads, D]`: the payload of each row's writer, the reference
/// quantizer's round trip for rows of cold chunks, zeros where a head was
/// never written.
pub fn expected_view(
    model: &Model,
    kv: Kv,
    positions: &[u64],
    heads: std::ops::Range<usize>,
) -> Vec<f32> {
    let config = model.config();
    let quant = match config.variant {
        kvmodel::Variant::Packed => config.packed_policy().quant,
        kvmodel::Variant::Dense => Quant::None,
    };
    let mut out =
        Vec::with_capacity(config.batch * positions.len() * heads.len() * config.head_dim);
    for batch in 0..config.batch {
        for &position in positions {
            let writers = model.read_writers(position).unwrap_or(&[]);
            for head in heads.clone() {
                match writers.get(head).copied().flatten() {
                    None => out.extend(std::iter::repeat_n(0.0, config.head_dim)),
                    Some(writer) => {
                        let values = row(
                            config,
                            kv,
                            RowId {
                                writer,
                                position,
                                batch,
                                head,
                            },
                        );
                        if model.is_cold(position) {
                            out.extend(cold_round_trip(&values, quant, config.dtype));
                        } else {
                            out.extend(values);
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
