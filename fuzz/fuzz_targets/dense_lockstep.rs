//! Dense cache vs. the model, op by op, on structured bounded cases
//! (`kvcheck::engine::fuzzcase::FuzzCase`). A divergence panics with the report
//! and the kvtrace JSON; `kvcheck from-fuzz dense_lockstep FILE` makes the same trace.
#![no_main]

use kvcheck::engine::fuzzcase::Target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = Target::DenseLockstep.check(data) {
        panic!("{report}");
    }
});
