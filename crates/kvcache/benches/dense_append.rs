//! The dense append step in steady state against its memcpy bound.
//!
//! One step appends a chunk of `n` positions to a full cache with `S = n`
//! sink positions: evict-shift the tail down by `n` slots, copy the chunk
//! into the freed slots, and take the view (a zero-copy `narrow`), for K and
//! V. The bound does the same bytes with `copy_within` + `copy_from_slice`
//! on plain `Vec` buffers. Criterion measures both; the table at the end
//! reads the two medians back from criterion's `estimates.json` and prints
//! their ratio (target: at most 1.2).
//!
//! `cargo bench -p kvcache --bench dense_append` (about a minute).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::{Device, Tensor};
use criterion::{Criterion, Throughput};
use half::bf16;
use kvcache::{candle_dtype, DenseCache, KvCache};
use kvmodel::{Config, Dtype, Write};

/// One benchmarked shape.
struct Shape {
    name: &'static str,
    heads: usize,
    head_dim: usize,
    chunk: usize,
    capacity: usize,
    dtype: Dtype,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "h12_d128_n1560_c9360_bf16",
        heads: 12,
        head_dim: 128,
        chunk: 1560,
        capacity: 9360,
        dtype: Dtype::Bf16,
    },
    Shape {
        name: "h12_d128_n1560_c9360_f32",
        heads: 12,
        head_dim: 128,
        chunk: 1560,
        capacity: 9360,
        dtype: Dtype::F32,
    },
    Shape {
        name: "h40_d128_n4680_c14040_bf16",
        heads: 40,
        head_dim: 128,
        chunk: 4680,
        capacity: 14040,
        dtype: Dtype::Bf16,
    },
];

/// The memcpy bound of one step on `Vec<T>` buffers.
fn memcpy_step<T: Copy>(k: &mut [T], v: &mut [T], chunk: &[T], shape: &Shape) {
    let row = shape.heads * shape.head_dim;
    let (s, n, c) = (shape.chunk, shape.chunk, shape.capacity);
    for buffer in [k, v] {
        buffer.copy_within((s + n) * row..c * row, s * row);
        buffer[(c - n) * row..c * row].copy_from_slice(chunk);
    }
}

fn bench_shape<T: Copy + Default>(c: &mut Criterion, shape: &Shape) {
    let row = shape.heads * shape.head_dim;
    let mut config = Config::dense(shape.capacity);
    config.heads = shape.heads;
    config.head_dim = shape.head_dim;
    config.sink = shape.chunk;
    config.dtype = shape.dtype;
    let dtype = candle_dtype(shape.dtype);
    let payload = Tensor::ones(
        (1, shape.chunk, shape.heads, shape.head_dim),
        dtype,
        &Device::Cpu,
    )
    .unwrap();
    let mut cache = DenseCache::new(&config, &Device::Cpu).unwrap();
    // Fill to capacity: from here on every append evicts one chunk.
    let mut start = 0i64;
    while cache.global_end() < shape.capacity as u64 {
        cache
            .write(&Write::new(start, shape.chunk as i64), &payload, &payload)
            .unwrap();
        start += shape.chunk as i64;
    }
    let mut k = vec![T::default(); shape.capacity * row];
    let mut v = vec![T::default(); shape.capacity * row];
    let chunk = vec![T::default(); shape.chunk * row];

    let mut group = c.benchmark_group(shape.name);
    let moved = 2 * (shape.capacity - shape.chunk) * row * std::mem::size_of::<T>();
    group.throughput(Throughput::Bytes(moved as u64));
    group.bench_function("cache", |b| {
        b.iter(|| {
            let view = cache
                .write(&Write::new(start, shape.chunk as i64), &payload, &payload)
                .unwrap();
            assert!(view.zero_copy);
            black_box(&view);
            drop(view);
            start += shape.chunk as i64;
        })
    });
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            memcpy_step(&mut k, &mut v, &chunk, shape);
            black_box((&k, &v));
        })
    });
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
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .output_directory(&dir)
        .configure_from_args();
    for shape in &SHAPES {
        match shape.dtype {
            Dtype::F32 => bench_shape::<f32>(&mut c, shape),
            Dtype::F16 | Dtype::Bf16 => bench_shape::<bf16>(&mut c, shape),
        }
    }
    c.final_summary();
    println!(
        "\n{:<28} {:>12} {:>12} {:>7}",
        "shape", "cache ms", "memcpy ms", "ratio"
    );
    for shape in &SHAPES {
        let (Some(cache), Some(bound)) = (
            median_ns(&dir, shape.name, "cache"),
            median_ns(&dir, shape.name, "memcpy"),
        ) else {
            continue;
        };
        println!(
            "{:<28} {:>12.3} {:>12.3} {:>7.3}",
            shape.name,
            cache / 1e6,
            bound / 1e6,
            cache / bound
        );
    }
}
