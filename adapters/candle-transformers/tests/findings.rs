//! The minimized traces of the candle-transformers findings
//! (docs/findings/), each replayed on the model it was found on: on
//! 0.11.1 it still fails; with `CANDLE_TRANSFORMERS_PATCHED=1` (built
//! against the patched copy, docs/candle-transformers.md) it passes.

use std::path::PathBuf;

use kvcheck::engine::check::replay;
use kvcheck::subject::Factory;
use kvcheck::CheckSettings;
use kvcheck_candle_transformers::{models, quantized};

fn finding(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/findings")
        .join(format!("candle-transformers-{name}.kvtrace.json"))
}

/// Replays finding `name` on `factory`: on 0.11.1 the replay must fail
/// with a report that says `says`; patched, it must pass.
fn replays(factory: Factory, name: &str, says: &str) {
    let patched = std::env::var("CANDLE_TRANSFORMERS_PATCHED").is_ok_and(|v| v == "1");
    let result = replay(factory, &finding(name), &CheckSettings::default());
    match (patched, result) {
        (false, Err(failure)) => {
            let report = failure.to_string();
            println!("{report}");
            assert!(report.contains(says), "{name}: {report}");
        }
        (true, Ok(checked)) => println!("{checked}"),
        (false, Ok(_)) => panic!("{name}: passes on candle-transformers 0.11.1"),
        (true, Err(failure)) => panic!("{name}: still fails with the patch: {failure}"),
    }
}

const MISMATCH: &str = "differ from the model's recompute without its cache";

#[test]
fn mistral_decoding_past_the_window() {
    replays(models::mistral(), "mistral-decode-ignores-window", MISMATCH);
}

/// Gemma 3, window 1: a prefill of 2 tokens (its second query attends 2
/// keys on the sliding layer), then a decoded token (attending the 1 key
/// its cache holds).
#[test]
fn gemma3_prefill_attends_one_key_more_than_decoding() {
    replays(models::gemma3(), "gemma3-prefill-window-plus-one", MISMATCH);
}

/// Quantized Gemma 3 (GGUF), window 1: a prefill of 2 tokens, then a
/// decoded token that attends every cached key.
#[test]
fn quantized_gemma3_decoding_past_the_window() {
    replays(
        quantized::quantized_gemma3(),
        "quantized-gemma3-ignores-window",
        MISMATCH,
    );
}

/// Gemma 3 with two KV heads: a prefill of 2 tokens fails in the cache's
/// `slice_set`.
#[test]
fn gemma3_several_kv_heads_prefill() {
    replays(
        models::gemma3_kv2(),
        "gemma3-several-kv-heads",
        "slice-set only supports contiguous tensors",
    );
}

/// Gemma 2, window 1: a prefill of 2 tokens (masked by the window on
/// every layer), then a decoded token (masked on none).
#[test]
fn gemma2_sliding_window() {
    replays(models::gemma2(), "gemma2-sliding-window", MISMATCH);
}
