//! The ring append against the dense append (roll) and the chunk-write
//! bound, and the ring view's materialization against the dense zero-copy
//! view, at two production shapes, bf16, B = 1:
//!
//! - LingBot-World: H = 40, D = 128, chunk n = 4 680, sink S = 4 680,
//!   C = 70 200 (each buffer 719 MB);
//! - Self-Forcing: H = 12, D = 128, n = 4 680, S = 0, C = 32 760.
//!
//! Each cache is filled to capacity first, so every measured append
//! evicts one chunk. Per shape:
//!
//! - `dense_append`: `DenseCache::write` of a chunk at `G` (evict-shift of
//!   `C − S − n` rows, then the chunk), view included (zero-copy);
//! - `ring_append`: `RingCache::write_segments` of the same chunk (the
//!   chunk's rows only; the view is zero-copy segments);
//! - `chunk_write`: the bound, `copy_from_slice` of the chunk's K and V
//!   bytes into capacity-sized buffers at the ring's rotating offset;
//! - `dense_view`: `DenseCache::view` (a `narrow`);
//! - `ring_materialize`: `RingCache::view_segments` then
//!   `to_contiguous_into` caller-owned K and V buffers: what a consumer
//!   that needs one contiguous tensor pays.
//!
//! The table at the end reads the medians back from criterion's
//! `estimates.json` and prints the ratios measured in this run (targets:
//! dense / ring ≥ 8 and ring / bound ≤ 1.3 at the LingBot shape).
//!
//! `cargo bench -p kvcache --bench ring` (a few minutes; about 3 GB of
//! memory at the LingBot shape). Run it without `RUST_BACKTRACE`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use criterion::{Criterion, SamplingMode};
use half::bf16;
use kvcache::{DenseCache, KvCache, RingCache};
use kvmodel::{Config, Dtype, Write};

/// One benchmarked shape.
struct Shape {
    name: &'static str,
    heads: usize,
    chunk: usize,
    sink: usize,
    capacity: usize,
}

const HEAD_DIM: usize = 128;

const SHAPES: [Shape; 2] = [
    Shape {
        name: "lingbot_h40_n4680_s4680_c70200",
        heads: 40,
        chunk: 4680,
        sink: 4680,
        capacity: 70200,
    },
    Shape {
        name: "selfforcing_h12_n4680_s0_c32760",
        heads: 12,
        chunk: 4680,
        sink: 0,
        capacity: 32760,
    },
];

const IDS: [&str; 5] = [
    "dense_append",
    "ring_append",
    "chunk_write",
    "dense_view",
    "ring_materialize",
];

fn config(shape: &Shape) -> Config {
    let mut config = Config::dense(shape.capacity);
    config.heads = shape.heads;
    config.head_dim = HEAD_DIM;
    config.sink = shape.sink;
    config.dtype = Dtype::Bf16;
    config
}

/// Writes chunks at `G` until the cache is full; returns the next start.
fn fill(cache: &mut dyn KvCache, payload: &Tensor, shape: &Shape) -> i64 {
    let mut start = 0i64;
    while cache.global_end() < shape.capacity as u64 {
        cache
            .write(&Write::new(start, shape.chunk as i64), payload, payload)
            .unwrap();
        start += shape.chunk as i64;
    }
    start
}

fn bench_shape(c: &mut Criterion, shape: &Shape) {
    let config = config(shape);
    let row = shape.heads * HEAD_DIM;
    let n = shape.chunk as i64;
    let payload = Tensor::ones(
        (1, shape.chunk, shape.heads, HEAD_DIM),
        DType::BF16,
        &Device::Cpu,
    )
    .unwrap();
    let mut group = c.benchmark_group(shape.name);
    group.sampling_mode(SamplingMode::Flat);

    {
        let mut dense = DenseCache::new(&config, &Device::Cpu).unwrap();
        let mut start = fill(&mut dense, &payload, shape);
        group.bench_function("dense_append", |b| {
            b.iter(|| {
                let view = dense
                    .write(&Write::new(start, n), &payload, &payload)
                    .unwrap();
                black_box(&view);
                drop(view);
                start += n;
            })
        });
        group.bench_function("dense_view", |b| {
            b.iter(|| black_box(dense.view().unwrap()))
        });
    }
    {
        let mut ring = RingCache::new(&config, &Device::Cpu).unwrap();
        let mut start = fill(&mut ring, &payload, shape);
        group.bench_function("ring_append", |b| {
            b.iter(|| {
                let view = ring
                    .write_segments(&Write::new(start, n), &payload, &payload)
                    .unwrap();
                assert!(view.k.zero_copy());
                black_box(&view);
                drop(view);
                start += n;
            })
        });
        let dims = (1, shape.capacity, shape.heads, HEAD_DIM);
        let mut k = Tensor::zeros(dims, DType::BF16, &Device::Cpu).unwrap();
        let mut v = Tensor::zeros(dims, DType::BF16, &Device::Cpu).unwrap();
        group.bench_function("ring_materialize", |b| {
            b.iter(|| {
                let view = ring.view_segments().unwrap();
                view.k.to_contiguous_into(&mut k).unwrap();
                view.v.to_contiguous_into(&mut v).unwrap();
            })
        });
    }
    {
        let mut k = vec![bf16::ZERO; shape.capacity * row];
        let mut v = vec![bf16::ZERO; shape.capacity * row];
        let chunk = vec![bf16::ONE; shape.chunk * row];
        let ring_slots = shape.capacity - shape.sink;
        let mut at = 0usize;
        group.bench_function("chunk_write", |b| {
            b.iter(|| {
                // The chunk's rows at the ring's rotating offset, wrapping
                // once when it crosses the top, like the ring append.
                let first = shape.chunk.min(ring_slots - at);
                for buffer in [&mut k, &mut v] {
                    let base = (shape.sink + at) * row;
                    buffer[base..base + first * row].copy_from_slice(&chunk[..first * row]);
                    let rest = shape.chunk - first;
                    let base = shape.sink * row;
                    buffer[base..base + rest * row].copy_from_slice(&chunk[first * row..]);
                }
                at = (at + shape.chunk) % ring_slots;
                black_box((&k, &v));
            })
        });
    }
    group.finish();
}

/// The median of one criterion benchmark, in nanoseconds.
fn median_ns(dir: &Path, group: &str, id: &str) -> Option<f64> {
    let path = dir.join(group).join(id).join("new").join("estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn main() {
    let dir = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion")
        });
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .output_directory(&dir)
        .configure_from_args();
    for shape in &SHAPES {
        bench_shape(&mut c, shape);
    }
    c.final_summary();
    println!(
        "\n{:<32} {:>10} {:>10} {:>10} {:>11} {:>10} {:>9} {:>9} {:>9}",
        "shape (median ms)",
        "dense app",
        "ring app",
        "bound",
        "dense view",
        "ring mat.",
        "dense/ring",
        "ring/bound",
        "mat/view"
    );
    for shape in &SHAPES {
        let medians: Option<Vec<f64>> = IDS
            .iter()
            .map(|id| median_ns(&dir, shape.name, id))
            .collect();
        let Some(m) = medians else { continue };
        let ms = |ns: f64| ns / 1e6;
        println!(
            "{:<32} {:>10.3} {:>10.3} {:>10.3} {:>11.4} {:>10.3} {:>9.2}x {:>9.2}x {:>9.2}x",
            shape.name,
            ms(m[0]),
            ms(m[1]),
            ms(m[2]),
            ms(m[3]),
            ms(m[4]),
            m[0] / m[1],
            m[1] / m[2],
            m[4] / m[3]
        );
    }
}
