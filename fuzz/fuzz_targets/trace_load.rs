//! Arbitrary bytes as a kvtrace file: loading must never panic, and a trace
//! that loads (and is small enough) replays through the model and the
//! shipped cache without a divergence.
#![no_main]

use kvcheck::engine::fuzzcase::Target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = Target::TraceLoad.check(data) {
        panic!("{report}");
    }
});
