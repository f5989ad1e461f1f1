//! The driver and what it compares: one op through the model and the
//! subject ([`lockstep`]), the deterministic payloads a write carries
//! ([`payload`]), the view checks (segments, aliasing claims, values), the
//! report of a disagreement ([`divergence`]), the events a run reached
//! ([`coverage`]) and the kvtrace/1 format every engine reads and writes
//! ([`trace`]). Every engine goes through here; nothing here knows which
//! engine is calling.

pub(crate) mod atomic;
pub mod coverage;
pub mod divergence;
pub mod lockstep;
pub mod payload;
pub mod record;
pub mod relation;
pub mod reproduce;
pub(crate) mod segments;
pub mod trace;
pub(crate) mod viewcheck;
