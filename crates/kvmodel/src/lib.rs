//! The reference model of the kvcheck cache contract (`docs/contract.md`).
//!
//! This crate is the oracle. It implements the contract literally, with
//! positions in a `BTreeMap` and no cleverness, so that it can be read
//! against the specification line by line. It also owns the vocabulary that
//! the caches and the harness share without depending on candle:
//!
//! - [`Config`] (docs/contract.md §1) and its validation,
//! - [`Op`] / [`Write`] (docs/contract.md §3, docs/kvtrace.md `ops`),
//! - [`Outcome`], [`Effect`], [`ErrorKind`] (docs/contract.md §3, docs/kvtrace.md `expect`),
//! - [`CacheError`], the typed error with the numbers that explain it,
//! - [`quant`], the scalar reference quantizer of docs/contract.md §6,
//! - [`prefix`], the reference model of prefix caches (docs/contract.md
//!   Part II): block pools shared by requests through their token prefixes.
//!
//! ```
//! use kvmodel::{Config, Model, Op, Write};
//!
//! let mut config = Config::dense(8);
//! config.sink = 2;
//! let mut model = Model::new(&config).unwrap();
//! for (i, start) in [0, 4, 8].into_iter().enumerate() {
//!     model.apply(i as u64, &Op::Write(Write::new(start, 4))).unwrap();
//! }
//! // The oldest non-sink positions were evicted; the sink stays visible.
//! assert_eq!(model.view(None), vec![0, 1, 6, 7, 8, 9, 10, 11]);
//! ```

pub mod config;
pub mod error;
pub mod model;
pub mod op;
pub mod outcome;
pub mod prefix;
pub mod quant;

pub use config::{Config, Dtype, PackedPolicy, Quant, Trim, Variant, MAX_ELEMENTS};
pub use error::{format_ranges, CacheError};
pub use model::{Chunk, Model};
pub use op::{non_negative, CheckedWrite, Op, Write};
pub use outcome::{Effect, ErrorKind, Outcome};
