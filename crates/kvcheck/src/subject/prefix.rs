//! What the prefix engines drive (`crate::engine::prefix`): [`PrefixSubjectCache`], a prefix cache in
//! this process (every [`kvcache::PrefixCache`]) or in another one (an
//! `exec:` subject, docs/subject-protocol.md "The prefix family"), with the
//! answers a foreign cache can give besides the contract's ([`PrefixFailure`])
//! and what it declares it can express ([`PrefixCapabilities`]).

use std::fmt;

use kvcache::{PrefixCache, PrefixCacheError};
use kvmodel::prefix::{
    BlockCounts, HitRule, PrefixConfig, PrefixEffect, PrefixError, PrefixErrorKind, PrefixOp,
    RequestId,
};
use serde::Deserialize;
use serde::Serialize;

/// Why a prefix subject did not answer an op with an effect.
#[derive(Debug)]
pub enum PrefixFailure {
    /// A refusal of docs/contract.md §15. An in-process cache gives the
    /// error itself (`error`), compared with the model's exactly; a
    /// process gives the kind and its own message, compared by kind.
    Refused {
        /// The kind.
        kind: PrefixErrorKind,
        /// The very error, from an in-process cache.
        error: Option<PrefixError>,
        /// The message to show.
        message: String,
        /// The counts the subject reports after the refusal (a process
        /// sends them with every `err`); `None` from an in-process cache,
        /// whose [`PrefixSubjectCache::counts`] says.
        counts: Option<BlockCounts>,
    },
    /// The op lies outside what the subject is asked in real use: the case
    /// is cut before it, nothing is judged.
    Outside(String),
    /// Anything else: an exception of the library, a crash, a timeout, a
    /// broken protocol line, a tensor backend error. Never an agreement.
    Subject(String),
}

impl fmt::Display for PrefixFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixFailure::Refused { error: Some(e), .. } => write!(f, "err {e}"),
            PrefixFailure::Refused { kind, message, .. } => write!(f, "err {kind}: {message}"),
            PrefixFailure::Outside(reason) => write!(f, "outside the subject's domain: {reason}"),
            PrefixFailure::Subject(problem) => f.write_str(problem),
        }
    }
}

impl From<PrefixCacheError> for PrefixFailure {
    fn from(e: PrefixCacheError) -> PrefixFailure {
        match e {
            PrefixCacheError::Contract(error) => PrefixFailure::Refused {
                kind: error.kind(),
                message: error.to_string(),
                error: Some(error),
                counts: None,
            },
            PrefixCacheError::Backend(e) => PrefixFailure::Subject(format!("tensor backend: {e}")),
        }
    }
}

impl PrefixFailure {
    /// The §15 kind of a refusal; `None` for anything else.
    pub fn kind(&self) -> Option<PrefixErrorKind> {
        match self {
            PrefixFailure::Refused { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// Whether this answers the model's refusal `expected`: the very error
    /// when the subject gives one, else the same kind.
    pub fn agrees_with(&self, expected: &PrefixError) -> bool {
        match self {
            PrefixFailure::Refused {
                error: Some(error), ..
            } => error == expected,
            PrefixFailure::Refused { kind, .. } => *kind == expected.kind(),
            _ => false,
        }
    }
}

/// A prefix cache the engines can drive: the ops of docs/contract.md §15,
/// the counts of §12, and a read-only probe of a request's rows (§16).
pub trait PrefixSubjectCache {
    /// The configuration it was opened with.
    fn config(&self) -> &PrefixConfig;
    /// Applies `op`, the op of index `index` in its case.
    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure>;
    /// The counts after the last op (its effect's, or those a refusal
    /// reported).
    fn counts(&self) -> BlockCounts;
    /// The rows a read of `request` returns as f32 values laid out
    /// `[layer][position][dim]`: every computed position's, a windowed
    /// layer's from `window_start` on (docs/contract.md §19; the start the
    /// harness's record gives, which a process computes for itself);
    /// changes nothing.
    fn probe(&mut self, request: RequestId, window_start: usize)
        -> Result<Vec<f32>, PrefixFailure>;
    /// The block tables one request holds in the pool
    /// (docs/subject-protocol.md, `groups`): what bounds the blocks an op
    /// may need. The default is the config's ([`Groups::of`]).
    fn groups(&self) -> Groups {
        Groups::of(self.config())
    }
    /// The cache's own invariants; an external one has none to offer.
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }
}

impl<C: PrefixCache> PrefixSubjectCache for C {
    fn config(&self) -> &PrefixConfig {
        PrefixCache::config(self)
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure> {
        Ok(PrefixCache::apply(self, index, op)?)
    }

    fn counts(&self) -> BlockCounts {
        PrefixCache::counts(self)
    }

    fn probe(
        &mut self,
        request: RequestId,
        window_start: usize,
    ) -> Result<Vec<f32>, PrefixFailure> {
        // The shipped caches keep every row: a window only narrows what a
        // read returns.
        let all = self.read_values(request)?;
        let config = PrefixCache::config(self);
        let computed = all.len() / (config.layers * config.row_width).max(1);
        Ok(config.window_rows(&all, computed, window_start))
    }

    fn audit(&self) -> Result<(), String> {
        PrefixCache::audit(self)
    }
}

/// How a prefix subject is judged (docs/subject-protocol.md, "How a prefix
/// subject is judged").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// It keeps docs/contract.md §12–§15 exactly: judged by the model, op
    /// by op.
    Contract,
    /// Its library's own accounting and eviction policy: judged by the
    /// invariants of §17.
    #[default]
    Own,
}

/// In which order a subject accepts ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Steps {
    /// Any order.
    #[default]
    Free,
    /// Every token an op allocates is computed by the next op, as one
    /// scheduler step allocates and its forward pass computes: the driver
    /// follows every accepted `start`, `extend` and `resume` with a
    /// `compute` of every uncomputed token and issues no other `compute`.
    Whole,
}

impl Steps {
    /// The order a subject that declares `self` is driven in when a
    /// campaign asks for `asked`: a `whole` subject always gets whole
    /// steps, a `free` one whichever is asked.
    pub fn driven(self, asked: Steps) -> Steps {
        match self {
            Steps::Whole => Steps::Whole,
            Steps::Free => asked,
        }
    }
}

/// The op names of docs/contract.md §15, in its order.
pub const PREFIX_OPS: [&str; 11] = [
    "start", "compute", "extend", "fork", "rollback", "finish", "preempt", "resume", "read",
    "evict", "clear",
];

/// The block tables one request of a prefix subject holds, each allocating
/// from the one pool of `N` blocks (vLLM's KV cache groups: a hybrid model
/// with full-attention and sliding-window layers holds one table of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Groups {
    /// Tables of full-attention layers.
    #[serde(default)]
    pub full: usize,
    /// Tables of windowed layers (docs/contract.md §19).
    #[serde(default)]
    pub window: usize,
}

impl Groups {
    /// The default for `config`: one table, windowed when every layer is;
    /// a full and a windowed one when only some are.
    pub fn of(config: &PrefixConfig) -> Groups {
        match &config.window {
            None => Groups { full: 1, window: 0 },
            Some(w) if w.layers.len() == config.layers => Groups { full: 0, window: 1 },
            Some(_) => Groups { full: 1, window: 1 },
        }
    }

    /// Tables in all.
    pub fn total(self) -> usize {
        self.full + self.window
    }
}

/// The windows a prefix subject opens (docs/contract.md §19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowCaps {
    /// No window: every config it opens reads every position.
    None,
    /// Any window or none: the shipped paged cache, which keeps every row.
    Any,
    /// Every config carries a window of one of `sizes` (`None`: any) over
    /// `layers` (`None`: every layer).
    Fixed {
        /// The window sizes it opens.
        sizes: Option<Vec<usize>>,
        /// The windowed layers.
        layers: Option<Vec<usize>>,
    },
}

impl WindowCaps {
    /// Why these capabilities do not open `config`'s window, if they do not.
    pub fn refuses(&self, config: &PrefixConfig) -> Option<String> {
        match (self, &config.window) {
            (WindowCaps::Any, _) | (WindowCaps::None, None) => None,
            (WindowCaps::None, Some(_)) => Some("it opens no window".into()),
            (WindowCaps::Fixed { .. }, None) => Some("it opens only windowed configs".into()),
            (WindowCaps::Fixed { sizes, layers }, Some(w)) => {
                if sizes.as_ref().is_some_and(|s| !s.contains(&w.size)) {
                    return Some(format!("it opens window sizes {sizes:?}, not {}", w.size));
                }
                let want = match layers {
                    Some(l) => {
                        let mut l = l.clone();
                        l.sort_unstable();
                        l
                    }
                    None => (0..config.layers).collect(),
                };
                (want != w.layers)
                    .then(|| format!("its windowed layers are {want:?}, not {:?}", w.layers))
            }
        }
    }
}

/// What a prefix subject can express; the engines draw nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixCapabilities {
    /// The §15 ops it implements (names from [`PREFIX_OPS`]).
    pub ops: Vec<&'static str>,
    /// The hit rules it opens.
    pub hit: Vec<HitRule>,
    /// The block sizes it opens; `None`: any.
    pub block_sizes: Option<Vec<usize>>,
    /// How it is judged by default.
    pub policy: Policy,
    /// The order of ops it accepts.
    pub steps: Steps,
    /// The windows it opens.
    pub window: WindowCaps,
    /// The block tables one request holds; `None`: [`Groups::of`] the
    /// config.
    pub groups: Option<Groups>,
}

impl PrefixCapabilities {
    /// Everything: every op, both hit rules, any block size, the
    /// contract's policy, free order. What the shipped paged cache declares.
    pub fn full() -> PrefixCapabilities {
        PrefixCapabilities {
            ops: PREFIX_OPS.to_vec(),
            hit: vec![HitRule::LeaveOne, HitRule::Whole],
            block_sizes: None,
            policy: Policy::Contract,
            steps: Steps::Free,
            window: WindowCaps::Any,
            groups: None,
        }
    }

    /// Whether it implements the op named `name`.
    pub fn has_op(&self, name: &str) -> bool {
        self.ops.contains(&name)
    }

    /// Why `config` or `op` lies outside these capabilities, if it does:
    /// what a replay reports as unsupported by the subject.
    pub fn unsupported(&self, config: &PrefixConfig, ops: &[PrefixOp]) -> Option<String> {
        if !self.hit.contains(&config.hit) {
            return Some(format!("it opens no config with hit {:?}", config.hit));
        }
        if let Some(why) = self.window.refuses(config) {
            return Some(why);
        }
        if let Some(sizes) = &self.block_sizes {
            if !sizes.contains(&config.block_size) {
                return Some(format!(
                    "it opens block sizes {sizes:?}, not {}",
                    config.block_size
                ));
            }
        }
        ops.iter()
            .find(|op| !self.has_op(op.name()))
            .map(|op| format!("it does not implement {}", op.name()))
    }
}
