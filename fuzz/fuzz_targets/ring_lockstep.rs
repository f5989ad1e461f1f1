//! Ring cache vs. the model, op by op, on the dense target's structured
//! bounded cases (`kvcheck::engine::fuzzcase::FuzzCase`). A divergence panics with
//! the report and the kvtrace JSON; `kvcheck from-fuzz ring_lockstep FILE`
//! makes the same trace (replay it with `--subject cache:ring`).
#![no_main]

use kvcheck::engine::fuzzcase::Target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = Target::RingLockstep.check(data) {
        panic!("{report}");
    }
});
