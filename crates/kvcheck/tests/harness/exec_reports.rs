//! Revision 2 of kvcheck-subject/1: a subject that reports capacity and
//! resident bytes is compared on them like an in-process cache (and one
//! that does not report them is not); a write the model refuses carries
//! the payload of the heads it names; an adapter's own refusal of a request
//! is its failure, never agreement with the model's refusal.
//!
//! The subject is `tests/subjects/reporting_subject.py`, the reference
//! subject on `kvcheck.Subject` with one thing changed per option. Needs
//! `python3`; without it every test says so and passes vacuously.

use std::path::PathBuf;
use std::sync::Arc;

use kvcheck::check::divergence::{Divergence, DivergenceKind};
use kvcheck::check::lockstep::Lockstep;
use kvcheck::subject::{ExecSubject, SubjectSpec};
use kvcheck::{Config, Op, Write};

use crate::cli_support::python_missing;

fn subject(options: &str) -> SubjectSpec {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/subjects/reporting_subject.py");
    let command = format!("python3 {} {options}", script.display());
    SubjectSpec::Exec(Arc::new(ExecSubject::new(&command).unwrap()))
}

/// Runs `ops` on `config` against the subject with `options`.
fn run(options: &str, config: &Config, ops: &[Op]) -> Result<(), Box<Divergence>> {
    let subject = subject(options);
    let mut run = Lockstep::open(config, &subject, &candle_core::Device::Cpu).unwrap();
    run.run(ops)
}

fn appends(count: i64, len: i64) -> Vec<Op> {
    (0..count)
        .map(|i| Op::Write(Write::new(i * len, len)))
        .collect()
}

fn two_heads() -> Config {
    Config {
        heads: 2,
        ..Config::dense(4)
    }
}

fn head_range(first: i64, count: i64) -> Op {
    Op::Write(Write {
        heads: Some([first, count]),
        ..Write::new(0, 2)
    })
}

#[test]
fn reported_resident_bytes_are_compared_from_the_open_on() {
    if python_missing() {
        return;
    }
    let config = Config::dense(4);
    run("", &config, &appends(3, 2)).expect("the reference reports what the model says");
    // Compared after the very first op, even a refused one.
    let d = run(
        "--resident-off-by 8",
        &config,
        &[Op::Write(Write::new(0, 9))],
    )
    .unwrap_err();
    assert_eq!((d.kind, d.step), (DivergenceKind::ResidentBytes, 0), "{d}");
    assert!(d.actual.contains("resident bytes 40"), "{d}");
    // A subject that does not report them is not compared on them.
    run("--no-reports --resident-off-by 8", &config, &appends(3, 2)).unwrap();
}

#[test]
fn reported_resident_bytes_follow_cold_chunks() {
    if python_missing() {
        return;
    }
    let config = Config::packed(8);
    run("", &config, &appends(4, 2))
        .expect("cold int8 rows are counted as docs/contract.md §6 says");
}

#[test]
fn reported_capacity_is_compared_after_growth() {
    if python_missing() {
        return;
    }
    let config = Config {
        growth: true,
        ..Config::dense(2)
    };
    run("", &config, &appends(3, 2)).unwrap();
    let d = run("--fixed-capacity", &config, &appends(3, 2)).unwrap_err();
    assert_eq!((d.kind, d.step), (DivergenceKind::Capacity, 1), "{d}");
}

#[test]
fn a_refused_head_range_carries_the_heads_it_names() {
    if python_missing() {
        return;
    }
    let config = two_heads();
    // [-1, 1] and [2, 1] name one head, [0, 0] none, [1, 2] two: the
    // payload holds exactly those, as a caller of a library would pass.
    for (first, count) in [(-1, 1), (2, 1), (0, 0), (1, 2), (0, 3)] {
        run("--strict-payload", &config, &[head_range(first, count)])
            .unwrap_or_else(|d| panic!("heads [{first}, {count}]: {d}"));
    }
}

#[test]
fn an_adapters_own_refusal_never_agrees_with_the_model() {
    if python_missing() {
        return;
    }
    let config = two_heads();
    run("", &config, &[head_range(2, 1)]).expect("the cache refuses: agreement");
    let d = run(
        "--adapter-refuses-head-ranges",
        &config,
        &[head_range(2, 1)],
    )
    .unwrap_err();
    assert_eq!((d.kind, d.step), (DivergenceKind::Protocol, 0), "{d}");
    assert!(
        d.actual
            .contains("the adapter could not pass the request on"),
        "{d}"
    );
    assert!(d.actual.contains("no such slice"), "{d}");
}
