//! Structured fuzz inputs and the bodies of the fuzz targets (feature
//! `arbitrary`).
//!
//! The fuzz targets in `fuzz/`, `kvcheck from-fuzz` and the corpus test
//! (`tests/suites/fuzz_corpus.rs`) all decode input bytes here, so a crash file
//! means the same case everywhere.
//!
//! A [`FuzzCase`] is a bounded configuration (capacity ≤ 64, batch ≤ 2,
//! heads ≤ 4, head_dim ≤ 8, always valid) and up to [`MAX_OPS`] ops. The
//! bytes are read as a [`FuzzConfig`] (derived [`Arbitrary`](arbitrary::Arbitrary), one byte per
//! field) followed by four bytes per op. Ops are decoded *relative to the
//! model's state* (an append starts at the global end, a rewrite repeats the
//! latest append), so libFuzzer's mutations change what the stream does
//! instead of producing a wall of `non_sequential` refusals. A few op codes
//! still produce raw, negative or out-of-range arguments so that every
//! refusal of docs/contract.md §3 stays reachable.
//!
//! [`FuzzCase::to_bytes`] is the inverse used to turn the test vectors into
//! a seed corpus.

mod check;
mod config;
mod limits;
mod ops;
mod target;

pub use check::*;
pub use config::*;
pub use limits::*;
pub use ops::*;
pub use target::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::lockstep::Lockstep;
    use crate::subject::Capabilities;
    use arbitrary::{Arbitrary, Unstructured};
    use kvmodel::Variant;

    #[test]
    fn decoding_into_a_run_gives_the_decoded_case() {
        let mut state = 3u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as u8
        };
        let mut ops = 0;
        for n in 0..60 {
            let data: Vec<u8> = (0..CONFIG_BYTES + 4 * (n % 40)).map(|_| next()).collect();
            for variant in [Variant::Dense, Variant::Packed] {
                let case = FuzzCase::from_bytes(variant, &data);
                let mut u = Unstructured::new(&data);
                let config = FuzzConfig::arbitrary(&mut u).unwrap().to_config(variant);
                assert_eq!(config, case.config);
                let mut run = Lockstep::new(&config).unwrap();
                decode_into(&mut run, &mut u, &Capabilities::full()).expect("shipped caches agree");
                assert_eq!(run.ops(), case.ops.as_slice(), "{variant:?} {data:?}");
                ops += case.ops.len();
            }
        }
        assert!(ops > 1000);
    }
}
