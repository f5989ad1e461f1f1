//! The paged prefix cache vs. `kvmodel::prefix::PrefixModel`, op by op, on
//! arbitrary-derived ops over few requests and a tiny token alphabet
//! (`kvcheck::engine::prefix::fuzz`). A divergence panics with the report
//! and the kvtrace JSON; save the JSON and `kvcheck replay` it.
#![no_main]

use kvcheck::engine::prefix::fuzz::check;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = check(data) {
        panic!("{report}");
    }
});
