//! Every available device runs the vectors and a short rolling suite per
//! profile, op by op against the CPU's in-place cache: same outcomes, same
//! view positions, bit-identical view tensors. Two implementations run on
//! each device: the dense or packed cache on its generic path, and (for
//! dense configurations) the `RingCache`, built from generic candle ops.
//!
//! Devices: the CPU always (with the generic path forced, since its default
//! is the in-place path the comparison starts from); CUDA device 0 when the
//! `cuda` feature is on and a device opens, skipped with a message
//! otherwise. `for_each_device!` expands one test per device.

mod device;
mod vector_config;

use std::fmt;
use std::path::Path as FsPath;

use candle_core::{DType, Device, Tensor};
use kvcache::{DenseCache, KvCache, PackedCache, Path, RingCache};
use kvmodel::{Config, Dtype, Op, PackedPolicy, Quant, Variant, Write};
use vector_config::config_from_trace;

/// The implementation replayed on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subject {
    /// `DenseCache` or `PackedCache` (by the config's variant) on a path.
    Cache(Path),
    /// `RingCache` (dense configurations only).
    Ring,
}

impl Subject {
    /// Whether the subject implements `config`'s variant.
    fn runs(self, config: &Config) -> bool {
        self != Subject::Ring || config.variant == Variant::Dense
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Cache(path) => write!(f, "cache ({path} path)"),
            Subject::Ring => f.write_str("ring"),
        }
    }
}

/// What each device runs: the generic path of the dense and packed caches,
/// then the ring.
const SUBJECTS: [Subject; 2] = [Subject::Cache(Path::Generic), Subject::Ring];

fn open(config: &Config, device: &Device, subject: Subject) -> Box<dyn KvCache> {
    match (subject, config.variant) {
        (Subject::Ring, _) => Box::new(RingCache::new(config, device).unwrap()),
        (Subject::Cache(path), Variant::Dense) => {
            Box::new(DenseCache::with_path(config, device, path).unwrap())
        }
        (Subject::Cache(path), Variant::Packed) => {
            Box::new(PackedCache::with_path(config, device, path).unwrap())
        }
    }
}

/// A payload `[B, len, heads, D]` of op `index`, values exact in every dtype.
fn payload(config: &Config, index: u64, len: usize, heads: usize, kv: u64) -> Tensor {
    let count = config.batch * len * heads * config.head_dim;
    let values: Vec<f32> = (0..count as u64)
        .map(|i| {
            let h = (index * 7919 + i * 104_729 + kv * 31).wrapping_mul(0x9e37_79b9) >> 7;
            ((h % 255) as f32 - 127.0) / 4.0
        })
        .collect();
    let dtype = kvcache::candle_dtype(config.dtype);
    Tensor::from_vec(
        values,
        (config.batch, len, heads, config.head_dim),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(dtype)
    .unwrap()
}

/// The bits of a view tensor, on the CPU, as f32.
fn bits(t: &Tensor) -> Vec<u32> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// What one op returned, comparable across devices.
#[derive(Debug, PartialEq)]
enum Seen {
    Refused(Option<kvmodel::ErrorKind>),
    Moved(u64),
    View(u64, Vec<u64>, Vec<u32>, Vec<u32>),
}

fn apply(cache: &mut dyn KvCache, device: &Device, index: u64, op: &Op) -> Seen {
    let seen = |r: kvcache::Result<u64>| match r {
        Ok(g) => Seen::Moved(g),
        Err(e) => Seen::Refused(e.kind()),
    };
    match op {
        Op::Write(w) => {
            let config = cache.config().clone();
            // `heads` is `[first, count]`; a bad range is refused before
            // the payload is looked at, so its size then does not matter.
            let heads = w
                .heads
                .map_or(config.heads, |[_, count]| count.max(0) as usize);
            let len = w.len.clamp(0, 4096) as usize;
            let k = payload(&config, index, len, heads, 0)
                .to_device(device)
                .unwrap();
            let v = payload(&config, index, len, heads, 1)
                .to_device(device)
                .unwrap();
            match cache.write(w, &k, &v) {
                Ok(view) => Seen::View(
                    view.global_end,
                    view.positions.clone(),
                    bits(&view.k),
                    bits(&view.v),
                ),
                Err(e) => Seen::Refused(e.kind()),
            }
        }
        Op::Rewind { to } => seen(cache.rewind(*to)),
        Op::Evict { tokens } => seen(cache.evict(*tokens)),
        Op::Pin { tokens } => seen(cache.pin(*tokens)),
        Op::Reset => seen(cache.reset()),
    }
}

/// Runs `ops` on the device and on the CPU's in-place cache; the first
/// difference is an error naming the op.
fn lockstep(config: &Config, device: &Device, subject: Subject, ops: &[Op]) -> Result<(), String> {
    let mut reference = open(config, &Device::Cpu, Subject::Cache(Path::InPlace));
    let mut subject = open(config, device, subject);
    for (i, op) in ops.iter().enumerate() {
        let got = apply(subject.as_mut(), device, i as u64, op);
        let want = apply(reference.as_mut(), &Device::Cpu, i as u64, op);
        if got != want {
            return Err(format!(
                "op {i} ({op:?}): device gave {got:?}, the CPU in-place cache {want:?}"
            ));
        }
        let (a, b) = (subject.view().unwrap(), reference.view().unwrap());
        if (a.positions.clone(), bits(&a.k), bits(&a.v))
            != (b.positions.clone(), bits(&b.k), bits(&b.v))
        {
            return Err(format!("after op {i} ({op:?}): the full views differ"));
        }
    }
    Ok(())
}

/// Every vector of `tests/vectors` (or of `$KVCACHE_VECTORS`).
fn vectors() -> Vec<(String, Config, Vec<Op>)> {
    // `KVCACHE_VECTORS` lets a copied binary find them on another machine.
    let dir = std::env::var_os("KVCACHE_VECTORS").map_or_else(
        || FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors"),
        std::path::PathBuf::from,
    );
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".kvtrace.json") {
            continue;
        }
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let config = config_from_trace(&trace["config"]);
        let ops: Vec<Op> = serde_json::from_value(trace["ops"].clone()).unwrap();
        found.push((name, config, ops));
    }
    found
}

/// The profiles of the property suites, each with a short rolling
/// sequence: appends past the capacity, a rewrite, a head-range write, a
/// pin, an evict, a rewind and appends again.
fn profiles() -> Vec<(&'static str, Config)> {
    let base = |capacity| {
        let mut c = Config::dense(capacity);
        c.heads = 2;
        c.head_dim = 4;
        c
    };
    let mut sinks = base(12);
    sinks.sink = 2;
    let mut window = base(16);
    window.sink = 2;
    window.window = Some(8);
    let mut pins = base(16);
    pins.sink = 2;
    pins.global_sink = 1;
    let mut growth = base(4);
    growth.growth = true;
    let mut multi = base(12);
    multi.heads = 4;
    let mut batch = base(12);
    batch.batch = 2;
    batch.sink = 1;
    let mut half = base(12);
    half.dtype = Dtype::Bf16;
    half.sink = 2;
    let mut int8 = Config::packed(24);
    int8.heads = 2;
    int8.head_dim = 5;
    int8.sink = 2;
    int8.packed = Some(PackedPolicy {
        keep_recent_chunks: 1,
        quant: Quant::Int8,
        pack_sink: true,
    });
    let mut int4 = int8.clone();
    int4.dtype = Dtype::Bf16;
    int4.packed = Some(PackedPolicy {
        keep_recent_chunks: 1,
        quant: Quant::Int4,
        pack_sink: false,
    });
    vec![
        ("tiny", base(6)),
        ("sinks", sinks),
        ("window", window),
        ("pins", pins),
        ("growth", growth),
        ("multi_head", multi),
        ("batch_two", batch),
        ("half", half),
        ("packed_int8", int8),
        ("packed_int4", int4),
    ]
}

fn rolling_ops() -> Vec<Op> {
    let write = |start: i64, len: i64, heads: Option<[i64; 2]>| {
        let mut w = Write::new(start, len);
        w.heads = heads;
        Op::Write(w)
    };
    let mut ops = Vec::new();
    let mut g = 0;
    for _ in 0..6 {
        ops.push(write(g, 3, None));
        g += 3;
    }
    ops.push(write(g - 3, 3, None));
    ops.push(write(g, 2, Some([1, 1])));
    g += 2;
    ops.push(Op::Pin { tokens: 4 });
    ops.push(write(g, 3, None));
    g += 3;
    ops.push(Op::Evict { tokens: 2 });
    ops.push(Op::Rewind { to: g - 4 });
    g -= 4;
    for _ in 0..4 {
        ops.push(write(g, 4, None));
        g += 4;
    }
    ops.push(Op::Reset);
    ops.push(write(0, 5, None));
    ops
}

fn check_device(name: &str) {
    let device = match device::open(name) {
        Ok(found) => found,
        Err(why) => {
            eprintln!("device {name}: skipped ({why})");
            return;
        }
    };
    let vectors = vectors();
    assert!(vectors.len() >= 21, "found {} vectors", vectors.len());
    let mut failures = Vec::new();
    for subject in SUBJECTS {
        let (mut traces, mut profiles_run) = (0, 0);
        for (file, config, ops) in vectors.iter().filter(|(_, c, _)| subject.runs(c)) {
            traces += 1;
            if let Err(e) = lockstep(config, &device, subject, ops) {
                failures.push(format!("{name} {subject} vector {file}: {e}"));
            }
        }
        for (profile, config) in profiles().into_iter().filter(|(_, c)| subject.runs(c)) {
            profiles_run += 1;
            if let Err(e) = lockstep(&config, &device, subject, &rolling_ops()) {
                failures.push(format!("{name} {subject} profile {profile}: {e}"));
            }
        }
        println!(
            "device {name} {subject}: {traces} vectors and {profiles_run} profiles replayed against the CPU in-place cache"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("device {name}: every subject bit-identical to the CPU in-place cache");
}

/// One test per device name.
macro_rules! for_each_device {
    ($($test:ident: $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_device($name);
            }
        )*
    };
}

for_each_device! {
    cpu_generic_matches_in_place: "cpu",
    cuda_matches_cpu_in_place: "cuda",
}
