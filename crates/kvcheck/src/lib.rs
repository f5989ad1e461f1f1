//! kvcheck: proves streaming attention KV caches correct by checking them,
//! op by op, against the reference model of `SPEC.md`.
//!
//! The vocabulary ([`Op`], [`Outcome`], [`Config`]) comes from `kvmodel`;
//! the crate is four wings that follow the data (`docs/architecture.md`):
//!
//! - [`subject`]: what is checked. The shipped caches, the naive
//!   [`subject::ReferenceCache`] with injectable faults, a cache in another
//!   process ([`subject::ExecSubject`], `docs/subject-protocol.md`) or in
//!   another crate ([`subject::Factory`]), each with its [`Capabilities`];
//!   [`SubjectSpec`] is the parsed `--subject` text.
//! - [`check`]: the one driver, [`Lockstep`], that applies each op to the
//!   model and to a subject and compares everything bit for bit, returning a
//!   [`Divergence`]; the payloads, view checks, coverage and the kvtrace/1
//!   format ([`Trace`]).
//! - [`engine`]: how op sequences are made and what is done with a failure:
//!   the property suites ([`suite`], [`machine`]), the campaign of `kvcheck
//!   run` ([`scale`]), the [`Explorer`], the fuzz bodies, [`minimize`],
//!   [`replay`], [`explain`] and [`power`].
//!   [`oracle`] and [`relation`] say what a step is compared with: the
//!   model by default, the relations of SPEC.md §9 (the subject against its
//!   own transformed runs, no model), or another subject (differential);
//!   [`triage`] groups the divergences of a campaign that keeps going.
//! - [`report`]: the JSON reports of campaigns and their merge.
//!
//! ```
//! use kvcheck::{Config, Lockstep, Op, Write};
//!
//! let mut config = Config::dense(8);
//! config.sink = 2;
//! let mut run = Lockstep::new(&config).unwrap();
//! let ops = [Op::Write(Write::new(0, 4)), Op::Write(Write::new(4, 6)), Op::Write(Write::new(4, 6))];
//! run.run(&ops).expect("the dense cache matches the model");
//! ```

pub mod check;
pub mod engine;
pub mod report;
pub mod settings;
pub mod subject;

// The vocabulary a user needs, at the crate root.
pub use check::divergence::{Divergence, DivergenceKind};
pub use check::lockstep::{Lockstep, SetupError};
pub use check::trace::Trace;
pub use engine::explore::Explorer;
pub use subject::{Capabilities, SubjectSpec};

// The modules by their earlier flat paths (`kvcheck::lockstep`, …), which
// the binary, the fuzz targets, the benches and users' tests name.
pub(crate) use check::{atomic, segments, viewcheck};
pub use check::{coverage, divergence, lockstep, payload, trace};
#[cfg(feature = "arbitrary")]
pub use engine::fuzzcase;
pub use engine::{
    explain, explore, machine, minimize, oracle, power, relation, replay, scale, strategy, suite,
    triage,
};

pub use kvmodel::{
    CacheError, Config, Dtype, Effect, ErrorKind, Model, Op, Outcome, PackedPolicy, Quant, Variant,
    Write,
};
