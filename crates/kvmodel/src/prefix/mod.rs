//! The reference model of prefix caches (docs/contract.md Part II, §10–§18).
//!
//! A prefix cache keeps the KV of token prefixes that requests computed, in
//! a pool of `N` blocks of `B` token slots, so that a later request whose
//! prompt starts with a cached prefix reuses it instead of computing it
//! again: vLLM's block manager, sglang's radix tree (`B = 1`). The model
//! reads the contract literally: requests are token lists, the cache is a
//! set of block-aligned token prefixes, and the free, cached and in-use
//! counts are derived from them on every call.
//!
//! - [`PrefixConfig`], [`HitRule`] (§11) and their validation,
//! - [`PrefixOp`] (§15, docs/kvtrace.md "Prefix caches"),
//! - [`PrefixOutcome`], [`PrefixEffect`], [`BlockCounts`],
//!   [`PrefixErrorKind`] and the typed [`PrefixError`] (§12, §15),
//! - [`PrefixModel`], the oracle,
//! - [`payload`]: the payload rule (§16), [`check_rows`] to judge a
//!   subject's rows with it,
//! - [`PrefixTrace`], the kvtrace/1 document of the family.
//!
//! ```
//! use kvmodel::prefix::{PrefixConfig, PrefixModel, PrefixOp};
//!
//! let mut model = PrefixModel::new(&PrefixConfig::new(4, 2)).unwrap();
//! let ops = [
//!     PrefixOp::Start { request: 0, tokens: vec![7, 8, 9, 10, 11] },
//!     PrefixOp::Compute { request: 0, count: 5 },
//!     PrefixOp::Finish { request: 0 },
//!     // Shares the two full blocks [7 8] and [7 8 9 10]: a hit of 4.
//!     PrefixOp::Start { request: 1, tokens: vec![7, 8, 9, 10, 3] },
//! ];
//! let effects: Vec<_> = ops
//!     .iter()
//!     .enumerate()
//!     .map(|(i, op)| model.apply(i as u64, op).unwrap())
//!     .collect();
//! assert_eq!(effects[3].hit, Some(4));
//! assert_eq!((effects[3].in_use, effects[3].cached, effects[3].free), (3, 0, 1));
//! ```

pub mod config;
pub mod error;
pub mod model;
pub mod op;
pub mod outcome;
pub mod payload;
pub mod trace;
pub mod window;

pub use config::{HitRule, PrefixConfig, MAX_POOL_ELEMENTS};
pub use error::PrefixError;
pub use model::{PrefixModel, Request};
pub use op::{PrefixOp, RequestId, Token};
pub use outcome::{BlockCounts, PrefixEffect, PrefixErrorKind, PrefixOutcome};
pub use payload::{check_rows, payload_row, payload_rows, PayloadError, RowAt};
pub use trace::{PrefixTrace, PrefixTraceError};
pub use window::Window;

#[cfg(test)]
mod tests;
