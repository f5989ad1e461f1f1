//! Execs/s of the lockstep fuzz target bodies, the previous per-exec work
//! against the current one, measured in one run on the same decoded inputs.
//!
//! Every input of a corpus runs through the target body as it was (the
//! case decoded first with a model of its own, then run with views compared
//! `ValueCheck::Materialized`: payloads and expected views built one
//! element at a time, each view concatenated into fresh tensors and
//! converted to f32 vectors) and as it is (`Target::check`, what
//! `fuzz/fuzz_targets/*` call: decoded op by op against the run's model,
//! views compared `ValueCheck::InPlace`). Rounds alternate between the two so that load from other
//! processes hits both alike. Two corpora per target:
//!
//! - `seeds`: the committed seed corpus `fuzz/corpus/<target>/`;
//! - `random`: 400 inputs of fixed pseudo-random bytes, 13 config bytes
//!   and 1 to 64 ops (4 bytes each), the sizes libFuzzer's corpus reaches
//!   in the first minutes (decoding is total: every byte string is a case).
//!
//! `KVCHECK_FUZZ_CORPUS=DIR` adds `DIR/<target>/` (a corpus a fuzz run
//! grew, say). `KVCHECK_BENCH_SECONDS` (default 4) is the time per mode,
//! target and corpus. `KVCHECK_BENCH_PROFILE=1` runs the current path
//! alone (to profile it with `perf record`). The target is 5 000 execs/s in the fuzzer from about
//! 2 400; the fuzzer adds its instrumentation, so the ratio is what this
//! run shows. Run without `RUST_BACKTRACE`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kvcheck::check::lockstep::ValueCheck;
use kvcheck::engine::fuzzcase::{
    check_lockstep_with, check_subject_with, FuzzCase, FuzzFailure, Target, CONFIG_BYTES, OP_BYTES,
};
use kvcheck::subject::SubjectSpec;
use kvcheck::Variant;

const TARGETS: [Target; 3] = [
    Target::DenseLockstep,
    Target::RingLockstep,
    Target::PackedLockstep,
];

fn files(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Fixed pseudo-random inputs (splitmix64 stream).
fn random_inputs() -> Vec<Vec<u8>> {
    let mut state = 0x5eed_u64;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..400)
        .map(|_| {
            let ops = 1 + (next() % 64) as usize;
            (0..CONFIG_BYTES + ops * OP_BYTES)
                .map(|_| next() as u8)
                .collect()
        })
        .collect()
}

/// The previous per-exec work: the whole case decoded first (with a model
/// of its own), then run with views compared `Materialized`.
fn before(target: Target, input: &[u8]) -> Result<(), FuzzFailure> {
    let materialized = ValueCheck::Materialized;
    match target {
        Target::DenseLockstep => {
            check_lockstep_with(&FuzzCase::from_bytes(Variant::Dense, input), materialized)
        }
        Target::PackedLockstep => {
            check_lockstep_with(&FuzzCase::from_bytes(Variant::Packed, input), materialized)
        }
        Target::RingLockstep => check_subject_with(
            &FuzzCase::from_bytes(Variant::Dense, input),
            &SubjectSpec::Ring,
            materialized,
        ),
        other => other.check(input),
    }
}

/// Execs/s of the previous and the current work on `inputs`.
fn measure(target: Target, inputs: &[Vec<u8>], seconds: f64) -> (f64, f64) {
    let modes = [ValueCheck::Materialized, ValueCheck::InPlace];
    if std::env::var_os("KVCHECK_BENCH_PROFILE").is_some() {
        // Only the current path, for `perf record` (no ratio).
        let started = Instant::now();
        let mut execs = 0usize;
        while started.elapsed().as_secs_f64() < seconds {
            for input in inputs {
                let _ = target.check(input);
                execs += 1;
            }
        }
        let rate = execs as f64 / started.elapsed().as_secs_f64();
        return (rate, rate);
    }
    let (mut execs, mut spent) = ([0usize; 2], [Duration::ZERO; 2]);
    let round = Duration::from_secs_f64((seconds / 8.0).max(0.05));
    while spent[0].as_secs_f64() < seconds || spent[1].as_secs_f64() < seconds {
        for (m, mode) in modes.into_iter().enumerate() {
            let started = Instant::now();
            while started.elapsed() < round {
                for input in inputs {
                    let verdict = match mode {
                        ValueCheck::Materialized => before(target, input),
                        ValueCheck::InPlace => target.check(input),
                    };
                    if let Err(report) = verdict {
                        panic!("{} diverged ({mode:?}): {report}", target.name());
                    }
                    execs[m] += 1;
                }
            }
            spent[m] += started.elapsed();
        }
    }
    let rate = |m: usize| execs[m] as f64 / spent[m].as_secs_f64();
    (rate(0), rate(1))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter picks targets by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds = std::env::var("KVCHECK_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let extra = std::env::var_os("KVCHECK_FUZZ_CORPUS").map(PathBuf::from);
    println!(
        "{:<16} {:<8} {:>6} {:>14} {:>14} {:>7}",
        "target", "corpus", "inputs", "before exec/s", "after exec/s", "ratio"
    );
    for target in TARGETS {
        if !filter.is_empty() && !filter.iter().any(|f| target.name().contains(f.as_str())) {
            continue;
        }
        let mut corpora = vec![
            (
                "seeds",
                files(&root.join("fuzz/corpus").join(target.name())),
            ),
            ("random", random_inputs()),
        ];
        if let Some(dir) = &extra {
            corpora.push(("given", files(&dir.join(target.name()))));
        }
        for (name, inputs) in corpora {
            if inputs.is_empty() {
                continue;
            }
            let (before, after) = measure(target, &inputs, seconds);
            println!(
                "{:<16} {name:<8} {:>6} {before:>14.0} {after:>14.0} {:>6.2}x",
                target.name(),
                inputs.len(),
                after / before
            );
        }
    }
}
