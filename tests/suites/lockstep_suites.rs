//! The property suites: every profile's state machine, the model against
//! the shipped cache, checked op by op by the lockstep driver.
//!
//! Knobs (see `kvcheck::engine::suite`): `KVCHECK_SUBJECT` (default: the shipped
//! caches; `reference`, `fault:NAME` or `exec:COMMAND ARGS` check another
//! subject), `KVCHECK_CASES` (default 256),
//! `KVCHECK_MAX_OPS` (default 40), `KVCHECK_SEED` (fixed per profile).
//! A failure prints the shrunk sequence's report and the path of its
//! kvtrace file under `target/kvcheck-failures/`.

use kvcheck::engine::strategy::profile;
use kvcheck::engine::suite::{check_profile, check_subject, SuiteSettings};
use kvcheck::subject::SubjectSpec;

/// The suite of the built-in profile `name`.
fn suite(name: &str) {
    let settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    let profile = profile(name).expect("a built-in profile");
    if let Err(message) = check_profile(profile, &settings) {
        panic!("{message}");
    }
}

#[test]
fn tiny() {
    suite("tiny");
}

#[test]
fn sinks() {
    suite("sinks");
}

#[test]
fn window_below_capacity() {
    suite("window");
}

#[test]
fn pins() {
    suite("pins");
}

#[test]
fn growth() {
    suite("growth");
}

#[test]
fn multi_head() {
    suite("multi-head");
}

#[test]
fn batch_two() {
    suite("batch2");
}

#[test]
fn half_precision() {
    suite("half");
}

#[test]
fn packed() {
    suite("packed");
}

#[test]
fn decode() {
    suite("decode");
}

/// The `RingCache` (`cache:ring`) through the suite of every profile its
/// capabilities allow: every dense one (packed is skipped).
#[test]
fn ring_every_dense_profile() {
    let settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    let report = check_subject(&SubjectSpec::Ring, &settings).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.ran.len(), 10, "{report}");
    assert_eq!(report.skipped.len(), 1, "{report}");
}

/// Every profile again on the device-generic path (`cache:generic`), the
/// code a GPU runs, checked here on the CPU. Runs when the suites check the
/// shipped caches (no `KVCHECK_SUBJECT`, or `cache`); another subject has
/// no generic path to check.
fn generic_suite(name: &str) {
    let mut settings = SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"));
    if settings.subject != SubjectSpec::Cache {
        eprintln!("generic-path suite skipped: KVCHECK_SUBJECT names another subject");
        return;
    }
    settings.subject = SubjectSpec::CachePath(kvcache::Path::Generic);
    let profile = profile(name).expect("a built-in profile");
    if let Err(message) = check_profile(profile, &settings) {
        panic!("{message}");
    }
}

macro_rules! generic_suites {
    ($($name:ident: $profile:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                generic_suite($profile);
            }
        )*
    };
}

generic_suites! {
    generic_tiny: "tiny",
    generic_sinks: "sinks",
    generic_window_below_capacity: "window",
    generic_pins: "pins",
    generic_growth: "growth",
    generic_multi_head: "multi-head",
    generic_batch_two: "batch2",
    generic_half_precision: "half",
    generic_packed: "packed",
}
