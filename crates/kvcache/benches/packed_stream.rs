//! A LingBot-World-like stream through the packed cache.
//!
//! B = 1, H = 40, D = 128, bf16, chunks of 4680 tokens, C = 70200 (15
//! chunks), S = 4680 (the first chunk is the sink), 30 chunks appended once
//! outside the timed loop. Printed: resident bytes of packed int8 / int4
//! against the dense `2·B·C·H·D·2` bytes, next to docs/contract.md §6's prediction;
//! then criterion times the per-step view of the packed cache against a
//! dense-equivalent view.
//!
//! `DenseCache` is not on this branch, so the dense-equivalent view is built
//! from one preallocated dense `[B, C, H, D]` tensor per K and V by a
//! `narrow` of the sink and of the window plus a `cat` (the copy a dense
//! rolling cache's view makes once its ring has wrapped).

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use kvcache::{Internals, KvCache, PackedCache};
use kvmodel::{Config, Dtype, PackedPolicy, Quant, Write};

const B: usize = 1;
const H: usize = 40;
const D: usize = 128;
const CHUNK: usize = 4680;
const CAPACITY: usize = 70200;
const SINK: usize = 4680;
const CHUNKS: usize = 30;

fn config(quant: Quant) -> Config {
    let mut config = Config::packed(CAPACITY);
    config.batch = B;
    config.heads = H;
    config.head_dim = D;
    config.dtype = Dtype::Bf16;
    config.sink = SINK;
    config.packed = Some(PackedPolicy {
        keep_recent_chunks: 1,
        quant,
        pack_sink: false,
    });
    config
}

/// The cache after the 30-chunk stream (each chunk appended and rewritten
/// once, the denoise pattern, with a zero recent window so that the fill does
/// not assemble full views).
fn filled(quant: Quant, k: &Tensor, v: &Tensor) -> PackedCache {
    let mut cache = PackedCache::new(&config(quant), &Device::Cpu).unwrap();
    for chunk in 0..CHUNKS {
        let write = Write {
            start: (chunk * CHUNK) as i64,
            len: CHUNK as i64,
            heads: None,
            recent_window: Some(0),
        };
        cache.write(&write, k, v).unwrap();
        cache.write(&write, k, v).unwrap();
    }
    cache
}

/// docs/contract.md §6's prediction of the packed/dense byte ratio at steady state:
/// hot rows are the sink, the current and the kept chunk, cold rows the rest.
fn predicted_ratio(quant: Quant) -> f64 {
    let hot_row = (D * 2) as f64;
    let cold_row = match quant {
        Quant::None => hot_row,
        Quant::Int8 => (D + 4) as f64,
        Quant::Int4 => (D.div_ceil(2) + 4) as f64,
    };
    let hot = (SINK + 2 * CHUNK) as f64;
    let cold = (CAPACITY - SINK - 2 * CHUNK) as f64;
    (hot * hot_row + cold * cold_row) / (CAPACITY as f64 * hot_row)
}

fn packed_stream(c: &mut Criterion) {
    let device = Device::Cpu;
    let k = Tensor::randn(0f32, 1.0, (B, CHUNK, H, D), &device)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let v = Tensor::randn(0f32, 1.0, (B, CHUNK, H, D), &device)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let dense_bytes = (2 * B * CAPACITY * H * D * 2) as f64;

    let mut caches = Vec::new();
    for quant in [Quant::Int8, Quant::Int4] {
        let started = Instant::now();
        let cache = filled(quant, &k, &v);
        let bytes = cache.resident_bytes() as f64;
        println!(
            "packed {:<4} resident {:>6.1} MiB / dense {:>6.1} MiB = {:.4} (SPEC §6 predicts {:.4}); fill of {CHUNKS} chunks took {:.1?}",
            quant.name(),
            bytes / (1 << 20) as f64,
            dense_bytes / (1 << 20) as f64,
            bytes / dense_bytes,
            predicted_ratio(quant),
            started.elapsed()
        );
        caches.push((quant, cache));
    }

    // The dense-equivalent: one preallocated [B, C, H, D] buffer per K and V.
    let dense_k = Tensor::zeros((B, CAPACITY, H, D), DType::BF16, &device).unwrap();
    let dense_v = Tensor::zeros((B, CAPACITY, H, D), DType::BF16, &device).unwrap();
    let dense_view = || {
        let k = Tensor::cat(
            &[
                dense_k.narrow(1, 0, SINK)?,
                dense_k.narrow(1, SINK, CAPACITY - SINK)?,
            ],
            1,
        )?;
        let v = Tensor::cat(
            &[
                dense_v.narrow(1, 0, SINK)?,
                dense_v.narrow(1, SINK, CAPACITY - SINK)?,
            ],
            1,
        )?;
        candle_core::Result::Ok((k, v))
    };

    let mut group = c.benchmark_group("view");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(5));
    group.bench_function("dense_narrow_cat", |b| b.iter(|| dense_view().unwrap()));
    for (quant, cache) in &caches {
        group.bench_function(format!("packed_{}", quant.name()), |b| {
            b.iter(|| cache.view().unwrap().k.dims()[1])
        });
    }
    group.finish();

    // One-run ratios of the per-step view, measured back to back.
    let time = |f: &dyn Fn()| {
        f();
        let started = Instant::now();
        f();
        started.elapsed().as_secs_f64()
    };
    let dense = time(&|| {
        dense_view().unwrap();
    });
    println!("view: dense narrow+cat {:.1} ms", dense * 1e3);
    for (quant, cache) in &caches {
        let packed = time(&|| {
            let view = cache.view().unwrap();
            assert_eq!(view.positions.len(), CAPACITY);
        });
        println!(
            "view: packed {:<4} {:.1} ms = {:.2}x the dense view",
            quant.name(),
            packed * 1e3,
            packed / dense
        );
    }
}

criterion_group!(benches, packed_stream);
criterion_main!(benches);
