//! Generic path vs in-place path, measured in one run on the CPU.
//!
//! - the dense append step at the LingBot shape (B=1, H=40, D=128, bf16,
//!   n = S = 4680, C = 14040): evict-shift the tail, copy the chunk, take
//!   the view, for K and V;
//! - packed int8 quantization of one chunk of that shape, then
//!   dequantization of it.
//!
//! Each step runs a few warm-up rounds, then `ROUNDS` timed rounds; the
//! medians and the generic / in-place ratio are printed. The generic ratio
//! here is what a GPU run (`scripts/gpu-check`) is compared with.
//!
//! `cargo bench -p kvcache --bench paths` (under a minute).

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use kvcache::{quant, DenseCache, KvCache, Path};
use kvmodel::{Config, Dtype, Quant, Write};

const HEADS: usize = 40;
const HEAD_DIM: usize = 128;
const CHUNK: usize = 4680;
const CAPACITY: usize = 14040;
const ROUNDS: usize = 7;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn timed(mut step: impl FnMut()) -> Duration {
    step();
    median(
        (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                step();
                t.elapsed()
            })
            .collect(),
    )
}

fn append_step(path: Path) -> Duration {
    let mut config = Config::dense(CAPACITY);
    config.heads = HEADS;
    config.head_dim = HEAD_DIM;
    config.sink = CHUNK;
    config.dtype = Dtype::Bf16;
    let mut cache = DenseCache::with_path(&config, &Device::Cpu, path).unwrap();
    let payload = Tensor::ones((1, CHUNK, HEADS, HEAD_DIM), DType::BF16, &Device::Cpu).unwrap();
    let mut start = 0i64;
    let mut append = || {
        let request = Write::new(start, CHUNK as i64);
        std::hint::black_box(
            cache
                .write(&request, &payload, &payload)
                .unwrap()
                .k
                .dims4()
                .unwrap(),
        );
        start += CHUNK as i64;
    };
    for _ in 0..CAPACITY / CHUNK {
        append();
    }
    timed(append)
}

fn quant_step(path: Path) -> Duration {
    let x = Tensor::randn(0f32, 1.0, (1, CHUNK, HEADS, HEAD_DIM), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    timed(|| {
        let (codes, back) = match path {
            Path::InPlace => {
                let q = quant::quantize(&x, Quant::Int8).unwrap();
                let back = quant::dequantize(&q, DType::BF16, &Device::Cpu).unwrap();
                (q, back)
            }
            Path::Generic => {
                let q = quant::generic::quantize(&x, Quant::Int8).unwrap();
                let back = quant::generic::dequantize(&q, DType::BF16).unwrap();
                (q, back)
            }
        };
        std::hint::black_box((codes.bytes(), back.dims4().unwrap()));
    })
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we ignore.
    let bytes = 2 * CHUNK * HEADS * HEAD_DIM * 2;
    println!(
        "{:<28} {:>12} {:>12} {:>8}",
        "step", "in-place", "generic", "ratio"
    );
    for (name, step) in [
        (
            "dense append (LingBot)",
            append_step as fn(Path) -> Duration,
        ),
        ("packed int8 quant+dequant", quant_step),
    ] {
        let (a, b) = (step(Path::InPlace), step(Path::Generic));
        println!(
            "{name:<28} {:>10.2}ms {:>10.2}ms {:>7.2}x",
            a.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            b.as_secs_f64() / a.as_secs_f64()
        );
    }
    println!(
        "(chunk of K+V: {:.1} MB; medians of {ROUNDS} rounds)",
        bytes as f64 / 1e6
    );
}
