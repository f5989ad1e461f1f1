//! The tensor kernels of `kvcache::quant` against the scalar reference
//! `kvmodel::quant`, bit for bit: scales, codes (unpacked by the documented
//! byte layout) and dequantized values.

use candle_core::{Device, Tensor};
use kvcache::{candle_dtype, quant};
use kvmodel::quant::{cold_round_trip, quantize_row, round_to_dtype};
use kvmodel::{Dtype, Quant};
use proptest::prelude::*;

/// The largest finite value of each dtype, as f32.
fn dtype_max(dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => f32::MAX,
        Dtype::F16 => 65504.0,
        Dtype::Bf16 => half::bf16::MAX.to_f32(),
    }
}

/// One row of a given kind: zeros, subnormal-tiny, near the dtype max, or
/// ordinary mixed-sign values.
fn row(dtype: Dtype, head_dim: usize) -> impl Strategy<Value = Vec<f32>> {
    let max = dtype_max(dtype);
    let unit = prop::collection::vec(-1.0f32..1.0, head_dim);
    prop_oneof![
        Just(vec![0.0; head_dim]),
        unit.clone()
            .prop_map(|v| v.iter().map(|x| x * 1e-38).collect()),
        unit.clone()
            .prop_map(|v| v.iter().map(|x| x * 1e-6).collect()),
        unit.clone()
            .prop_map(move |v| v.iter().map(|x| x * max).collect()),
        unit.clone()
            .prop_map(|v| v.iter().map(|x| x * 100.0).collect()),
        prop::collection::vec(-8i32..=8, head_dim)
            .prop_map(|v| v.iter().map(|&x| x as f32 * 0.5).collect()),
        unit,
    ]
    .prop_map(move |v| v.into_iter().map(|x| round_to_dtype(x, dtype)).collect())
}

fn case() -> impl Strategy<Value = (Dtype, Quant, usize, Vec<Vec<f32>>)> {
    (
        prop_oneof![Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::Bf16)],
        prop_oneof![Just(Quant::Int8), Just(Quant::Int4)],
        1usize..10,
        1usize..6,
    )
        .prop_flat_map(|(dtype, quant, head_dim, rows)| {
            (
                Just(dtype),
                Just(quant),
                Just(head_dim),
                prop::collection::vec(row(dtype, head_dim), rows),
            )
        })
}

/// The code of value `i` under the documented byte layout.
fn unpack(codes: &[u8], quant: Quant, i: usize) -> i8 {
    match quant {
        Quant::Int4 => {
            let nibble = (codes[i / 2] >> (4 * (i % 2))) & 0x0F;
            if nibble >= 8 {
                nibble as i8 - 16
            } else {
                nibble as i8
            }
        }
        _ => codes[i] as i8,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn kernels_match_the_scalar_reference(
        (dtype, quant, head_dim, rows) in case(),
        generic in proptest::bool::ANY,
    ) {
        let device = Device::Cpu;
        let flat: Vec<f32> = rows.concat();
        let x = Tensor::from_vec(flat, (rows.len(), head_dim), &device)
            .unwrap()
            .to_dtype(candle_dtype(dtype))
            .unwrap();
        // Both paths: the CPU kernels and the device-generic tensor ops.
        let packed = if generic {
            quant::generic::quantize(&x, quant).unwrap()
        } else {
            quant::quantize(&x, quant).unwrap()
        };
        let q = quant.max_code().unwrap();
        let scales: Vec<f32> = packed.scales.to_vec1().unwrap();
        let codes: Vec<Vec<u8>> = packed.codes.to_vec2().unwrap();
        prop_assert_eq!(codes[0].len(), quant::code_bytes(quant, head_dim));
        let back = if generic {
            quant::generic::dequantize(&packed, candle_dtype(dtype)).unwrap()
        } else {
            quant::dequantize(&packed, candle_dtype(dtype), &device).unwrap()
        };
        let back: Vec<Vec<f32>> = back
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .to_vec2()
            .unwrap();
        for (r, values) in rows.iter().enumerate() {
            let reference = quantize_row(values, q);
            prop_assert_eq!(scales[r].to_bits(), reference.scale.to_bits(), "scale of row {}", r);
            for (i, &code) in reference.codes.iter().enumerate() {
                prop_assert_eq!(unpack(&codes[r], quant, i), code, "code {} of row {}", i, r);
            }
            if quant == Quant::Int4 && head_dim % 2 == 1 {
                prop_assert_eq!(codes[r][head_dim / 2] >> 4, 0, "odd D leaves the last high nibble 0");
            }
            let expected = cold_round_trip(values, quant, dtype);
            let got: Vec<u32> = back[r].iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = expected.iter().map(|x| x.to_bits()).collect();
            prop_assert_eq!(got, want, "dequantized row {}", r);
        }
    }
}

/// Dequantizing into a strided slice writes exactly that slice.
#[test]
fn dequantize_into_a_narrowed_output_leaves_the_rest() {
    let device = Device::Cpu;
    let x = Tensor::arange(0f32, 24.0, &device)
        .unwrap()
        .reshape((2, 3, 4))
        .unwrap();
    let packed = quant::quantize(&x.narrow(1, 1, 2).unwrap(), Quant::Int8).unwrap();
    let out = Tensor::full(-1f32, (2, 3, 4), &device).unwrap();
    quant::dequantize_into(&packed, &out.narrow(1, 1, 2).unwrap()).unwrap();
    let out: Vec<Vec<Vec<f32>>> = out.to_vec3().unwrap();
    for (b, rows) in out.iter().enumerate() {
        assert_eq!(rows[0], vec![-1.0; 4]);
        for (p, row) in rows.iter().enumerate().skip(1) {
            let values: Vec<f32> = (0..4).map(|d| (b * 12 + p * 4 + d) as f32).collect();
            assert_eq!(*row, cold_round_trip(&values, Quant::Int8, Dtype::F32));
        }
    }
}

/// Quantizes `rows` (f32, `[rows, D]`) on the CPU kernels or the generic path.
fn quantize(rows: &[Vec<f32>], quant: Quant, generic: bool) -> quant::QuantizedTensor {
    let d = rows[0].len();
    let x = Tensor::from_vec(rows.concat(), (rows.len(), d), &Device::Cpu).unwrap();
    if generic {
        quant::generic::quantize(&x, quant).unwrap()
    } else {
        quant::quantize(&x, quant).unwrap()
    }
}

fn dequantize(packed: &quant::QuantizedTensor, generic: bool) -> Vec<Vec<u32>> {
    let out = if generic {
        quant::generic::dequantize(packed, candle_core::DType::F32).unwrap()
    } else {
        quant::dequantize(packed, candle_core::DType::F32, &Device::Cpu).unwrap()
    };
    let out: Vec<Vec<f32>> = out.to_vec2().unwrap();
    out.iter()
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// docs/contract.md §6: with an odd `D`, int4 writes the high nibble of a
/// row's last byte as 0, and a reader ignores it: the same codes with that
/// nibble set read back the same values, on both paths.
#[test]
fn odd_head_dim_int4_high_nibble_is_zero_and_ignored() {
    let rows = vec![
        vec![7.0f32, -3.0, 2.0, -7.0, 5.0],
        vec![-1.0, 0.5, 0.25, 1.0, -0.75],
    ];
    for generic in [false, true] {
        let packed = quantize(&rows, Quant::Int4, generic);
        let codes: Vec<Vec<u8>> = packed.codes.to_vec2().unwrap();
        for row in &codes {
            assert_eq!(row.len(), 3);
            assert_eq!(
                row[2] >> 4,
                0,
                "generic {generic}: high nibble of the last byte"
            );
        }
        let expected = dequantize(&packed, generic);
        for nibble in [0x1u8, 0x7, 0x8, 0xF] {
            let dirty: Vec<u8> = codes
                .iter()
                .flat_map(|row| {
                    let mut row = row.clone();
                    row[2] |= nibble << 4;
                    row
                })
                .collect();
            let dirty = quant::QuantizedTensor {
                codes: Tensor::from_vec(dirty, (2, 3), &Device::Cpu).unwrap(),
                ..packed.clone()
            };
            // Both readers, whichever path wrote the codes.
            for reader in [false, true] {
                assert_eq!(
                    dequantize(&dirty, reader),
                    expected,
                    "written generic {generic}, read generic {reader}, nibble {nibble:#x}"
                );
            }
        }
        for (r, row) in rows.iter().enumerate() {
            let want: Vec<u32> = cold_round_trip(row, Quant::Int4, Dtype::F32)
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(expected[r], want, "generic {generic}: row {r}");
        }
    }
}

/// docs/contract.md §6: `x / scale` is a true division. In these rows,
/// `x · (1 / scale)` rounds to the other side of a half and would give the
/// next code; both kernels give the division's code.
#[test]
fn kernels_divide_rather_than_multiply_by_a_reciprocal() {
    // (quant, amax bits, x bits, the code by true division)
    let cases = [
        (Quant::Int4, 0x3f80_2000u32, 0x3eb7_0924u32, 2i8),
        (Quant::Int8, 0x3f80_1000, 0x3d99_458a, 9),
    ];
    for (quant, amax, x, code) in cases {
        let (amax, x) = (f32::from_bits(amax), f32::from_bits(x));
        let q = quant.max_code().unwrap();
        let scale = amax / q as f32;
        assert_eq!(
            (x * (1.0 / scale)).round() as i8,
            code + 1,
            "{quant:?}: the reciprocal's code"
        );
        assert_eq!(quantize_row(&[amax, x], q).codes[1], code);
        for generic in [false, true] {
            let packed = quantize(&[vec![amax, x]], quant, generic);
            let codes: Vec<Vec<u8>> = packed.codes.to_vec2().unwrap();
            assert_eq!(
                unpack(&codes[0], quant, 1),
                code,
                "{quant:?} generic {generic}"
            );
        }
    }
}
