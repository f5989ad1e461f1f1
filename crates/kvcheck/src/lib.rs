//! kvcheck: proves streaming attention KV caches correct by checking them,
//! op by op, against the reference model of the cache contract
//! (`docs/contract.md`).
//!
//! The vocabulary ([`Op`], [`Outcome`], [`Config`]) comes from `kvmodel`;
//! the crate is four wings that follow the data (`docs/architecture.md`),
//! and each is named by its path: no module is re-exported under another.
//!
//! - [`subject`]: what is checked. The shipped caches, the naive
//!   [`subject::ReferenceCache`] with injectable faults, a cache in another
//!   process ([`subject::ExecSubject`], `docs/subject-protocol.md`) or in
//!   another crate ([`subject::Factory`]), each with its [`Capabilities`];
//!   [`SubjectSpec`] is the parsed `--subject` text.
//! - [`check`](mod@check): the code that applies ops to a subject. [`Lockstep`]
//!   applies each op to the model and to a subject and compares everything
//!   bit for bit, returning a [`Divergence`]; [`check::record`] runs a plan
//!   on a subject and records what it showed, for the oracles that need no
//!   model; both build payloads and classify refusals the same way. Also
//!   the view checks, coverage and the kvtrace/1 format ([`Trace`]).
//! - [`engine`]: how op sequences are made and what is done with a failure:
//!   the property suites ([`engine::suite`], run case by case by [`engine::case`]), the
//!   campaign of `kvcheck run` ([`engine::scale`]), the [`Explorer`], the
//!   fuzz bodies, [`engine::minimize`], [`engine::replay`],
//!   [`engine::explain`] and [`engine::power`]; [`engine::prefix`] is the
//!   prefix-cache family's lockstep, replay and minimizer (docs/contract.md
//!   Part II). [`engine::oracle`] and
//!   [`engine::relation`] say what a step is compared with: the model by
//!   default, the relations of the contract's §9 (the subject against its
//!   own transformed runs, no model), or another subject (differential);
//!   [`engine::triage`] groups the divergences of a campaign that keeps
//!   going.
//! - [`report`]: the JSON reports of campaigns and their merge, with the
//!   data they carry.
//!
//! Wings depend downwards only: `check` and `subject` name no `engine`
//! path, and `report` names neither (a test in `tests/harness/layers.rs`
//! reads the sources and keeps it so).
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
pub mod codec;
pub mod engine;
pub mod report;
pub mod settings;
pub mod subject;

// The vocabulary a user needs, at the crate root.
pub use check::divergence::{Divergence, DivergenceKind};
pub use check::lockstep::{Lockstep, SetupError};
pub use check::trace::Trace;
pub use engine::check::{CheckFailure, CheckSettings, CheckSettingsError, Checked};
pub use engine::explore::Explorer;
pub use subject::{Capabilities, SubjectSpec};

pub use kvmodel::{
    CacheError, Config, Dtype, Effect, ErrorKind, Model, Op, Outcome, PackedPolicy, Quant, Trim,
    Variant, Write,
};

/// Checks the cache `factory` builds, as `kvcheck.check` does a Python
/// cache: the campaign of `kvcheck run` over every profile its
/// capabilities open, the first divergence minimized and saved with the
/// line that reproduces it from the calling test
/// (`KVCHECK_REPLAY=TRACE cargo test NAME`). With `settings.replay` set
/// (`KVCHECK_REPLAY`), only that trace is replayed. `Ok` when no case
/// diverged, enough writes were served and at most
/// [`CheckSettings::max_outside`] of the drawn ops lay outside the cache's
/// declared domain; see [`engine::check`].
///
/// ```no_run
/// use kvcheck::subject::{Capabilities, Factory, ReferenceCache};
/// use kvcheck::CheckSettings;
///
/// let factory = Factory::new("naive", Capabilities::full(), |config, device| {
///     Ok(Box::new(ReferenceCache::new(config, device)?))
/// });
/// let checked = kvcheck::check(factory, &CheckSettings::from_env().unwrap()).unwrap();
/// println!("{checked}");
/// ```
pub fn check(factory: subject::Factory, settings: &CheckSettings) -> Result<Checked, CheckFailure> {
    engine::check::check(factory, settings)
}

/// Checks the prefix cache `factory` builds (docs/contract.md Part II), as
/// [`check()`] does a streaming cache: a campaign of random cases judged
/// by the model (a cache whose policy is the contract's) or by the
/// invariants of §17 (`policy: Own`), the first failure minimized and
/// saved with the line that reproduces it from the calling test. With
/// `settings.replay` (`KVCHECK_REPLAY`) set to a prefix trace, only that
/// trace is replayed. See [`engine::prefix::check`].
///
/// ```no_run
/// use candle_core::Device;
/// use kvcache::PagedCache;
/// use kvcheck::engine::prefix::check::PrefixFactory;
/// use kvcheck::subject::prefix::PrefixCapabilities;
/// use kvcheck::CheckSettings;
///
/// let factory = PrefixFactory {
///     name: "paged".into(),
///     capabilities: PrefixCapabilities::full(),
///     make: |config: &kvmodel::prefix::PrefixConfig| {
///         PagedCache::new(config, &Device::Cpu).map_err(|e| e.to_string())
///     },
/// };
/// kvcheck::check_prefix(factory, &CheckSettings::from_env().unwrap()).unwrap();
/// ```
pub fn check_prefix<C, F>(
    factory: engine::prefix::check::PrefixFactory<F>,
    settings: &CheckSettings,
) -> Result<engine::prefix::check::PrefixChecked, engine::prefix::check::PrefixCheckFailure>
where
    C: subject::prefix::PrefixSubjectCache,
    F: FnMut(&kvmodel::prefix::PrefixConfig) -> Result<C, String>,
{
    engine::prefix::check::check_prefix(factory, settings)
}
