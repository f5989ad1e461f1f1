//! The minimized traces of the candle-nn findings (docs/findings/), each
//! replayed on the cache it was found on: on candle-nn 0.11.1 it still
//! fails; with `CANDLE_NN_PATCHED=1` (built against the patched copy,
//! docs/candle.md) it passes. A trace names the oracle that judged it.

use std::path::PathBuf;

use kvcheck::engine::check::replay;
use kvcheck::subject::Factory;
use kvcheck::CheckSettings;
use kvcheck_candle_nn::{rotating, scattered};

fn finding(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/findings")
        .join(format!("candle-nn-{name}.kvtrace.json"))
}

fn replays(factory: Factory, name: &str) {
    let patched = std::env::var("CANDLE_NN_PATCHED").is_ok_and(|v| v == "1");
    let result = replay(factory, &finding(name), &CheckSettings::default());
    match (patched, result) {
        (false, Err(failure)) => println!("{failure}"),
        (true, Ok(checked)) => println!("{checked}"),
        (false, Ok(_)) => panic!("{name}: passes on candle-nn 0.11.1"),
        (true, Err(failure)) => panic!("{name}: still fails with the patch: {failure}"),
    }
}

#[test]
fn positions_at_the_window_label_rotated_rows() {
    replays(rotating::factory(), "rotating-positions-at-window");
}

#[test]
fn a_long_prefill_lets_the_newest_query_see_one_key_too_many() {
    replays(rotating::long_prefill(), "rotating-mask-window-plus-one");
}

#[test]
fn a_chunk_of_the_context_is_not_stored() {
    replays(scattered::factory(), "scattered-long-chunk-not-stored");
}
