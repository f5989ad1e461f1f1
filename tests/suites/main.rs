//! The workspace suites, one binary: the property suites of every profile
//! (`lockstep_suites`), the contract's vectors, the regression corpus, the
//! model's own invariants and the committed fuzz corpus. Filter by module:
//! `cargo test --test suites lockstep_suites::`. The opt-in Python
//! subjects live in the `external` binary.

mod fuzz_corpus;
mod lockstep_suites;
mod model_invariants;
mod regressions;
mod vectors;
