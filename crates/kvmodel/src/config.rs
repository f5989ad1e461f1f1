//! Cache configuration (docs/contract.md §1) and its validation.

use serde::{Deserialize, Serialize};

use crate::error::CacheError;

/// The largest number of elements one K or V buffer may hold (docs/contract.md §1,
/// the size rule): `B · C · H · D ≤ 2^31`.
pub const MAX_ELEMENTS: u64 = 1 << 31;

/// Which cache family a configuration describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// The dense rolling cache of docs/contract.md §2–§5 (sinks, pins, growth).
    Dense,
    /// The packed cache of docs/contract.md §6 (chunks, quantized cold chunks).
    Packed,
}

/// Element type of the optimized cache's K and V buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// The name used in trace files (`"f32"`, `"f16"`, `"bf16"`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// How cold chunks of the packed variant are stored (docs/contract.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    /// Exact copy: a storage change only.
    None,
    /// Symmetric 8-bit codes, `q = 127`.
    Int8,
    /// Symmetric 4-bit codes, `q = 7`, two per byte.
    Int4,
}

impl Quant {
    /// The largest code magnitude `q`, or `None` for exact storage.
    pub fn max_code(self) -> Option<i32> {
        match self {
            Quant::None => None,
            Quant::Int8 => Some(127),
            Quant::Int4 => Some(7),
        }
    }

    /// The name used in trace files.
    pub fn name(self) -> &'static str {
        match self {
            Quant::None => "none",
            Quant::Int8 => "int8",
            Quant::Int4 => "int4",
        }
    }
}

/// When a write trims the cache to its capacity, relative to the read of
/// its view (docs/contract.md §3 write, "Trim modes").
///
/// `BeforeRead` is the contract's original rule: room for the chunk is made
/// first, and the view is read from the trimmed state, so a chunk of `n`
/// sees `W − n` older positions. `AfterRead` is the StreamingLLM / Hugging
/// Face `SinkCache` rule: attention reads the state before the write plus
/// the whole chunk, and the cache is trimmed to `C` only afterwards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trim {
    /// Evict, then read (the default; every trace without `trim`).
    #[default]
    BeforeRead,
    /// Read the old view and the whole chunk, then evict down to `C`,
    /// the chunk's own oldest positions included.
    AfterRead,
}

impl Trim {
    /// Both modes, the default first.
    pub const ALL: [Trim; 2] = [Trim::BeforeRead, Trim::AfterRead];

    /// The name used in trace files (`"before_read"`, `"after_read"`).
    pub fn name(self) -> &'static str {
        match self {
            Trim::BeforeRead => "before_read",
            Trim::AfterRead => "after_read",
        }
    }

    /// Whether this is the default mode, which kvtrace/1 leaves unwritten
    /// so that traces without the field stay byte for byte as they were.
    pub fn is_default(&self) -> bool {
        *self == Trim::BeforeRead
    }
}

/// The packed variant's policy (docs/contract.md §6). Defaults follow docs/kvtrace.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PackedPolicy {
    /// How many of the most recent completed chunks stay hot. Default 1.
    pub keep_recent_chunks: usize,
    /// Storage of cold chunks. Default `int8`.
    pub quant: Quant,
    /// Whether chunks starting inside the sink may go cold. Default false.
    pub pack_sink: bool,
}

impl Default for PackedPolicy {
    fn default() -> Self {
        PackedPolicy {
            keep_recent_chunks: 1,
            quant: Quant::Int8,
            pack_sink: false,
        }
    }
}

/// A cache configuration (docs/contract.md §1, docs/kvtrace.md `config`).
///
/// Construct one with [`Config::dense`] or [`Config::packed`] and adjust the
/// public fields; every cache and the model call [`Config::validate`] before
/// they accept it, so an invalid value is always refused with
/// `invalid_config` naming the field.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Config {
    /// Cache family.
    pub variant: Variant,
    /// Batch size `B` (writes cover every batch row).
    pub batch: usize,
    /// Cache heads `H`.
    pub heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Element type.
    pub dtype: Dtype,
    /// Capacity `C` in tokens.
    pub capacity: usize,
    /// Sink tokens `S`.
    pub sink: usize,
    /// Attention window `W`; `None` means `W = C`.
    pub window: Option<usize>,
    /// Grow instead of evicting (dense only).
    pub growth: bool,
    /// Tokens that stay sink while a chunk is pinned (docs/contract.md §5).
    pub global_sink: usize,
    /// Whether a write trims before or after its view is read
    /// (docs/contract.md §3); serialized only when not the default.
    #[serde(skip_serializing_if = "Trim::is_default")]
    pub trim: Trim,
    /// Packed policy; `None` on a packed config means the defaults.
    pub packed: Option<PackedPolicy>,
    /// Seed of the deterministic K/V payload the harness writes.
    pub seed: u64,
}

impl Config {
    /// A dense configuration with capacity `capacity` and every other field
    /// at its docs/kvtrace.md default (B = H = D = 1, f32, no sink, W = C).
    pub fn dense(capacity: usize) -> Config {
        Config {
            variant: Variant::Dense,
            batch: 1,
            heads: 1,
            head_dim: 1,
            dtype: Dtype::F32,
            capacity,
            sink: 0,
            window: None,
            growth: false,
            global_sink: 0,
            trim: Trim::BeforeRead,
            packed: None,
            seed: 0,
        }
    }

    /// A packed configuration with the default policy.
    pub fn packed(capacity: usize) -> Config {
        Config {
            variant: Variant::Packed,
            ..Config::dense(capacity)
        }
    }

    /// The window in force at construction: `window`, or `capacity`.
    pub fn effective_window(&self) -> usize {
        self.window.unwrap_or(self.capacity)
    }

    /// The packed policy in force (the defaults when `packed` is `None`).
    pub fn packed_policy(&self) -> PackedPolicy {
        self.packed.unwrap_or_default()
    }

    /// Elements of one token (one position across batch rows and heads):
    /// `B · H · D`, saturating so that absurd configs fail validation instead
    /// of overflowing.
    pub fn elements_per_token(&self) -> u64 {
        (self.batch as u64)
            .saturating_mul(self.heads as u64)
            .saturating_mul(self.head_dim as u64)
    }

    /// The largest capacity the size rule allows for this B, H, D.
    pub fn max_capacity(&self) -> usize {
        let per_token = self.elements_per_token().max(1);
        usize::try_from(MAX_ELEMENTS / per_token).unwrap_or(usize::MAX)
    }

    /// Checks every rule of docs/contract.md §1. The error names the first field that
    /// breaks a rule.
    pub fn validate(&self) -> Result<(), CacheError> {
        let bad =
            |field: &'static str, reason: String| Err(CacheError::InvalidConfig { field, reason });
        for (field, value) in [
            ("batch", self.batch),
            ("heads", self.heads),
            ("head_dim", self.head_dim),
            ("capacity", self.capacity),
        ] {
            if value < 1 {
                return bad(field, format!("must be at least 1, got {value}"));
            }
        }
        if self.sink >= self.capacity {
            return bad(
                "sink",
                format!(
                    "must be below capacity {}, got {}",
                    self.capacity, self.sink
                ),
            );
        }
        if let Some(window) = self.window {
            if window <= self.sink || window > self.capacity {
                return bad(
                    "window",
                    format!(
                        "must satisfy sink {} < window <= capacity {}, got {window}",
                        self.sink, self.capacity
                    ),
                );
            }
        }
        if self.global_sink > self.sink {
            return bad(
                "global_sink",
                format!(
                    "must be at most sink {}, got {}",
                    self.sink, self.global_sink
                ),
            );
        }
        match self.variant {
            Variant::Dense => {
                if self.packed.is_some() {
                    return bad(
                        "packed",
                        "is only allowed with variant \"packed\"".to_string(),
                    );
                }
            }
            Variant::Packed => {
                if self.growth {
                    return bad(
                        "growth",
                        "is not supported by the packed variant".to_string(),
                    );
                }
            }
        }
        // Trimming after the read is defined for the dense rolling cache
        // only: the packed variant's chunk rules (§6: the current chunk,
        // hot and cold chunks) are stated for a chunk that fits beside the
        // protected positions, and growth never trims at all, so neither
        // combination would have a rule to follow.
        if self.trim == Trim::AfterRead {
            if self.variant == Variant::Packed {
                return bad(
                    "trim",
                    "\"after_read\" is only allowed with variant \"dense\"".to_string(),
                );
            }
            if self.growth {
                return bad(
                    "trim",
                    "\"after_read\" cannot be combined with growth (a growing cache never trims)"
                        .to_string(),
                );
            }
        }
        let elements = self
            .elements_per_token()
            .saturating_mul(self.capacity as u64);
        if elements > MAX_ELEMENTS {
            return bad(
                "capacity",
                format!(
                    "batch {} x capacity {} x heads {} x head_dim {} = {elements} elements exceeds the size rule 2^31",
                    self.batch, self.capacity, self.heads, self.head_dim
                ),
            );
        }
        Ok(())
    }
}
