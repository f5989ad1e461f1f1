//! The scalar reference quantizer of docs/contract.md §6.
//!
//! Written for clarity, one value at a time; the packed cache's tensor
//! kernels must reproduce these numbers bit for bit.

use half::{bf16, f16};

use crate::config::{Dtype, Quant};

/// Rounds half away from zero (`2.5 → 3`, `-2.5 → -3`), as docs/contract.md §6 asks;
/// `f32::round` has exactly this rule.
pub fn round_half_away_from_zero(x: f32) -> f32 {
    x.round()
}

/// One quantized row: the codes of `D` values and their scale.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedRow {
    /// `clamp(round(x / scale), -q, q)` per value; all 0 when `scale = 0`.
    pub codes: Vec<i8>,
    /// `max |x| / q`, in f32.
    pub scale: f32,
}

/// Quantizes one (batch row, position, head) row of `D` values.
///
/// `q` is 127 for int8 and 7 for int4. The division is a true f32 division
/// `x / scale`, never a multiplication by a reciprocal, because the two
/// differ in the last bit and the contract is bit-exact.
pub fn quantize_row(values: &[f32], q: i32) -> QuantizedRow {
    let amax = values.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = amax / q as f32;
    let codes = values
        .iter()
        .map(|&x| {
            if scale == 0.0 {
                0
            } else {
                round_half_away_from_zero(x / scale).clamp(-(q as f32), q as f32) as i8
            }
        })
        .collect();
    QuantizedRow { codes, scale }
}

/// The dequantized f32 value of one code: `code as f32 * scale`.
pub fn dequantize(code: i8, scale: f32) -> f32 {
    code as f32 * scale
}

/// Converts an f32 to the dtype with round-to-nearest-even and returns it as
/// the f32 the dtype value stands for (exact: every f16/bf16 is an f32).
pub fn round_to_dtype(x: f32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => x,
        Dtype::F16 => f16::from_f32(x).to_f32(),
        Dtype::Bf16 => bf16::from_f32(x).to_f32(),
    }
}

/// What a cold row of `values` (already dtype values, given as f32) reads
/// back as under `quant`, in the dtype, as f32.
pub fn cold_round_trip(values: &[f32], quant: Quant, dtype: Dtype) -> Vec<f32> {
    match quant.max_code() {
        None => values.to_vec(),
        Some(q) => {
            let row = quantize_row(values, q);
            row.codes
                .iter()
                .map(|&c| round_to_dtype(dequantize(c, row.scale), dtype))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_away_from_zero() {
        assert_eq!(round_half_away_from_zero(2.5), 3.0);
        assert_eq!(round_half_away_from_zero(-2.5), -3.0);
        assert_eq!(round_half_away_from_zero(0.5), 1.0);
        assert_eq!(round_half_away_from_zero(-0.5), -1.0);
        assert_eq!(round_half_away_from_zero(1.49), 1.0);
    }

    #[test]
    fn int8_hand_computed() {
        // amax 2.54 → scale 0.02; 1.27 / 0.02 = 63.5 → 64 (half away from zero).
        let row = quantize_row(&[2.54, -1.27, 0.0, 0.01], 127);
        assert_eq!(row.scale, 2.54f32 / 127.0);
        assert_eq!(row.codes[0], 127);
        assert_eq!(row.codes[1], ((-1.27f32) / row.scale).round() as i8);
        assert_eq!(row.codes[2], 0);
        assert_eq!(row.codes[3], (0.01f32 / row.scale).round() as i8);
    }

    #[test]
    fn int4_halves_round_away_and_extremes_hit_q() {
        // amax 7 → scale 1: codes are the rounded values themselves.
        let row = quantize_row(&[7.0, -3.5, 2.5, -0.5, 0.49], 7);
        assert_eq!(row.scale, 1.0);
        assert_eq!(row.codes, vec![7, -4, 3, -1, 0]);
    }

    /// Rows where `x · (1 / scale)` rounds to the other side of a half
    /// than `x / scale` (docs/contract.md §6): the quantizer divides.
    const RECIPROCAL_ROUNDS_OTHERWISE: [(i32, u32, u32, i8); 2] = [
        // (q, amax bits, x bits, the code by true division)
        (7, 0x3f80_2000, 0x3eb7_0924, 2),
        (127, 0x3f80_1000, 0x3d99_458a, 9),
    ];

    #[test]
    fn quantizer_divides_instead_of_multiplying_by_a_reciprocal() {
        for (q, amax, x, code) in RECIPROCAL_ROUNDS_OTHERWISE {
            let (amax, x) = (f32::from_bits(amax), f32::from_bits(x));
            let row = quantize_row(&[amax, x], q);
            let scale = amax / q as f32;
            assert_eq!(row.scale, scale);
            // The reciprocal gives the next code: this row tells them apart.
            let by_reciprocal = round_half_away_from_zero(x * (1.0 / scale)) as i8;
            assert_eq!(by_reciprocal, code + 1, "q {q}");
            assert_eq!(row.codes, vec![q as i8, code], "q {q}");
        }
    }

    #[test]
    fn codes_are_clamped_to_q() {
        // x / scale can exceed q by rounding of the scale itself; the clamp
        // keeps codes in range. Construct values whose ratio rounds above q.
        for q in [7, 127] {
            for amax in [1.0f32, 3.0, 1e-30, 7.77e20, f32::MAX / 2.0] {
                let row = quantize_row(&[amax, -amax, amax / 3.0], q);
                assert!(row.codes.iter().all(|&c| (c as i32).abs() <= q));
                assert_eq!(row.codes[0] as i32, q);
                assert_eq!(row.codes[1] as i32, -q);
            }
        }
    }

    #[test]
    fn zero_scale_gives_zero_codes() {
        let row = quantize_row(&[0.0, -0.0, 0.0], 127);
        assert_eq!(row.scale, 0.0);
        assert_eq!(row.codes, vec![0, 0, 0]);
        assert_eq!(
            cold_round_trip(&[0.0, 0.0], Quant::Int4, Dtype::Bf16),
            vec![0.0, 0.0]
        );
    }

    #[test]
    fn tiny_values_survive_as_subnormal_scale() {
        let tiny = f32::from_bits(1); // smallest subnormal
        let row = quantize_row(&[tiny, -tiny], 127);
        // tiny / 127 underflows to 0: scale 0, every code 0.
        assert_eq!(row.scale, 0.0);
        assert_eq!(row.codes, vec![0, 0]);
    }

    #[test]
    fn dtype_conversion_rounds_to_nearest_even() {
        // 1 + 2^-11 lies halfway between two f16 values: ties to even (1.0).
        assert_eq!(round_to_dtype(1.0 + 2f32.powi(-11), Dtype::F16), 1.0);
        // 1 + 3·2^-11 lies halfway: ties to even (1 + 2^-9).
        assert_eq!(
            round_to_dtype(1.0 + 3.0 * 2f32.powi(-11), Dtype::F16),
            1.0 + 2f32.powi(-9)
        );
        // bf16 keeps 8 mantissa bits: 1 + 2^-8 is a tie → 1.0.
        assert_eq!(round_to_dtype(1.0 + 2f32.powi(-8), Dtype::Bf16), 1.0);
        assert_eq!(
            round_to_dtype(1.0 + 3.0 * 2f32.powi(-8), Dtype::Bf16),
            1.0 + 2f32.powi(-6)
        );
    }

    #[test]
    fn none_round_trip_is_exact() {
        let v = [1.5, -2.25, 3.0e-8];
        assert_eq!(cold_round_trip(&v, Quant::None, Dtype::F32), v.to_vec());
    }
}
