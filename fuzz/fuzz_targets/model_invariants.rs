//! The reference model alone against the invariants of docs/contract.md (|R| ≤ C,
//! protected never evicted, ascending views, refusals change nothing, G
//! monotone except rewind/reset, …) on long structured sequences.
#![no_main]

use kvcheck::engine::fuzzcase::Target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = Target::ModelInvariants.check(data) {
        panic!("{report}");
    }
});
