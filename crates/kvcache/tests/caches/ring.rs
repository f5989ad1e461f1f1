//! `RingCache`'s own promises, beyond the contract the lockstep suites
//! check (`cargo test --test suites lockstep_suites::ring`): history never moves,
//! an append in the rolling steady state lands in at most two slot ranges,
//! views are zero-copy segments, and materializing them checks its
//! destination.

use candle_core::{DType, Device, Tensor};
use kvcache::{Error, Internals, KvCache, RingCache, Slot};
use kvmodel::{Config, Write};

/// `[B, n, H, D]` rows whose values say their position: row `t` of a write
/// at `start` holds `start + t` everywhere.
fn rows(config: &Config, start: u64, n: usize) -> Tensor {
    let per_row = config.heads * config.head_dim;
    let mut data = Vec::with_capacity(config.batch * n * per_row);
    for _ in 0..config.batch {
        for t in 0..n {
            data.extend(std::iter::repeat_n((start + t as u64) as f32, per_row));
        }
    }
    Tensor::from_vec(
        data,
        (config.batch, n, config.heads, config.head_dim),
        &Device::Cpu,
    )
    .unwrap()
}

fn append(cache: &mut RingCache, start: u64, n: usize) {
    let config = cache.config().clone();
    let payload = rows(&config, start, n);
    cache
        .write(&Write::new(start as i64, n as i64), &payload, &payload)
        .unwrap();
}

fn slot_of(cache: &RingCache, position: u64) -> Option<usize> {
    cache
        .layout()
        .slots
        .iter()
        .position(|s| *s == Slot::Hot(position))
}

/// Slot ranges a set of positions occupies, merged.
fn slot_ranges(cache: &RingCache, positions: std::ops::Range<u64>) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for p in positions {
        let slot = slot_of(cache, p).expect("resident");
        match out.last_mut() {
            Some(last) if last.end == slot => last.end += 1,
            _ => out.push(slot..slot + 1),
        }
    }
    out
}

fn rolling_config() -> Config {
    let mut config = Config::dense(20);
    config.sink = 3;
    config.batch = 2;
    config.heads = 2;
    config.head_dim = 4;
    config
}

#[test]
fn history_never_moves_and_appends_land_in_at_most_two_slot_ranges() {
    let config = rolling_config();
    let mut cache = RingCache::new(&config, &Device::Cpu).unwrap();
    let chunk = 3;
    let mut wrapped = false;
    for i in 0..20u64 {
        let before = cache.layout().slots;
        let start = i * chunk as u64;
        append(&mut cache, start, chunk);
        // Every position resident before and after keeps its slot.
        for (slot, held) in before.iter().enumerate() {
            if let Slot::Hot(p) = held {
                if let Some(now) = slot_of(&cache, *p) {
                    assert_eq!(now, slot, "position {p} moved at append {i}");
                }
            }
        }
        let ranges = slot_ranges(&cache, start..start + chunk as u64);
        assert!(ranges.len() <= 2, "append {i} landed in {ranges:?}");
        wrapped |= ranges.len() == 2;
        // The sink never moves and stays visible.
        for p in 0..3 {
            assert_eq!(slot_of(&cache, p), Some(p as usize));
        }
        let view = cache.view_segments().unwrap();
        assert!(view.k.zero_copy() && view.v.zero_copy());
        assert!(view.k.parts.len() <= 3, "{:?}", view.k.parts.len());
        assert_eq!(view.positions.len(), 20.min(start as usize + chunk));
    }
    assert!(wrapped, "the ring never wrapped past the top of the buffer");
}

#[test]
fn eviction_and_rewind_change_indices_only() {
    let config = rolling_config();
    let mut cache = RingCache::new(&config, &Device::Cpu).unwrap();
    for i in 0..8 {
        append(&mut cache, i * 3, 3);
    }
    let before = cache.layout().slots;
    cache.evict(4).unwrap();
    cache.rewind(22).unwrap();
    let after = cache.layout().slots;
    for (slot, held) in after.iter().enumerate() {
        if let Slot::Hot(_) = held {
            assert_eq!(before[slot], *held, "slot {slot} changed content");
        }
    }
    // The next append reuses the rewound slots right after position 21.
    let next = slot_of(&cache, 21).unwrap() + 1;
    append(&mut cache, 22, 1);
    assert_eq!(slot_of(&cache, 22), Some(next % 20));
}

#[test]
fn segments_concatenate_to_the_view_and_materialize_in_place() {
    let config = rolling_config();
    let mut cache = RingCache::new(&config, &Device::Cpu).unwrap();
    for i in 0..9 {
        append(&mut cache, i * 3, 3);
    }
    let view = cache.view_segments().unwrap();
    assert!(
        view.k.parts.len() >= 2,
        "the view should be split by the wrap"
    );
    let expected: Vec<f32> = {
        let mut out = Vec::new();
        for _ in 0..config.batch {
            for p in &view.positions {
                out.extend(std::iter::repeat_n(
                    *p as f32,
                    config.heads * config.head_dim,
                ));
            }
        }
        out
    };
    let mut dst = Tensor::zeros(view.k.shape.to_vec(), DType::F32, &Device::Cpu).unwrap();
    view.k.to_contiguous_into(&mut dst).unwrap();
    assert_eq!(
        dst.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        expected
    );
    assert_eq!(
        view.k
            .to_contiguous()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        expected
    );

    // Wrong shape, dtype or a non-contiguous destination: typed error,
    // destination untouched.
    let mut short = Tensor::zeros((2, 3, 2, 4), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        view.k.to_contiguous_into(&mut short),
        Err(Error::Destination { .. })
    ));
    let mut half = Tensor::zeros(view.k.shape.to_vec(), DType::F16, &Device::Cpu).unwrap();
    assert!(matches!(
        view.k.to_contiguous_into(&mut half),
        Err(Error::Destination { .. })
    ));
    let [b, n, h, d] = view.k.shape;
    let mut strided = Tensor::zeros((b, n, d, h), DType::F32, &Device::Cpu)
        .unwrap()
        .transpose(2, 3)
        .unwrap();
    let err = view.k.to_contiguous_into(&mut strided).unwrap_err();
    assert!(err.to_string().contains("not contiguous"), "{err}");
    assert!(short
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .all(|x| *x == 0.0));
}

#[test]
fn growth_relays_out_once_per_doubling() {
    let mut config = Config::dense(4);
    config.sink = 1;
    config.growth = true;
    let mut cache = RingCache::new(&config, &Device::Cpu).unwrap();
    let mut capacities = Vec::new();
    for i in 0..10 {
        append(&mut cache, i * 3, 3);
        capacities.push(cache.capacity());
    }
    capacities.dedup();
    assert_eq!(capacities, vec![4, 8, 16, 32]);
    // After growth the rows are compacted in position order.
    let layout = cache.layout().slots;
    for (slot, held) in layout.iter().take(30).enumerate() {
        assert_eq!(*held, Slot::Hot(slot as u64));
    }
    let view = cache.view_segments().unwrap();
    assert_eq!(view.k.parts.len(), 1);
}
