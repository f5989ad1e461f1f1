//! A prefix hit on the paged prefix cache against the copy bound of the
//! rows it reuses, bf16 on the CPU:
//!
//! - the shape: a long shared prefix of `PREFIX` tokens in blocks of
//!   `BLOCK`, `LAYERS` payload layers (K and V of 8 transformer layers)
//!   of `WIDTH` elements (8 KV heads × 128), in a pool with room for the
//!   prefix and a few more blocks;
//! - `hit_read`: `start` of a prompt that extends the cached prefix by one
//!   block (a hit of the whole prefix under `leave_one`), `read_rows` of
//!   the hit's rows (one `index_select` of whole blocks), then `finish`
//!   (the blocks go back to the cache);
//! - `copy_bound`: the bound, a plain copy of a contiguous `[L, PREFIX,
//!   D]` tensor: the same bytes, allocated and copied once;
//! - `miss_compute`: what the hit saves, `start` and `compute` of the same
//!   prefix in an empty cache (the payload rows hashed and written).
//!
//! The table at the end reads the medians back from criterion's
//! `estimates.json` and prints hit / bound and miss / hit as measured in
//! this run.
//!
//! `cargo bench -p kvcache --bench paged_hit` (under a minute; `-- --quick`
//! for a few seconds). Run it without `RUST_BACKTRACE`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use criterion::{Criterion, SamplingMode};
use kvcache::{PagedCache, PrefixCache};
use kvmodel::prefix::{HitRule, PrefixConfig, PrefixOp, Token};

const PREFIX: usize = 2048;
const BLOCK: usize = 16;
const LAYERS: usize = 16;
const WIDTH: usize = 1024;
const GROUP: &str = "paged_hit_p2048_b16_l16_d1024_bf16";
const IDS: [&str; 3] = ["hit_read", "copy_bound", "miss_compute"];

fn config() -> PrefixConfig {
    PrefixConfig {
        blocks: PREFIX / BLOCK + 4,
        block_size: BLOCK,
        layers: LAYERS,
        row_width: WIDTH,
        hit: HitRule::LeaveOne,
        seed: 0,
        window: None,
    }
}

fn prompt(tail: usize) -> Vec<Token> {
    (0..(PREFIX + tail) as Token).map(|t| t % 1000).collect()
}

fn apply(cache: &mut PagedCache, index: &mut u64, op: PrefixOp) {
    cache.apply(*index, &op).unwrap();
    *index += 1;
}

fn bench(c: &mut Criterion) {
    let config = config();
    let mut group = c.benchmark_group(GROUP);
    group.sampling_mode(SamplingMode::Flat);
    {
        let mut cache = PagedCache::with_dtype(&config, &Device::Cpu, DType::BF16).unwrap();
        let mut index = 0;
        let prefix = prompt(0);
        apply(
            &mut cache,
            &mut index,
            PrefixOp::Start {
                request: 0,
                tokens: prefix,
            },
        );
        apply(
            &mut cache,
            &mut index,
            PrefixOp::Compute {
                request: 0,
                count: PREFIX as i64,
            },
        );
        apply(&mut cache, &mut index, PrefixOp::Finish { request: 0 });
        let long = prompt(BLOCK);
        group.bench_function("hit_read", |b| {
            b.iter(|| {
                let start = PrefixOp::Start {
                    request: 1,
                    tokens: long.clone(),
                };
                let effect = cache.apply(index, &start).unwrap();
                assert_eq!(effect.hit, Some(PREFIX as u64));
                let rows = cache.read_rows(1).unwrap();
                assert_eq!(rows.dims3().unwrap(), (LAYERS, PREFIX, WIDTH));
                black_box(rows);
                cache
                    .apply(index + 1, &PrefixOp::Finish { request: 1 })
                    .unwrap();
                index += 2;
            })
        });
    }
    {
        let source = Tensor::ones((LAYERS, PREFIX, WIDTH), DType::BF16, &Device::Cpu).unwrap();
        group.bench_function("copy_bound", |b| {
            b.iter(|| black_box(source.force_contiguous().unwrap()))
        });
    }
    {
        let prefix = prompt(0);
        group.bench_function("miss_compute", |b| {
            b.iter(|| {
                let mut cache = PagedCache::with_dtype(&config, &Device::Cpu, DType::BF16).unwrap();
                let mut index = 0;
                apply(
                    &mut cache,
                    &mut index,
                    PrefixOp::Start {
                        request: 0,
                        tokens: prefix.clone(),
                    },
                );
                apply(
                    &mut cache,
                    &mut index,
                    PrefixOp::Compute {
                        request: 0,
                        count: PREFIX as i64,
                    },
                );
                black_box(cache)
            })
        });
    }
    group.finish();
}

/// The median of one criterion benchmark, in nanoseconds.
fn median_ns(dir: &Path, id: &str) -> Option<f64> {
    let path = dir.join(GROUP).join(id).join("new").join("estimates.json");
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
    bench(&mut c);
    c.final_summary();
    let bytes = LAYERS * PREFIX * WIDTH * 2;
    println!(
        "\n{:<36} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "shape (median ms)", "hit+read", "bound", "miss", "hit/bound", "miss/hit"
    );
    let medians: Option<Vec<f64>> = IDS.iter().map(|id| median_ns(&dir, id)).collect();
    if let Some(m) = medians {
        let ms = |ns: f64| ns / 1e6;
        println!(
            "{:<36} {:>10.3} {:>10.3} {:>10.3} {:>9.2}x {:>9.1}x",
            GROUP,
            ms(m[0]),
            ms(m[1]),
            ms(m[2]),
            m[0] / m[1],
            m[2] / m[0]
        );
    }
    println!("(rows reused per hit: {:.1} MB)", bytes as f64 / 1e6);
}
