//! Prefix-cache configuration (docs/contract.md §11) and its validation.

use serde::{Deserialize, Serialize};

use crate::prefix::error::PrefixError;
use crate::prefix::window::Window;

/// The largest number of payload elements a pool may hold (docs/contract.md
/// §11, the size rule): `N · B · L · D ≤ 2^31`, the same bound as the
/// streaming caches' size rule, so that every implementation can allocate
/// every pool a trace describes.
pub const MAX_POOL_ELEMENTS: u64 = 1 << 31;

/// How long a hit may be (docs/contract.md §13): the one convention the
/// caches in the wild differ on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitRule {
    /// A hit leaves at least one prompt token to compute: the forward pass
    /// that produces the next token's logits needs one. vLLM's KV cache
    /// manager and sglang's radix cache both cap their match at
    /// `len − 1` tokens. The default.
    #[default]
    LeaveOne,
    /// A hit may cover the whole prompt: for a cache asked for KV only (a
    /// pre-warm, a pooling request), where nothing needs the last token's
    /// logits.
    Whole,
}

impl HitRule {
    /// Both rules, the default first.
    pub const ALL: [HitRule; 2] = [HitRule::LeaveOne, HitRule::Whole];

    /// The name used in trace files (`"leave_one"`, `"whole"`).
    pub fn name(self) -> &'static str {
        match self {
            HitRule::LeaveOne => "leave_one",
            HitRule::Whole => "whole",
        }
    }

    /// The most prompt tokens a hit may cover for a prompt of `len` tokens,
    /// before block alignment.
    pub fn cap(self, len: usize) -> usize {
        match self {
            HitRule::LeaveOne => len.saturating_sub(1),
            HitRule::Whole => len,
        }
    }
}

/// A prefix-cache configuration (docs/contract.md §11, docs/kvtrace.md
/// "Prefix caches").
///
/// Every value that [`PrefixConfig::validate`] accepts is one the model and
/// every cache must accept; the model refuses any other with
/// `invalid_config` naming the field. A deserialized config has already
/// been validated: its serde form goes through the trace's raw, signed
/// fields, so a trace cannot smuggle in a pool of zero blocks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawPrefixConfig", into = "RawPrefixConfig")]
pub struct PrefixConfig {
    /// `N`: blocks in the pool (at least 1).
    pub blocks: usize,
    /// `B`: token slots per block (at least 1; 1 is a token-granular radix
    /// cache).
    pub block_size: usize,
    /// `L`: layers; each position has one payload row per layer.
    pub layers: usize,
    /// `D`: elements of one payload row (heads × head_dim, flattened).
    pub row_width: usize,
    /// How long a hit may be (docs/contract.md §13).
    pub hit: HitRule,
    /// Seed of the payload (docs/contract.md §16): the same seed gives the
    /// same rows, another seed other rows.
    pub seed: u64,
    /// The sliding window over some layers, if any (docs/contract.md §19):
    /// it changes only what a read of those layers returns.
    pub window: Option<Window>,
}

impl PrefixConfig {
    /// A pool of `blocks` blocks of `block_size` slots, one layer, rows of
    /// one element, the default hit rule and seed 0 (the docs/kvtrace.md
    /// defaults).
    pub fn new(blocks: usize, block_size: usize) -> PrefixConfig {
        PrefixConfig {
            blocks,
            block_size,
            layers: 1,
            row_width: 1,
            hit: HitRule::LeaveOne,
            seed: 0,
            window: None,
        }
    }

    /// Blocks needed to hold `tokens` tokens: `ceil(tokens / B)`.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size.max(1))
    }

    /// Checks every rule of docs/contract.md §11. The error names the first
    /// field that breaks one.
    pub fn validate(&self) -> Result<(), PrefixError> {
        for (field, value) in [
            ("blocks", self.blocks),
            ("block_size", self.block_size),
            ("layers", self.layers),
            ("row_width", self.row_width),
        ] {
            if value < 1 {
                return Err(PrefixError::InvalidConfig {
                    field,
                    reason: format!("must be at least 1, got {value}"),
                });
            }
        }
        let elements = [self.block_size, self.layers, self.row_width]
            .into_iter()
            .fold(self.blocks as u64, |acc, v| acc.saturating_mul(v as u64));
        if let Some(window) = &self.window {
            window.check(self.layers)?;
        }
        if elements > MAX_POOL_ELEMENTS {
            return Err(PrefixError::InvalidConfig {
                field: "blocks",
                reason: format!(
                    "blocks {} x block_size {} x layers {} x row_width {} = {elements} elements exceeds the size rule 2^31",
                    self.blocks, self.block_size, self.layers, self.row_width
                ),
            });
        }
        Ok(())
    }
}

/// The family tag of a prefix-cache config. It is the config's first field
/// so that a kvtrace/1 reader of the streaming family stops at it with
/// "unknown variant `prefix`" (docs/kvtrace.md "Prefix caches").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum PrefixVariant {
    Prefix,
}

fn one() -> i64 {
    1
}

/// The config as a trace writes it: signed, so that a negative value is
/// reported as the broken rule of its field rather than as a type error.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrefixConfig {
    variant: PrefixVariant,
    blocks: i64,
    #[serde(default = "one")]
    block_size: i64,
    #[serde(default = "one")]
    layers: i64,
    #[serde(default = "one")]
    row_width: i64,
    #[serde(default)]
    hit: HitRule,
    #[serde(default)]
    seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<Window>,
}

fn field(name: &'static str, value: i64) -> Result<usize, PrefixError> {
    usize::try_from(value)
        .ok()
        .filter(|&v| v >= 1)
        .ok_or_else(|| PrefixError::InvalidConfig {
            field: name,
            reason: format!("must be at least 1, got {value}"),
        })
}

impl TryFrom<RawPrefixConfig> for PrefixConfig {
    type Error = PrefixError;

    fn try_from(raw: RawPrefixConfig) -> Result<PrefixConfig, PrefixError> {
        let config = PrefixConfig {
            blocks: field("blocks", raw.blocks)?,
            block_size: field("block_size", raw.block_size)?,
            layers: field("layers", raw.layers)?,
            row_width: field("row_width", raw.row_width)?,
            hit: raw.hit,
            seed: raw.seed,
            window: raw.window.map(|mut w| {
                if w.layers.is_empty() {
                    // A window that names no layers covers every one.
                    w.layers = (0..usize::try_from(raw.layers).unwrap_or(0)).collect();
                }
                w
            }),
        };
        config.validate()?;
        Ok(config)
    }
}

impl From<PrefixConfig> for RawPrefixConfig {
    fn from(config: PrefixConfig) -> RawPrefixConfig {
        // Saturating: a config too large for i64 is refused by `validate`
        // long before, and serializing must not panic on it either.
        let signed = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        RawPrefixConfig {
            variant: PrefixVariant::Prefix,
            blocks: signed(config.blocks),
            block_size: signed(config.block_size),
            layers: signed(config.layers),
            row_width: signed(config.row_width),
            hit: config.hit,
            seed: config.seed,
            window: config.window,
        }
    }
}
