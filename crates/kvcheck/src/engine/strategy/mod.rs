//! Op and configuration strategies, shared by the property suites and
//! `kvcheck run`.
//!
//! Ops are drawn from the current model state so that most of them are
//! interesting: appends that overflow, denoise-style rewrites of the last
//! chunk, overlapping writes, gaps, rewrites of evicted positions, chunks
//! larger than `C − S`, recent windows (negative too), head ranges (invalid
//! too), rewinds into evicted history, evicts, pins, resets, zero-length
//! probes and negative numbers.
//!
//! Everything is drawn within the subject's [`Capabilities`](crate::subject::Capabilities) (carried by
//! [`RefState`]): op kinds, head ranges and recent windows it lacks are
//! never generated, and [`profile_configs`] keeps only the configurations
//! it can open.

mod case;
mod ops;
mod profile;

pub use case::*;
pub use ops::*;
pub use profile::*;
