//! The prefix-cache family (docs/contract.md Part II, docs/kvtrace.md
//! "Prefix caches") in kvcheck's engines: telling a prefix trace from a
//! streaming one ([`is_prefix_trace`]), loading it with a typed error
//! ([`load`]), the lockstep of a [`kvcache::PrefixCache`] against
//! `kvmodel::prefix::PrefixModel` ([`lockstep`]), replaying a trace
//! ([`replay`]) and shrinking a failing one ([`minimize`]); with feature
//! `arbitrary`, the body of the `prefix_lockstep` fuzz target (`fuzz`).
//!
//! ```
//! use kvcheck::engine::prefix::{from_json, replay_on_paged};
//!
//! let trace = from_json(r#"{"format": "kvtrace/1",
//!     "config": {"variant": "prefix", "blocks": 2, "block_size": 2},
//!     "ops": [{"start": {"request": 0, "tokens": [1, 2, 3]}}, {"compute": {"request": 0, "count": 3}}],
//!     "expect": [{"ok": {"hit": 0, "in_use": 2, "cached": 0, "free": 0}},
//!                {"ok": {"in_use": 2, "cached": 0, "free": 0}}]}"#, None).unwrap();
//! assert!(replay_on_paged(&trace).unwrap().divergence.is_none());
//! ```

pub mod campaign;
pub mod check;
pub mod drive;
pub mod explore;
#[cfg(feature = "arbitrary")]
pub mod fuzz;
pub mod invariants;
pub mod lockstep;
pub mod minimize;
pub mod power;
pub mod strategy;

use std::path::{Path, PathBuf};

use candle_core::Device;
use kvcache::{PagedCache, PrefixCache, PrefixCacheError};
use kvmodel::prefix::{PrefixOutcome, PrefixTrace, PrefixTraceError};

pub use lockstep::{outcome_class, PrefixDivergence, PrefixDivergenceKind, PrefixLockstep};

/// Whether `text` is a prefix-family document: a JSON object whose
/// `config.variant` is `"prefix"`. Anything else (a streaming trace, text
/// that is not JSON) is `false`, and is the streaming loader's to judge.
pub fn is_prefix_trace(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek {
        config: PeekConfig,
    }
    #[derive(serde::Deserialize)]
    struct PeekConfig {
        variant: String,
    }
    serde_json::from_str::<Peek>(text).is_ok_and(|p| p.config.variant == "prefix")
}

/// Why a prefix trace could not be loaded; every message names the file
/// (when there is one) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum PrefixLoadError {
    /// The file could not be read.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The JSON is not a prefix trace (unknown field or op, a bad config,
    /// a value of the wrong type): serde's message, with line and column.
    #[error("{}malformed prefix trace: {source}", where_(.path))]
    Syntax {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// serde's error.
        source: serde_json::Error,
    },
    /// The document parses but breaks a loading rule (the format tag, the
    /// length of `expect`).
    #[error("{}invalid prefix trace: {source}", where_(.path))]
    Invalid {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// The rule broken.
        source: PrefixTraceError,
    },
}

fn where_(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

/// Parses and validates a prefix trace (`path` only names it in errors).
pub fn from_json(text: &str, path: Option<&Path>) -> Result<PrefixTrace, PrefixLoadError> {
    let path = path.map(Path::to_path_buf);
    let trace: PrefixTrace =
        serde_json::from_str(text).map_err(|source| PrefixLoadError::Syntax {
            path: path.clone(),
            source,
        })?;
    trace
        .validate()
        .map_err(|source| PrefixLoadError::Invalid { path, source })?;
    Ok(trace)
}

/// Reads and validates the prefix trace at `path`.
pub fn load(path: &Path) -> Result<PrefixTrace, PrefixLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| PrefixLoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_json(&text, Some(path))
}

/// What replaying a prefix trace showed: the model's outcome of every op
/// run, and the first divergence if any (then `outcomes` stops before its
/// step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixReplay {
    /// The model's outcomes of the ops that agreed, in order.
    pub outcomes: Vec<PrefixOutcome>,
    /// The first disagreement: with `expect` (checked first, per op), or
    /// between the cache and the model.
    pub divergence: Option<PrefixDivergence>,
}

impl PrefixReplay {
    /// Whether every op agreed.
    pub fn passed(&self) -> bool {
        self.divergence.is_none()
    }
}

/// Replays `trace` (validated) in lockstep on `cache`, op `i` under index
/// `i`: per op, the cache against the model ([`PrefixLockstep::step`]),
/// then the model's outcome against `expect[i]` when the trace has one. A
/// trace that fails its own validation is refused, not replayed.
pub fn replay<C: PrefixCache>(
    trace: &PrefixTrace,
    cache: C,
) -> Result<PrefixReplay, PrefixTraceError> {
    trace.validate()?;
    let mut lockstep = PrefixLockstep::new(cache).map_err(PrefixTraceError::Config)?;
    let mut outcomes = Vec::with_capacity(trace.ops.len());
    for (i, op) in trace.ops.iter().enumerate() {
        let outcome = match lockstep.step(i as u64, op) {
            Ok(outcome) => outcome,
            Err(divergence) => {
                return Ok(PrefixReplay {
                    outcomes,
                    divergence: Some(divergence),
                })
            }
        };
        if let Some(expected) = trace.expect.as_ref().map(|e| &e[i]) {
            if *expected != outcome {
                let divergence = PrefixDivergence {
                    step: i,
                    op: op.to_string(),
                    op_name: op.name(),
                    kind: PrefixDivergenceKind::Expect,
                    expected: expected.to_string(),
                    actual: format!("{outcome} (the model's outcome)"),
                    class: lockstep::outcome_class(&outcome),
                };
                return Ok(PrefixReplay {
                    outcomes,
                    divergence: Some(divergence),
                });
            }
        }
        outcomes.push(outcome);
    }
    Ok(PrefixReplay {
        outcomes,
        divergence: None,
    })
}

/// Why a prefix trace could not be replayed on the shipped cache.
#[derive(Debug, thiserror::Error)]
pub enum PrefixReplayError {
    /// The trace breaks a loading rule.
    #[error(transparent)]
    Trace(#[from] PrefixTraceError),
    /// The cache could not be built (its backend failed).
    #[error("the paged cache: {0}")]
    Cache(#[from] PrefixCacheError),
}

/// [`replay`] on the shipped [`PagedCache`], f32 on the CPU.
pub fn replay_on_paged(trace: &PrefixTrace) -> Result<PrefixReplay, PrefixReplayError> {
    trace.validate()?;
    let cache = PagedCache::new(&trace.config, &Device::Cpu)?;
    Ok(replay(trace, cache)?)
}
