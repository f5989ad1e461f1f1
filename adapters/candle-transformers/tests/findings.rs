//! The minimized traces of the candle-transformers findings
//! (docs/findings/), each replayed on the model it was found on: on
//! 0.11.1 it still fails; with `CANDLE_TRANSFORMERS_PATCHED=1` (built
//! against the patched copy, docs/candle-transformers.md) it passes.

use std::path::PathBuf;

use kvcheck::engine::check::replay;
use kvcheck::CheckSettings;
use kvcheck_candle_transformers::models;

#[test]
fn mistral_decoding_past_the_window() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/findings/candle-transformers-mistral-decode-ignores-window.kvtrace.json");
    let patched = std::env::var("CANDLE_TRANSFORMERS_PATCHED").is_ok_and(|v| v == "1");
    match (
        patched,
        replay(models::mistral(), &trace, &CheckSettings::default()),
    ) {
        (false, Err(failure)) => println!("{failure}"),
        (true, Ok(checked)) => println!("{checked}"),
        (false, Ok(_)) => panic!("passes on candle-transformers 0.11.1"),
        (true, Err(failure)) => panic!("still fails with the patch: {failure}"),
    }
}
