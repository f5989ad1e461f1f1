//! kvcheck: proves streaming attention KV caches correct by checking them,
//! op by op, against the reference model of `SPEC.md`.
//!
//! The vocabulary ([`Op`], [`Outcome`], [`Config`]) comes from `kvmodel`;
//! this crate adds what every engine shares:
//!
//! - [`lockstep::Lockstep`], the one driver that applies each op to the
//!   model and to a cache and compares everything, bit for bit;
//! - [`divergence::Divergence`], the report of a disagreement;
//! - [`trace::Trace`], the kvtrace/1 file format;
//! - [`payload`], the deterministic K/V values the driver writes;
//! - [`coverage::Coverage`], the labelled events a run reached;
//! - [`explore::Explorer`], breadth-first exploration of every op
//!   sequence up to a depth, with shortest counterexamples;
//! - [`subject`], the implementations under test: the shipped caches, the
//!   naive [`subject::ReferenceCache`] with injectable faults, a cache in
//!   another process ([`subject::ExecSubject`], `docs/subject-protocol.md`)
//!   or in another crate ([`subject::Factory`]), each with its
//!   [`subject::Capabilities`];
//! - [`suite`], every engine for a cache of another crate in one call.
//!
//! ```
//! use kvcheck::lockstep::Lockstep;
//! use kvcheck::{Config, Op, Write};
//!
//! let mut config = Config::dense(8);
//! config.sink = 2;
//! let mut run = Lockstep::new(&config).unwrap();
//! let ops = [Op::Write(Write::new(0, 4)), Op::Write(Write::new(4, 6)), Op::Write(Write::new(4, 6))];
//! run.run(&ops).expect("the dense cache matches the model");
//! ```

pub mod atomic;
pub mod coverage;
pub mod divergence;
pub mod explain;
pub mod explore;
#[cfg(feature = "arbitrary")]
pub mod fuzzcase;
pub mod lockstep;
pub mod machine;
pub mod minimize;
pub mod oracle;
pub mod payload;
pub mod power;
pub mod relation;
pub mod replay;
pub mod scale;
mod segments;
pub mod strategy;
pub mod subject;
pub mod suite;
pub mod trace;
pub mod triage;
mod viewcheck;

pub use kvmodel::{
    CacheError, Config, Dtype, Effect, ErrorKind, Model, Op, Outcome, PackedPolicy, Quant, Variant,
    Write,
};
