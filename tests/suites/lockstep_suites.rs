//! The property suites: every profile's state machine, the model against
//! the shipped cache, checked op by op by the lockstep driver.
//!
//! Knobs (see `kvcheck::engine::machine`): `KVCHECK_SUBJECT` (default: the shipped
//! caches; `reference`, `fault:NAME` or `exec:COMMAND ARGS` check another
//! subject), `KVCHECK_CASES` (default 256),
//! `KVCHECK_MAX_OPS` (default 40), `KVCHECK_SEED` (fixed per profile).
//! A failure prints the shrunk sequence's report and the path of its
//! kvtrace file under `target/kvcheck-failures/`.

use kvcheck::engine::machine::{
    check_family, BatchTwo, Family, Growth, Half, MultiHead, Packed, Pins, Sinks, SuiteSettings,
    Tiny, Window,
};
use kvcheck::engine::suite::check_subject;
use kvcheck::subject::SubjectSpec;

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
    assert_eq!(report.ran.len(), 9, "{report}");
    assert_eq!(report.skipped.len(), 1, "{report}");
}

/// Every profile again on the device-generic path (`cache:generic`), the
/// code a GPU runs, checked here on the CPU. Runs when the suites check the
/// shipped caches (no `KVCHECK_SUBJECT`, or `cache`); another subject has
/// no generic path to check.
fn generic_suite<F: Family>() {
    let mut settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    if settings.subject != SubjectSpec::Cache {
        eprintln!("generic-path suite skipped: KVCHECK_SUBJECT names another subject");
        return;
    }
    settings.subject = SubjectSpec::CachePath(kvcache::Path::Generic);
    if let Err(message) = check_family::<F>(&settings) {
        panic!("{message}");
    }
}

macro_rules! generic_suites {
    ($($name:ident: $family:ty),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                generic_suite::<$family>();
            }
        )*
    };
}

generic_suites! {
    generic_tiny: Tiny,
    generic_sinks: Sinks,
    generic_window_below_capacity: Window,
    generic_pins: Pins,
    generic_growth: Growth,
    generic_multi_head: MultiHead,
    generic_batch_two: BatchTwo,
    generic_half_precision: Half,
    generic_packed: Packed,
}
