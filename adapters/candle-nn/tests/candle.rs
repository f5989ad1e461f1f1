//! Every cache of `candle_nn::kv_cache` that a model appends to, checked
//! by `kvcheck::check`: against the model where the cache's contract is
//! the kvcheck contract, against its own runs (the relations) where it is
//! not. The rows of docs/candle.md's campaign table.
//!
//! On candle-nn 0.11.1 the sliding window diverges where docs/candle.md
//! says (`docs/findings/candle-nn-*.md`); with `CANDLE_NN_PATCHED=1` (the
//! crate built against the patched copy, docs/candle.md) every check
//! passes.

use kvcheck::engine::oracle::Oracle;
use kvcheck::subject::Factory;
use kvcheck::{check, CheckFailure, CheckSettings};
use kvcheck_candle_nn::{growing, rotating, scattered};

fn settings() -> CheckSettings {
    CheckSettings::from_env().expect("the KVCHECK_* knobs parse")
}

/// A cache whose contract is kvcheck's and that keeps it.
fn passes(factory: Factory) {
    println!("{}", check(factory, &settings()).unwrap());
}

fn patched() -> bool {
    std::env::var("CANDLE_NN_PATCHED").is_ok_and(|v| v == "1")
}

#[test]
fn kv_cache_keeps_the_contract() {
    passes(growing::kv_cache());
}

#[test]
fn concat_kv_cache_keeps_the_contract() {
    passes(growing::concat_kv_cache());
}

#[test]
fn interleaved_kv_cache_keeps_the_contract() {
    passes(growing::interleaved_kv_cache());
}

#[test]
fn raw_interleaved_kv_cache_keeps_the_contract() {
    passes(growing::raw_interleaved_kv_cache());
}

/// Judged by the model: chunks up to the window.
#[test]
fn rotating_kv_cache_against_the_model() {
    match check(rotating::factory(), &settings()) {
        Ok(checked) => {
            println!("{checked}");
            assert!(
                patched(),
                "0.11.1 lists a rotated order for a chunk of the window's length"
            );
        }
        Err(failure) => {
            println!("{failure}");
            assert!(!patched(), "{failure}");
            let CheckFailure::Diverged { report, .. } = &failure else {
                panic!("{failure}");
            };
            assert!(report.contains("values divergence"), "{report}");
        }
    }
}

/// Judged by its own runs: long prefills too.
#[test]
fn rotating_kv_cache_against_itself() {
    // A conversation's first chunk is the long prefill; what is drawn after
    // an accepted one is cut (see `rotating_long_prefill_capabilities`).
    let settings = settings()
        .oracle(Oracle::parse("self").expect("an oracle"))
        .profile("decode")
        .max_outside(1.0);
    match check(rotating::long_prefill(), &settings) {
        Ok(checked) => {
            println!("{checked}");
            assert!(
                patched(),
                "0.11.1 lets a long prefill's queries see W + 1 keys"
            );
        }
        Err(failure) => {
            println!("{failure}");
            assert!(!patched(), "{failure}");
        }
    }
}

/// The scattered cache against the model: chunks up to the context.
#[test]
fn scattered_kv_cache_against_the_model() {
    match check(scattered::factory(), &settings()) {
        Ok(checked) => {
            println!("{checked}");
            assert!(patched(), "0.11.1 stores no chunk of the context's length");
        }
        Err(failure) => {
            println!("{failure}");
            assert!(!patched(), "{failure}");
        }
    }
}
