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

/// The traces of `tests/trims/` (`trim = "after_read"`, docs/contract.md
/// §3, trim modes) replay green on the caches that open that mode (the
/// reference cache in process and the stdlib reference subject through
/// kvcheck-subject/1, kinds compared exactly), are skipped as unsupported
/// by the shipped caches, and fail on the cache that claims the mode but
/// trims before the read.
#[test]
fn after_read_traces_replay_green_where_the_mode_is_opened() {
    use kvcheck::subject::{ExecSubject, Fault};
    use std::sync::Arc;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let files = collect_trace_files(&[root.join("tests/trims")]).expect("tests/trims is readable");
    assert!(!files.is_empty(), "no trace under tests/trims");
    let python = Arc::new(
        ExecSubject::new(&format!(
            "python3 {}",
            root.join("adapters/reference_subject.py").display()
        ))
        .expect("a command")
        .with_exact_kinds(true),
    );
    for file in &files {
        let trace = Trace::load(file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            trace.config.trim,
            kvcheck::Trim::AfterRead,
            "{}",
            file.display()
        );
        assert!(
            trace.expect.is_some(),
            "{}: carries no expect",
            file.display()
        );
        for subject in [
            SubjectSpec::Reference,
            SubjectSpec::Exec(Arc::clone(&python)),
        ] {
            let report = replay(&trace, Some(file), Some(subject.clone()), None);
            assert!(
                report.passed(),
                "{} on {subject}: {:?}",
                file.display(),
                report.failure()
            );
            assert!(report.skipped.is_none(), "{} on {subject}", file.display());
        }
        for subject in [SubjectSpec::Cache, SubjectSpec::Ring] {
            let report = replay(&trace, Some(file), Some(subject.clone()), None);
            assert!(report.skipped.is_some(), "{} on {subject}", file.display());
        }
        let report = replay(
            &trace,
            Some(file),
            Some(SubjectSpec::Fault(Fault::TrimBeforeRead)),
            None,
        );
        assert!(
            !report.passed(),
            "{}: the trim before the read passes",
            file.display()
        );
    }
}
