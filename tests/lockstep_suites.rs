//! The property suites: every profile's state machine, the model against
//! the shipped cache, checked op by op by the lockstep driver.
//!
//! Knobs (see `kvcheck::machine`): `KVCHECK_SUBJECT` (default: the shipped
//! caches; `reference`, `fault:NAME` or `exec:COMMAND ARGS` check another
//! subject), `KVCHECK_CASES` (default 256),
//! `KVCHECK_MAX_OPS` (default 40), `KVCHECK_SEED` (fixed per profile).
//! A failure prints the shrunk sequence's report and the path of its
//! kvtrace file under `target/kvcheck-failures/`.

use kvcheck::machine::{
    check_family, BatchTwo, Family, Growth, Half, MultiHead, Packed, Pins, Sinks, SuiteSettings,
    Tiny, Window,
};
use kvcheck::subject::SubjectSpec;
use kvcheck::suite::check_subject;

fn suite<F: Family>() {
    let settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    if let Err(message) = check_family::<F>(&settings) {
        panic!("{message}");
    }
}

#[test]
fn tiny() {
    suite::<Tiny>();
}

#[test]
fn sinks() {
    suite::<Sinks>();
}

#[test]
fn window_below_capacity() {
    suite::<Window>();
}

#[test]
fn pins() {
    suite::<Pins>();
}

#[test]
fn growth() {
    suite::<Growth>();
}

#[test]
fn multi_head() {
    suite::<MultiHead>();
}

#[test]
fn batch_two() {
    suite::<BatchTwo>();
}

#[test]
fn half_precision() {
    suite::<Half>();
}

#[test]
fn packed() {
    suite::<Packed>();
}

/// The `RingCache` (`cache:ring`) through the suite of every profile its
/// capabilities allow: every dense one (packed is skipped).
#[test]
fn ring_every_dense_profile() {
    let settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    let report = check_subject(&SubjectSpec::Ring, &settings).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.ran.len(), 8, "{report}");
    assert_eq!(report.skipped.len(), 1, "{report}");
}
