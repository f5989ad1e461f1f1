//! The payload rule (docs/contract.md §16): its known answers, its
//! properties, and `check_rows` catching each kind of wrong row.

use half::{bf16, f16};

use super::*;
use crate::prefix::payload::{mix, prefix_hashes, row_from_hash, value_bits};

fn config(layers: usize, row_width: usize) -> PrefixConfig {
    PrefixConfig {
        layers,
        row_width,
        ..PrefixConfig::new(4, 2)
    }
}

fn bits(rows: &[f32]) -> Vec<u32> {
    rows.iter().map(|v| v.to_bits()).collect()
}

/// The values docs/contract.md §16 lists, computed there by an independent
/// Python implementation of the definition.
#[test]
fn known_answers_match_the_contract() {
    let rows = payload_rows(&config(2, 2), &[1, 2, 3]);
    assert_eq!(
        bits(&rows),
        [
            0x4173_0000,
            0x4059_0000,
            0xc1ef_0000,
            0xbd3a_0000,
            0xc26d_0000,
            0x4004_0000,
            0xbcdd_0000,
            0x3cce_0000,
            0xbd04_0000,
            0xbdc7_0000,
            0xc1cf_0000,
            0x3e76_0000,
        ]
    );
    let seeded = PrefixConfig {
        seed: 7,
        ..config(1, 4)
    };
    assert_eq!(
        bits(&payload_rows(&seeded, &[0])),
        [0x421e_0000, 0x419f_0000, 0xc0a4_0000, 0x3c96_0000]
    );
}

#[test]
fn every_value_is_finite_nonzero_and_exact_in_f16_and_bf16() {
    let mut e = 0u64;
    for _ in 0..10_000 {
        e = mix(e.wrapping_add(1));
        let v = f32::from_bits(value_bits(e));
        assert!(v.is_finite() && v != 0.0, "{v}");
        assert!((2f32.powi(-6)..2f32.powi(6)).contains(&v.abs()), "{v}");
        assert_eq!(f16::from_f32(v).to_f32().to_bits(), v.to_bits(), "f16 {v}");
        assert_eq!(
            bf16::from_f32(v).to_f32().to_bits(),
            v.to_bits(),
            "bf16 {v}"
        );
    }
}

#[test]
fn a_row_depends_on_every_token_of_its_prefix_and_nothing_after_it() {
    let c = config(1, 4);
    let row = |tokens: &[Token], p: usize| payload_rows(&c, tokens)[p * 4..(p + 1) * 4].to_vec();
    // The same prefix gives the same row whatever follows it.
    assert_eq!(bits(&row(&[1, 2, 3], 1)), bits(&row(&[1, 2, 4], 1)));
    // A different token anywhere before or at the position changes it.
    assert_ne!(bits(&row(&[1, 2, 3], 2)), bits(&row(&[1, 2, 4], 2)));
    assert_ne!(bits(&row(&[1, 2, 3], 2)), bits(&row(&[9, 2, 3], 2)));
    // So does the length: [0] and [0 0] end in the same token.
    assert_ne!(bits(&row(&[0], 0)), bits(&row(&[0, 0], 1)));
    // And the layer and the seed.
    let two = config(2, 4);
    let rows = payload_rows(&two, &[1]);
    assert_ne!(bits(&rows[..4]), bits(&rows[4..]));
    let other_seed = PrefixConfig {
        seed: 1,
        ..c.clone()
    };
    assert_ne!(
        bits(&payload_rows(&c, &[1])),
        bits(&payload_rows(&other_seed, &[1]))
    );
}

#[test]
fn payload_row_is_the_row_of_the_prefix_s_last_position() {
    let c = config(3, 5);
    let tokens = [4, 8, 15, 16, 23, 42];
    let rows = payload_rows(&c, &tokens);
    let hashes = prefix_hashes(c.seed, &tokens);
    for layer in 0..3 {
        for p in 0..tokens.len() {
            let at = (layer * tokens.len() + p) * 5;
            let expected = bits(&rows[at..at + 5]);
            assert_eq!(bits(&payload_row(&c, &tokens[..=p], layer)), expected);
            assert_eq!(bits(&row_from_hash(hashes[p], layer, 5)), expected);
        }
    }
}

#[test]
fn check_rows_accepts_the_payload_and_refuses_a_wrong_shape() {
    let c = config(2, 3);
    let tokens = [1, 2, 3];
    let rows = payload_rows(&c, &tokens);
    assert_eq!(check_rows(&c, &tokens, 0, &rows), Ok(()));
    assert_eq!(check_rows(&c, &[], 0, &[]), Ok(()));
    let error = check_rows(&c, &tokens, 0, &rows[..15]).unwrap_err();
    assert!(
        matches!(
            error,
            PayloadError::Shape {
                expected: 18,
                actual: 15,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn check_rows_catches_a_stale_row_of_another_prefix() {
    // A block reused for a prompt that differs in its last token: the rows
    // of [1 2 4] read back for [1 2 3].
    let c = config(1, 2);
    let stale = payload_rows(&c, &[1, 2, 4]);
    let error = check_rows(&c, &[1, 2, 3], 0, &stale).unwrap_err();
    match error {
        PayloadError::WrongRow { at, dim, holds, .. } => {
            assert_eq!(
                (at, dim, holds),
                (
                    RowAt {
                        layer: 0,
                        position: 2
                    },
                    0,
                    None
                )
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn check_rows_names_the_row_a_shifted_or_swapped_row_holds() {
    let c = config(2, 2);
    let tokens = [5, 6, 7];
    let good = payload_rows(&c, &tokens);
    // Position 2 of layer 0 holds position 1's row (an off-by-one copy).
    let mut shifted = good.clone();
    shifted.copy_within(2..4, 4);
    let error = check_rows(&c, &tokens, 0, &shifted).unwrap_err();
    assert!(
        matches!(
            error,
            PayloadError::WrongRow {
                at: RowAt {
                    layer: 0,
                    position: 2
                },
                holds: Some(RowAt {
                    layer: 0,
                    position: 1
                }),
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("holds the payload of layer 0, position 1 of the same tokens"),
        "{error}"
    );
    // Layer 1's rows read from layer 0.
    let mut swapped = good.clone();
    swapped.copy_within(0..6, 6);
    let error = check_rows(&c, &tokens, 0, &swapped).unwrap_err();
    assert!(
        matches!(
            error,
            PayloadError::WrongRow {
                at: RowAt {
                    layer: 1,
                    position: 0
                },
                holds: Some(RowAt {
                    layer: 0,
                    position: 0
                }),
                ..
            }
        ),
        "{error}"
    );
    // A zeroed row (a block never written) holds no payload.
    let mut zeroed = good;
    zeroed[8..10].fill(0.0);
    let error = check_rows(&c, &tokens, 0, &zeroed).unwrap_err();
    assert!(
        matches!(
            error,
            PayloadError::WrongRow { at: RowAt { layer: 1, position: 1 }, holds: None, actual, .. } if actual == 0.0
        ),
        "{error}"
    );
}
