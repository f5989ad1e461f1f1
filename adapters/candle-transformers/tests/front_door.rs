//! Each model family at its front door, checked by `kvcheck::check`: the
//! incremental forward against the same model's recompute without its
//! cache (docs/candle-transformers.md).

use kvcheck::{check, CheckFailure, CheckSettings};
use kvcheck_candle_transformers::{models, quantized};

fn settings() -> CheckSettings {
    CheckSettings::from_env()
        .expect("the KVCHECK_* knobs parse")
        .profile("decode")
        .profile("growth")
}

/// A family that keeps to its recompute.
fn keeps(factory: kvcheck::subject::Factory) {
    keeps_with(factory, settings());
}

fn keeps_with(factory: kvcheck::subject::Factory, settings: CheckSettings) {
    match check(factory, &settings) {
        Ok(checked) => println!("{checked}"),
        Err(failure) => panic!("{failure}"),
    }
}

/// A family that departs from its recompute (past its sliding window).
fn departs(factory: kvcheck::subject::Factory) {
    let failure = check(factory, &settings()).unwrap_err();
    println!("{failure}");
    assert!(
        failure
            .to_string()
            .contains("differ from the model's recompute without its cache"),
        "{failure}"
    );
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

/// Qwen2's sliding window, as Mistral's (the same code, and the same
/// patch in its file).
#[test]
fn qwen2_decoding_past_the_window_departs_from_the_recompute() {
    if patched() {
        keeps(models::qwen2());
    } else {
        departs(models::qwen2());
    }
}

/// Llama, without a sliding window, keeps to its recompute.
#[test]
fn llama_keeps_to_its_recompute() {
    keeps(models::llama());
}

/// Qwen3, no sliding window (0.11.1 refuses one).
#[test]
fn qwen3_keeps_to_its_recompute() {
    keeps(models::qwen3());
}

/// Phi-3, no sliding window.
#[test]
fn phi3_keeps_to_its_recompute() {
    keeps(models::phi3());
}

/// Gemma 2 leaves its sliding window unhandled (the config's own comment:
/// "TODO: Handle the sliding window in the attention mask"): a prefill
/// masks every layer by the window, a decoded token none
/// (docs/findings/candle-transformers-gemma2-sliding-window.md); with the
/// patch (even layers slide, odd ones are global) it keeps to its
/// recompute.
#[test]
fn gemma2_decoding_past_the_window_departs_from_the_recompute() {
    if patched() {
        keeps(models::gemma2());
    } else {
        departs(models::gemma2());
    }
}

/// Gemma 3 (one KV head, as Gemma 3 1B): a prefill's sliding layers
/// attend W + 1 keys where a decoded token attends the W its
/// `RotatingKvCache` holds
/// (docs/findings/candle-transformers-gemma3-prefill-window-plus-one.md).
/// With the patch, decoding keeps to the recompute, and a chunk that
/// starts after the first and crosses the window still fails: the
/// rotating cache returns fewer keys than the mask spans
/// (docs/candle-transformers.md, "Gemma 3").
#[test]
fn gemma3_prefill_attends_one_key_more_than_decoding() {
    if patched() {
        keeps_with(
            models::gemma3(),
            CheckSettings::from_env().unwrap().profile("decode"),
        );
        let growth = CheckSettings::from_env().unwrap().profile("growth");
        let failure = check(models::gemma3(), &growth).unwrap_err();
        assert!(
            failure
                .to_string()
                .contains("shape mismatch in broadcast_add"),
            "{failure}"
        );
    } else {
        departs(models::gemma3());
    }
}

/// Gemma 3 with two KV heads (as the 4B, 12B and 27B models): the value
/// rows reach the cache's `slice_set` transposed, and every forward of
/// more than one token fails (known: candle's open pull request #3902).
#[test]
fn gemma3_with_several_kv_heads_fails_a_multi_token_forward() {
    let settings = CheckSettings::from_env().unwrap().profile("decode");
    if patched() {
        keeps_with(models::gemma3_kv2(), settings);
    } else {
        let failure = check(models::gemma3_kv2(), &settings).unwrap_err();
        assert!(
            failure
                .to_string()
                .contains("slice-set only supports contiguous tensors"),
            "{failure}"
        );
    }
}

/// A quantized Llama loaded from GGUF keeps to its recompute.
#[test]
fn quantized_llama_keeps_to_its_recompute() {
    keeps(quantized::quantized_llama());
}

/// A quantized Gemma 3 loaded from GGUF: a second multi-token forward
/// fails (its mask joins an f32 block to a u32 one), and a decoded token
/// past the window attends every cached key
/// (docs/findings/candle-transformers-quantized-gemma3-ignores-window.md);
/// with the patch it keeps to its recompute.
#[test]
fn quantized_gemma3_departs_from_its_recompute() {
    if patched() {
        keeps(quantized::quantized_gemma3());
        return;
    }
    let decode = CheckSettings::from_env().unwrap().profile("decode");
    let failure = check(quantized::quantized_gemma3(), &decode).unwrap_err();
    println!("{failure}");
    assert!(
        failure
            .to_string()
            .contains("differ from the model's recompute without its cache"),
        "{failure}"
    );
    // Chunks after the first meet either defect first.
    let growth = CheckSettings::from_env().unwrap().profile("growth");
    let failure = check(quantized::quantized_gemma3(), &growth).unwrap_err();
    let report = failure.to_string();
    assert!(
        report.contains("dtype mismatch in cat")
            || report.contains("differ from the model's recompute without its cache"),
        "{report}"
    );
}
