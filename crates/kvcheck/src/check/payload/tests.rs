use super::*;
use crate::codec::tensor_values;

#[test]
fn elements_are_exact_in_their_dtype_and_nonzero() {
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        for writer in 0..50 {
            let id = RowId {
                writer,
                position: writer * 3,
                batch: 0,
                head: 1,
            };
            let x = element(7, dtype, Kv::K, id, 2);
            assert!(x.is_finite() && x != 0.0);
            assert_eq!(kvmodel::quant::round_to_dtype(x, dtype), x);
        }
    }
}

#[test]
fn row_bits_are_the_elements_in_the_dtype() {
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        for n in 0..400u64 {
            let id = RowId {
                writer: n * 7 % 13,
                position: n,
                batch: (n % 2) as usize,
                head: (n % 5) as usize,
            };
            let seed = n % 3;
            let mut dims = 0;
            row_bits(seed, dtype, 9, id, |dim, k, v| {
                for (kv, bits) in [(Kv::K, k), (Kv::V, v)] {
                    let x = element(seed, dtype, kv, id, dim);
                    assert_eq!(bits, dtype_bits(x, dtype));
                    assert_eq!(bits_value(bits, dtype).to_bits(), x.to_bits());
                }
                dims += 1;
            });
            assert_eq!(dims, 9);
        }
    }
}

#[test]
fn paired_tensors_equal_the_single_ones() {
    let mut config = Config::dense(4);
    (config.heads, config.head_dim, config.batch, config.seed) = (4, 3, 2, 9);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        config.dtype = dtype;
        let (k, v) = write_tensors(&config, &Device::Cpu, 5, 2, 3, 1..3).unwrap();
        for (kv, t) in [(Kv::K, k), (Kv::V, v)] {
            let single = write_tensor(&config, &Device::Cpu, kv, 5, 2, 3, 1..3).unwrap();
            assert_eq!(t.dims(), single.dims());
            let bits = |t: &Tensor| -> Vec<u32> {
                tensor_values(t)
                    .unwrap()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect()
            };
            assert_eq!(bits(&t), bits(&single));
        }
    }
}

/// The trace's seed drives the payload of every dtype (docs/kvtrace.md
/// `seed`): the same seed gives the same tensors, another seed others.
#[test]
fn the_seed_drives_the_payload_of_every_dtype() {
    let mut config = Config::dense(8);
    (config.heads, config.head_dim, config.batch) = (2, 4, 2);
    let bits = |config: &Config| -> Vec<u32> {
        let (k, v) = write_tensors(config, &Device::Cpu, 3, 1, 4, 0..2).unwrap();
        [k, v]
            .iter()
            .flat_map(|t| tensor_values(t).unwrap())
            .map(f32::to_bits)
            .collect()
    };
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        config.dtype = dtype;
        let runs: Vec<Vec<u32>> = [0, 0, 1, 2]
            .iter()
            .map(|&seed| {
                bits(&Config {
                    seed,
                    ..config.clone()
                })
            })
            .collect();
        assert_eq!(
            runs[0], runs[1],
            "{dtype:?}: the same seed, the same payload"
        );
        assert_ne!(runs[0], runs[2], "{dtype:?}: seeds 0 and 1");
        assert_ne!(runs[2], runs[3], "{dtype:?}: seeds 1 and 2");
        // Few elements in common: the seed reaches every value.
        let same = runs[0].iter().zip(&runs[2]).filter(|(a, b)| a == b).count();
        assert!(same < runs[0].len() / 4, "{dtype:?}: {same} equal elements");
    }
}

#[test]
fn elements_differ_by_every_coordinate() {
    let id = RowId {
        writer: 1,
        position: 2,
        batch: 0,
        head: 0,
    };
    let base = element(0, Dtype::F32, Kv::K, id, 0);
    assert_ne!(base, element(1, Dtype::F32, Kv::K, id, 0));
    assert_ne!(base, element(0, Dtype::F32, Kv::V, id, 0));
    assert_ne!(base, element(0, Dtype::F32, Kv::K, id, 1));
    assert_ne!(
        base,
        element(0, Dtype::F32, Kv::K, RowId { writer: 2, ..id }, 0)
    );
    assert_ne!(
        base,
        element(0, Dtype::F32, Kv::K, RowId { position: 3, ..id }, 0)
    );
    assert_ne!(
        base,
        element(0, Dtype::F32, Kv::K, RowId { batch: 1, ..id }, 0)
    );
    assert_ne!(
        base,
        element(0, Dtype::F32, Kv::K, RowId { head: 1, ..id }, 0)
    );
}

#[test]
fn tensors_round_trip_exactly() {
    let mut config = Config::dense(4);
    config.heads = 3;
    config.head_dim = 5;
    config.batch = 2;
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        config.dtype = dtype;
        let t = write_tensor(&config, &Device::Cpu, Kv::V, 3, 1, 2, 1..3).unwrap();
        assert_eq!(t.dims(), &[2, 2, 2, 5]);
        let values = tensor_values(&t).unwrap();
        let id = RowId {
            writer: 3,
            position: 2,
            batch: 1,
            head: 2,
        };
        // [batch 1, row 1, head index 1 (head 2)] in [2, 2, 2, 5].
        let offset = ((2 + 1) * 2 + 1) * 5;
        assert_eq!(
            &values[offset..offset + 5],
            row(&config, Kv::V, id).as_slice()
        );
    }
}
