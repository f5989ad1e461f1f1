//! Attention over segments equals attention over the contiguous view:
//! exactly for one segment, and within `TOLERANCE` (absolute, on outputs
//! that are convex combinations of values in [-2, 2]) for any split into
//! several, since only the online-softmax merge's f32 rounding differs.
//! Both are also checked against a scalar f64 softmax.
//!
//! `PROPTEST_CASES` overrides the number of cases (default 256).

use candle_core::{Device, Tensor};
use kvcache::attention::{attention, attention_contiguous};
use kvcache::{Segment, Segments};
use proptest::prelude::*;

/// Largest absolute difference allowed between a segmented and the
/// contiguous result.
const TOLERANCE: f32 = 2e-5;

#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    heads: usize,
    head_dim: usize,
    queries: usize,
    keys: usize,
    /// Sorted cut points in `(0, keys)`.
    cuts: Vec<usize>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn case() -> impl Strategy<Value = Case> {
    (1..=2usize, 1..=3usize, 1..=8usize, 1..=3usize, 1..=24usize).prop_flat_map(
        |(batch, heads, head_dim, queries, keys)| {
            let values = |n| proptest::collection::vec(-2.0f32..2.0, n);
            (
                proptest::collection::btree_set(1..keys.max(2), 0..keys.min(6)),
                values(batch * queries * heads * head_dim),
                values(batch * keys * heads * head_dim),
                values(batch * keys * heads * head_dim),
            )
                .prop_map(move |(cuts, q, k, v)| Case {
                    batch,
                    heads,
                    head_dim,
                    queries,
                    keys,
                    cuts: cuts.into_iter().filter(|c| *c < keys).collect(),
                    q,
                    k,
                    v,
                })
        },
    )
}

fn tensor(data: &[f32], dims: (usize, usize, usize, usize)) -> Tensor {
    Tensor::from_vec(data.to_vec(), dims, &Device::Cpu).unwrap()
}

/// The rows of `full` split at `cuts`, each a `narrow` (zero-copy).
fn split(full: &Tensor, cuts: &[usize]) -> Segments {
    let (b, n, h, d) = full.dims4().unwrap();
    let mut bounds = vec![0];
    bounds.extend(cuts);
    bounds.push(n);
    let parts = bounds
        .windows(2)
        .map(|w| Segment {
            rows: full.narrow(1, w[0], w[1] - w[0]).unwrap(),
            slot: Some(w[0]),
        })
        .collect();
    Segments {
        shape: [b, n, h, d],
        parts,
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// Scalar softmax attention in f64, `[B, Tq, H, D]` row-major.
fn scalar(c: &Case, scale: f64) -> Vec<f64> {
    let (h, d) = (c.heads, c.head_dim);
    let at = |data: &[f32], b: usize, t: usize, len: usize, head: usize, i: usize| {
        data[((b * len + t) * h + head) * d + i] as f64
    };
    let mut out = vec![0.0; c.batch * c.queries * h * d];
    for b in 0..c.batch {
        for t in 0..c.queries {
            for head in 0..h {
                let scores: Vec<f64> = (0..c.keys)
                    .map(|j| {
                        (0..d)
                            .map(|i| {
                                at(&c.q, b, t, c.queries, head, i) * at(&c.k, b, j, c.keys, head, i)
                            })
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = weights.iter().sum();
                for i in 0..d {
                    let o = (0..c.keys)
                        .map(|j| weights[j] * at(&c.v, b, j, c.keys, head, i))
                        .sum::<f64>();
                    out[((b * c.queries + t) * h + head) * d + i] = o / sum;
                }
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn segmented_attention_equals_contiguous_attention(c in case()) {
        let q = tensor(&c.q, (c.batch, c.queries, c.heads, c.head_dim));
        let k = tensor(&c.k, (c.batch, c.keys, c.heads, c.head_dim));
        let v = tensor(&c.v, (c.batch, c.keys, c.heads, c.head_dim));
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let contiguous = values(&attention_contiguous(&q, &k, &v, scale).unwrap());

        // One segment, a narrow at an offset of a larger buffer: exact.
        let padded_k = Tensor::cat(&[&k, &k], 1).unwrap();
        let padded_v = Tensor::cat(&[&v, &v], 1).unwrap();
        let one_k = split(&padded_k.narrow(1, c.keys, c.keys).unwrap(), &[]);
        let one_v = split(&padded_v.narrow(1, c.keys, c.keys).unwrap(), &[]);
        let one = values(&attention(&q, &one_k, &one_v, scale).unwrap());
        prop_assert!(
            one.iter().zip(&contiguous).all(|(a, b)| a.to_bits() == b.to_bits()),
            "one segment differs"
        );

        // Any split: within the tolerance.
        let segmented = values(&attention(&q, &split(&k, &c.cuts), &split(&v, &c.cuts), scale).unwrap());
        for (i, (a, b)) in segmented.iter().zip(&contiguous).enumerate() {
            prop_assert!((a - b).abs() <= TOLERANCE, "element {i}: {a} vs {b} with cuts {:?}", c.cuts);
        }

        // And both are softmax attention.
        for (i, (a, e)) in contiguous.iter().zip(scalar(&c, scale)).enumerate() {
            prop_assert!((*a as f64 - e).abs() <= 1e-4, "element {i}: {a} vs scalar {e}");
        }
    }
}

#[test]
fn attention_over_no_key_is_zero() {
    let q = Tensor::ones((1, 2, 1, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    let empty = Tensor::zeros((1, 0, 1, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    let out = attention_contiguous(&q, &empty, &empty, 0.5).unwrap();
    assert_eq!(out.dims(), &[1, 2, 1, 4]);
    assert!(values(&out).iter().all(|x| *x == 0.0));
}
