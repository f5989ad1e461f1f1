//! Replays every committed fuzz corpus entry and saved crash artifact
//! (`fuzz/corpus/<target>/*`, `fuzz/artifacts/<target>/*`) through the same
//! target bodies the fuzzers run (`kvcheck::engine::fuzzcase::Target::check`), so CI
//! covers them on stable without libFuzzer.
//!
//! The seed corpus is built from `tests/vectors/*.kvtrace.json`:
//!
//! ```text
//! cargo test --test suites fuzz_corpus:: -- --ignored regenerate_seed_corpus
//! ```

use std::path::{Path, PathBuf};

use kvcheck::check::trace::Trace;
use kvcheck::engine::fuzzcase::{FuzzCase, Target};
use kvcheck::Variant;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn vectors() -> Vec<(String, Trace)> {
    files_under(&root().join("tests/vectors"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".kvtrace.json"))
        .map(|p| {
            let name = p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace(".kvtrace.json", "");
            (name, Trace::load(&p).expect("test vectors load"))
        })
        .collect()
}

/// Runs `target` on every file under `fuzz/<kind>/<target>/`; returns how
/// many ran.
fn replay_dir(kind: &str, target: Target) -> usize {
    let files = files_under(&root().join("fuzz").join(kind).join(target.name()));
    let mut failures = Vec::new();
    for file in &files {
        let data = std::fs::read(file).expect("readable corpus file");
        if let Err(report) = target.check(&data) {
            failures.push(format!(
                "{}\n{report}\nreproduce: cargo run -p kvcheck -- from-fuzz {} {} -o crash.kvtrace.json && cargo run -p kvcheck -- replay crash.kvtrace.json",
                file.display(),
                target.name(),
                file.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    files.len()
}

#[test]
fn fuzz_corpus_replays_clean() {
    for target in Target::ALL {
        let ran = replay_dir("corpus", target);
        assert!(ran > 0, "no committed corpus for {}", target.name());
    }
}

#[test]
fn fuzz_artifacts_replay_clean() {
    for target in Target::ALL {
        replay_dir("artifacts", target);
    }
}

#[test]
fn fuzz_case_decoding_is_total_and_bounded() {
    let data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    for cut in [0, 1, 5, 13, 14, 100, 4096] {
        let bytes = &data[..cut];
        for variant in [Variant::Dense, Variant::Packed] {
            let case = FuzzCase::from_bytes(variant, bytes);
            case.config.validate().expect("fuzz configs are valid");
            assert!(case.config.capacity <= 64 && case.config.heads <= 4);
            assert!(case.config.batch <= 2 && case.config.head_dim <= 8);
            assert!(case.ops.len() <= kvcheck::engine::fuzzcase::MAX_OPS);
        }
        for target in Target::ALL {
            target.check(bytes).unwrap();
        }
    }
}

#[test]
fn fuzz_case_encoding_round_trips_the_vectors() {
    // Vectors inside the fuzz bounds whose ops all have a code decode back
    // to themselves.
    let mut exact = 0;
    for (_, trace) in vectors() {
        let bytes = FuzzCase::to_bytes(&trace.config, &trace.ops);
        let case = FuzzCase::decode(trace.config.variant, &bytes, usize::MAX);
        assert_eq!(case.ops.len(), trace.ops.len());
        if case.config == trace.config && case.ops == trace.ops {
            exact += 1;
        }
    }
    assert!(exact > 0, "no vector survives the fuzz encoding");
}

#[test]
#[ignore = "writes fuzz/corpus; run to refresh the seed corpus"]
fn regenerate_seed_corpus() {
    let corpus = root().join("fuzz/corpus");
    let write = |target: Target, name: &str, bytes: &[u8]| {
        let dir = corpus.join(target.name());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    for (name, trace) in vectors() {
        let raw = std::fs::read(root().join(format!("tests/vectors/{name}.kvtrace.json"))).unwrap();
        write(Target::TraceLoad, &format!("{name}.kvtrace.json"), &raw);
        for (target, variant, prefix) in [
            (Target::DenseLockstep, Variant::Dense, None),
            (Target::RingLockstep, Variant::Dense, None),
            (Target::PackedLockstep, Variant::Packed, None),
            (
                Target::ModelInvariants,
                trace.config.variant,
                Some(trace.config.variant),
            ),
        ] {
            let mut config = trace.config.clone();
            config.variant = variant;
            let mut bytes = Vec::new();
            if let Some(v) = prefix {
                bytes.push(u8::from(v == Variant::Packed));
            }
            bytes.extend(FuzzCase::to_bytes(&config, &trace.ops));
            write(target, &format!("vector-{name}"), &bytes);
        }
    }
}
