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

fn patched() -> bool {
    std::env::var("CANDLE_TRANSFORMERS_PATCHED").is_ok_and(|v| v == "1")
}

/// candle-transformers 0.11.1's Mistral decodes a token past its sliding
/// window attending every cached position, while its recompute masks the
/// window (docs/findings/candle-transformers-mistral-decode-ignores-window.md):
/// the check meets that divergence; with the patch
/// (`CANDLE_TRANSFORMERS_PATCHED=1`, docs/candle-transformers.md) it passes.
#[test]
fn mistral_decoding_past_the_window_departs_from_the_recompute() {
    match check(models::mistral(), &settings()) {
        Ok(checked) => {
            println!("{checked}");
            assert!(patched(), "0.11.1's decode step ignores the sliding window");
        }
        Err(failure) => {
            println!("{failure}");
            assert!(!patched(), "{failure}");
            let CheckFailure::Diverged { report, .. } = &failure else {
                panic!("{failure}");
            };
            assert!(
                report.contains("differ from the model's recompute without its cache"),
                "{report}"
            );
        }
    }
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

/// Qwen3, no sliding window (0.11.1 refuses one).
#[test]
fn qwen3_keeps_to_its_recompute() {
    let checked = check(models::qwen3(), &settings()).unwrap();
    println!("{checked}");
}

/// Phi-3, no sliding window.
#[test]
fn phi3_keeps_to_its_recompute() {
    let checked = check(models::phi3(), &settings()).unwrap();
    println!("{checked}");
}

/// Gemma 2, whose sliding window the model leaves unhandled on the decode
/// path (its own comment: "TODO: Handle the sliding window in the
/// attention mask"): it departs from its recompute as Mistral does.
#[test]
fn gemma2_decoding_past_the_window_departs_from_the_recompute() {
    let failure = check(models::gemma2(), &settings()).unwrap_err();
    println!("{failure}");
    assert!(
        failure
            .to_string()
            .contains("differ from the model's recompute without its cache"),
        "{failure}"
    );
}
