//! Each model family at its front door, checked by `kvcheck::check`: the
//! incremental forward against the same model's recompute without its
//! cache (docs/candle-transformers.md).

use kvcheck::{check, CheckFailure, CheckSettings};
use kvcheck_candle_transformers::models;

fn settings() -> CheckSettings {
    CheckSettings::from_env()
        .expect("the KVCHECK_* knobs parse")
        .profile("decode")
        .profile("growth")
}

/// candle-transformers 0.11.1's Mistral decodes a token past its sliding
/// window attending every cached position, while its recompute masks the
/// window (docs/candle-transformers.md): the check meets that divergence.
#[test]
fn mistral_decoding_past_the_window_departs_from_the_recompute() {
    let failure = check(models::mistral(), &settings()).unwrap_err();
    println!("{failure}");
    let CheckFailure::Diverged { report, .. } = &failure else {
        panic!("{failure}");
    };
    assert!(
        report.contains("differ from the model's recompute without its cache"),
        "{report}"
    );
}

/// Qwen2's sliding window, as Mistral's.
#[test]
fn qwen2_decoding_past_the_window_departs_from_the_recompute() {
    let failure = check(models::qwen2(), &settings()).unwrap_err();
    println!("{failure}");
    assert!(
        failure
            .to_string()
            .contains("differ from the model's recompute without its cache"),
        "{failure}"
    );
}

/// Llama, without a sliding window, keeps to its recompute.
#[test]
fn llama_keeps_to_its_recompute() {
    let checked = check(models::llama(), &settings()).unwrap();
    println!("{checked}");
}
