//! Every trace in `tests/vectors/` (the shared vectors of the contract)
//! replays green through the model and through the shipped cache of its
//! variant. New files are picked up without code changes.

use std::path::PathBuf;

use kvcheck::check::trace::{collect_trace_files, Trace};
use kvcheck::engine::replay::replay;
use kvcheck::subject::SubjectSpec;

#[test]
fn shared_vectors_replay_green_for_model_and_cache() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let files = collect_trace_files(&[dir]).expect("tests/vectors is readable");
    assert!(
        files.len() >= 21,
        "expected the shared vectors, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for file in &files {
        let trace = Trace::load(file).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            trace.expect.is_some(),
            "{}: a vector must carry expect",
            file.display()
        );
        // The device default, then each path forced (the generic one is
        // what a GPU runs).
        for subject in [
            SubjectSpec::Cache,
            SubjectSpec::CachePath(kvcache::Path::InPlace),
            SubjectSpec::CachePath(kvcache::Path::Generic),
        ] {
            let label = subject.name(&trace.config);
            let report = replay(&trace, Some(file), Some(subject), None);
            if let Some(failure) = report.failure() {
                failures.push(format!("{} ({label}): {failure}", file.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The dense vectors through the `RingCache` (`cache:ring`); packed ones
/// are outside its capabilities and reported as skipped.
#[test]
fn shared_vectors_replay_green_for_the_ring_cache() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let files = collect_trace_files(&[dir]).expect("tests/vectors is readable");
    let (mut failures, mut ran) = (Vec::new(), 0);
    for file in &files {
        let trace = Trace::load(file).unwrap_or_else(|e| panic!("{e}"));
        let report = replay(&trace, Some(file), Some(SubjectSpec::Ring), None);
        if let Some(failure) = report.failure() {
            failures.push(format!("{}: {failure}", file.display()));
        } else if report.skipped.is_none() {
            ran += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 10, "only {ran} vectors ran on the ring");
}
