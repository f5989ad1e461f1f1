//! Append throughput of the caches on every available device, printed next
//! to a device-to-device copy of the same bytes measured in the same run.
//! Nothing here asserts on time: the speed goals are the ratios these
//! lines print, which `scripts/gpu-check run` collects into its report.
//!
//! Per device and shape (bf16, B = 1, D = 128), each cache filled to
//! capacity first so every measured append evicts:
//!
//! - `copy`: `slice_set` of a chunk's K and V into capacity-sized buffers
//!   at a rotating offset, the bytes any append has to write;
//! - `dense append (roll)`: `DenseCache::write` of a chunk at `G`, which
//!   shifts the `C − S − n` evictable rows down before writing the chunk,
//!   on every path the device runs (view included: a zero-copy `narrow`);
//! - `ring append`: `RingCache::write_segments` of the same chunk, which
//!   writes the chunk's rows only;
//! - `op rate`: one-token appends into a small full cache, where the cost
//!   per op (kernel launches, on a GPU) dominates.
//!
//! Appends alternate between two different chunks, and after each timed
//! loop the view's newest `n` rows must equal the chunk appended last, bit
//! for bit, so a device that is fast because it writes the wrong rows (or
//! none) fails here.
//!
//! GB/s count the chunk's K and V bytes (the `rows` figure of the roll
//! counts every row it writes); the clock is read only after
//! `Device::synchronize`, so queued GPU work is included. The small shape
//! runs everywhere (under a couple of seconds on the CPU in the test
//! profile); the LingBot-World shape runs on CUDA only.

mod device;

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use kvcache::{DenseCache, KvCache, Path, RingCache};
use kvmodel::{Config, Dtype, Write};

const HEAD_DIM: usize = 128;
/// bf16.
const BYTES_PER_VALUE: usize = 2;

/// One measured shape.
struct Shape {
    name: &'static str,
    heads: usize,
    chunk: usize,
    sink: usize,
    capacity: usize,
}

impl Shape {
    /// K and V bytes of `rows` rows.
    fn bytes(&self, rows: usize) -> f64 {
        (2 * rows * self.heads * HEAD_DIM * BYTES_PER_VALUE) as f64
    }
}

/// Runs on every device.
const SMALL: Shape = Shape {
    name: "h8_d128_n1024_c8192",
    heads: 8,
    chunk: 1024,
    sink: 0,
    capacity: 8192,
};

/// LingBot-World's rolling step (each buffer 719 MB): CUDA only.
const LINGBOT: Shape = Shape {
    name: "h40_d128_n4680_s4680_c70200",
    heads: 40,
    chunk: 4680,
    sink: 4680,
    capacity: 70200,
};

/// One-token appends into a full cache of this shape give the op rate.
const OP_RATE: Shape = Shape {
    name: "h8_d128_n1_c1024",
    heads: 8,
    chunk: 1,
    sink: 0,
    capacity: 1024,
};

fn config(shape: &Shape) -> Config {
    let mut config = Config::dense(shape.capacity);
    config.heads = shape.heads;
    config.head_dim = HEAD_DIM;
    config.dtype = Dtype::Bf16;
    config.sink = shape.sink;
    config
}

/// A `[1, n, H, D]` bf16 chunk on `device`.
fn chunk(shape: &Shape, device: &Device) -> Tensor {
    Tensor::rand(
        -1f32,
        1f32,
        (1, shape.chunk, shape.heads, HEAD_DIM),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(DType::BF16)
    .unwrap()
    .to_device(device)
    .unwrap()
}

/// Two different `[1, n, H, D]` K and V chunks, appended in turn.
struct Chunks {
    k: [Tensor; 2],
    v: [Tensor; 2],
    appended: usize,
}

impl Chunks {
    fn new(shape: &Shape, device: &Device) -> Chunks {
        Chunks {
            k: [chunk(shape, device), chunk(shape, device)],
            v: [chunk(shape, device), chunk(shape, device)],
            appended: 0,
        }
    }

    /// The K and V to append next.
    fn next(&mut self) -> (&Tensor, &Tensor) {
        let i = self.appended % 2;
        self.appended += 1;
        (&self.k[i], &self.v[i])
    }

    /// The K and V appended last.
    fn last(&self) -> (&Tensor, &Tensor) {
        let i = (self.appended + 1) % 2;
        (&self.k[i], &self.v[i])
    }
}

/// Seconds per call of `step`: one warm-up call, one timed call to size
/// the run, then as many calls as fit in `budget`, timed together. The
/// device is synchronized before every clock read.
fn seconds_per_call(device: &Device, budget: Duration, mut step: impl FnMut()) -> f64 {
    step();
    device.synchronize().unwrap();
    let started = Instant::now();
    step();
    device.synchronize().unwrap();
    let one = started.elapsed().as_secs_f64().max(1e-7);
    let calls = ((budget.as_secs_f64() / one) as usize).clamp(3, 10_000);
    let started = Instant::now();
    for _ in 0..calls {
        step();
    }
    device.synchronize().unwrap();
    started.elapsed().as_secs_f64() / calls as f64
}

/// Appends chunks at `G` until the cache is full and the next append
/// evicts.
fn fill(cache: &mut dyn KvCache, shape: &Shape, chunks: &mut Chunks) {
    while cache.global_end() < shape.capacity as u64 {
        append(cache, shape, chunks);
    }
}

fn append(cache: &mut dyn KvCache, shape: &Shape, chunks: &mut Chunks) {
    let g = cache.global_end() as i64;
    let (k, v) = chunks.next();
    cache
        .write(&Write::new(g, shape.chunk as i64), k, v)
        .unwrap();
}

fn ring_append(cache: &mut RingCache, shape: &Shape, chunks: &mut Chunks) {
    let g = cache.global_end() as i64;
    let (k, v) = chunks.next();
    cache
        .write_segments(&Write::new(g, shape.chunk as i64), k, v)
        .unwrap();
}

/// Panics unless the newest `n` rows of the cache's view hold the chunk
/// appended last.
fn assert_newest_rows(cache: &dyn KvCache, shape: &Shape, chunks: &Chunks, what: &str) {
    let (k, v) = chunks.last();
    let view = cache.view().unwrap();
    let len = view.positions.len();
    assert_eq!(
        view.global_end,
        *view.positions.last().unwrap() + 1,
        "{what}"
    );
    for (got, want, tensor) in [(&view.k, k, "k"), (&view.v, v, "v")] {
        let newest = got.narrow(1, len - shape.chunk, shape.chunk).unwrap();
        let differing = newest
            .ne(want)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(
            differing, 0.0,
            "{what}: {differing} values of {tensor} differ from the chunk just appended"
        );
    }
}

/// The paths of the dense cache a device runs.
fn paths(device: &Device) -> Vec<Path> {
    if device.is_cpu() {
        Path::ALL.to_vec()
    } else {
        vec![Path::Generic]
    }
}

/// Prints the copy, the dense roll on each path and the ring append at
/// `shape` on `device`.
fn measure(name: &str, device: &Device, shape: &Shape, budget: Duration) {
    let config = config(shape);
    let mut chunks = Chunks::new(shape, device);
    let chunk_bytes = shape.bytes(shape.chunk);
    let line = |what: &str, seconds: f64| {
        format!(
            "throughput {name} {} {what}: {:.3} ms, {:.0} ops/s, {:.2} GB/s",
            shape.name,
            seconds * 1e3,
            1.0 / seconds,
            chunk_bytes / seconds / 1e9
        )
    };

    let copy = {
        let dims = (1, shape.capacity, shape.heads, HEAD_DIM);
        let kb = Tensor::zeros(dims, DType::BF16, device).unwrap();
        let vb = Tensor::zeros(dims, DType::BF16, device).unwrap();
        let slots = shape.capacity / shape.chunk;
        let mut i = 0;
        seconds_per_call(device, budget, || {
            let offset = (i % slots) * shape.chunk;
            kb.slice_set(&chunks.k[i % 2], 1, offset).unwrap();
            vb.slice_set(&chunks.v[i % 2], 1, offset).unwrap();
            i += 1;
        })
    };
    println!("{}", line("copy", copy));

    for path in paths(device) {
        let mut cache = DenseCache::with_path(&config, device, path).unwrap();
        fill(&mut cache, shape, &mut chunks);
        let seconds = seconds_per_call(device, budget, || append(&mut cache, shape, &mut chunks));
        assert_newest_rows(&cache, shape, &chunks, "dense");
        let rows = shape.bytes(shape.capacity - shape.sink) / seconds / 1e9;
        println!(
            "{}, {:.2}x the copy (rows written {rows:.2} GB/s)",
            line(&format!("dense append (roll, {path} path)"), seconds),
            seconds / copy
        );
    }

    let mut ring = RingCache::new(&config, device).unwrap();
    fill(&mut ring, shape, &mut chunks);
    let seconds = seconds_per_call(device, budget, || {
        ring_append(&mut ring, shape, &mut chunks)
    });
    assert_newest_rows(&ring, shape, &chunks, "ring");
    println!(
        "{}, {:.2}x the copy",
        line("ring append", seconds),
        seconds / copy
    );
}

/// Prints one-token appends per second of each cache on `device`.
fn op_rate(name: &str, device: &Device, budget: Duration) {
    let shape = &OP_RATE;
    let config = config(shape);
    let mut chunks = Chunks::new(shape, device);
    let mut rates = Vec::new();
    for path in paths(device) {
        let mut cache = DenseCache::with_path(&config, device, path).unwrap();
        fill(&mut cache, shape, &mut chunks);
        let seconds = seconds_per_call(device, budget, || append(&mut cache, shape, &mut chunks));
        assert_newest_rows(&cache, shape, &chunks, "dense");
        rates.push(format!("dense ({path} path) {:.0} ops/s", 1.0 / seconds));
    }
    let mut ring = RingCache::new(&config, device).unwrap();
    fill(&mut ring, shape, &mut chunks);
    let seconds = seconds_per_call(device, budget, || {
        ring_append(&mut ring, shape, &mut chunks)
    });
    assert_newest_rows(&ring, shape, &chunks, "ring");
    rates.push(format!("ring {:.0} ops/s", 1.0 / seconds));
    println!(
        "throughput {name} {} op rate: {}",
        shape.name,
        rates.join(", ")
    );
}

fn run(name: &str) {
    let device = match device::open(name) {
        Ok(found) => found,
        Err(why) => {
            eprintln!("device {name}: skipped ({why})");
            return;
        }
    };
    let budget = if device.is_cpu() {
        Duration::from_millis(120)
    } else {
        Duration::from_millis(500)
    };
    op_rate(name, &device, budget);
    measure(name, &device, &SMALL, budget);
    if device.is_cuda() {
        measure(name, &device, &LINGBOT, budget);
    }
}

#[test]
fn cpu_throughput() {
    run("cpu");
}

#[test]
fn cuda_throughput() {
    run("cuda");
}
