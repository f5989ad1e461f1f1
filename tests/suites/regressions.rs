//! The regression corpus: every `tests/regressions/*.kvtrace.json` replays
//! through the model (checking `expect`) and the shipped cache in lockstep.
//! Add a case with `kvcheck save FILE --name NAME`.

use std::path::PathBuf;

use kvcheck::check::trace::{collect_trace_files, Trace};
use kvcheck::engine::replay::replay;
use kvcheck::subject::SubjectSpec;

#[test]
fn regression_corpus_replays_clean() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let files = collect_trace_files(std::slice::from_ref(&dir)).expect("the corpus is readable");
    assert!(
        files.len() >= 15,
        "one trace per docs/contract.md §8 row (D1–D15) at least"
    );
    let mut failures = Vec::new();
    for path in &files {
        let trace = Trace::load(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(trace.expect.is_some(), "{}: no expect", path.display());
        assert!(trace.note.is_some(), "{}: no note", path.display());
        let report = replay(&trace, Some(path), Some(SubjectSpec::Cache), None);
        if !report.passed() {
            failures.push(format!(
                "{}:\n{}",
                path.display(),
                report.failure().unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The corpus through the `RingCache` too: its dense traces replay clean,
/// packed ones are skipped as outside its capabilities.
#[test]
fn regression_corpus_replays_clean_on_the_ring_cache() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let files = collect_trace_files(std::slice::from_ref(&dir)).expect("the corpus is readable");
    let (mut failures, mut ran) = (Vec::new(), 0);
    for path in &files {
        let trace = Trace::load(path).unwrap_or_else(|e| panic!("{e}"));
        let report = replay(&trace, Some(path), Some(SubjectSpec::Ring), None);
        if report.skipped.is_some() {
            continue;
        }
        ran += 1;
        if !report.passed() {
            failures.push(format!(
                "{}:\n{}",
                path.display(),
                report.failure().unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 8, "only {ran} regressions ran on the ring");
}
