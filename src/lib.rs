//! The kvcheck property suites.
//!
//! This package exists to hold the workspace-level integration suites in
//! `tests/`: the shared vectors, the proptest state machines that check every
//! cache against the reference model, the fuzz-corpus replay and the
//! regression corpus. The code under test lives in `crates/`.
