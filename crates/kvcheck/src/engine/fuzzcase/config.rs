//! The configuration bytes of a fuzz case, folded into a valid `Config`.

use arbitrary::Arbitrary;
use kvmodel::{Config, Dtype, PackedPolicy, Quant, Trim, Variant};

use super::limits::*;

/// The configuration bytes: one per field, folded into a valid [`Config`]
/// by [`FuzzConfig::to_config`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Arbitrary)]
pub struct FuzzConfig {
    /// `capacity = 1 + capacity % 64`.
    pub capacity: u8,
    /// `sink = sink % capacity`.
    pub sink: u8,
    /// High bit clear: no window. Else `window = sink + 1 + (low 7 bits) %
    /// (capacity - sink)`.
    pub window: u8,
    /// Dense only.
    pub growth: bool,
    /// `global_sink = global_sink % (sink + 1)`.
    pub global_sink: u8,
    /// `batch = 1 + batch % 2`.
    pub batch: u8,
    /// `heads = 1 + heads % 4`.
    pub heads: u8,
    /// `head_dim = 1 + head_dim % 8`.
    pub head_dim: u8,
    /// f32, f16, bf16.
    pub dtype: u8,
    /// Packed only: `keep_recent_chunks = keep_recent_chunks % 4`.
    pub keep_recent_chunks: u8,
    /// Packed only: none, int8, int4.
    pub quant: u8,
    /// Packed only.
    pub pack_sink: bool,
    /// Payload seed.
    pub seed: u8,
}

/// Bytes of an encoded [`FuzzConfig`].
pub const CONFIG_BYTES: usize = 13;

impl FuzzConfig {
    /// The valid configuration these bytes stand for.
    pub fn to_config(self, variant: Variant) -> Config {
        let capacity = 1 + self.capacity as usize % MAX_CAPACITY;
        let sink = self.sink as usize % capacity;
        let window = (self.window & 0x80 != 0)
            .then(|| sink + 1 + (self.window & 0x7f) as usize % (capacity - sink));
        let packed = (variant == Variant::Packed).then(|| PackedPolicy {
            keep_recent_chunks: self.keep_recent_chunks as usize % 4,
            quant: [Quant::None, Quant::Int8, Quant::Int4][self.quant as usize % 3],
            pack_sink: self.pack_sink,
        });
        Config {
            variant,
            batch: 1 + self.batch as usize % 2,
            heads: 1 + self.heads as usize % 4,
            head_dim: 1 + self.head_dim as usize % 8,
            dtype: [Dtype::F32, Dtype::F16, Dtype::Bf16][self.dtype as usize % 3],
            capacity,
            sink,
            window,
            growth: variant == Variant::Dense && self.growth,
            global_sink: self.global_sink as usize % (sink + 1),
            // The byte layout predates trim modes and the seed corpora
            // depend on it: fuzz cases trim before the read.
            trim: Trim::BeforeRead,
            packed,
            seed: self.seed as u64,
        }
    }

    /// The bytes that decode to `config` (clamped into the fuzz bounds).
    pub fn from_config(config: &Config) -> FuzzConfig {
        let capacity = config.capacity.clamp(1, MAX_CAPACITY);
        let sink = config.sink.min(capacity - 1);
        let window = match config.window {
            Some(w) if w > sink => 0x80 | ((w.min(capacity) - sink - 1) as u8 & 0x7f),
            _ => 0,
        };
        let policy = config.packed_policy();
        FuzzConfig {
            capacity: (capacity - 1) as u8,
            sink: sink as u8,
            window,
            growth: config.growth,
            global_sink: config.global_sink.min(sink) as u8,
            batch: (config.batch.clamp(1, 2) - 1) as u8,
            heads: (config.heads.clamp(1, 4) - 1) as u8,
            head_dim: (config.head_dim.clamp(1, 8) - 1) as u8,
            dtype: match config.dtype {
                Dtype::F32 => 0,
                Dtype::F16 => 1,
                Dtype::Bf16 => 2,
            },
            keep_recent_chunks: policy.keep_recent_chunks.min(3) as u8,
            quant: match policy.quant {
                Quant::None => 0,
                Quant::Int8 => 1,
                Quant::Int4 => 2,
            },
            pack_sink: policy.pack_sink,
            seed: config.seed as u8,
        }
    }

    pub(super) fn to_bytes(self) -> [u8; CONFIG_BYTES] {
        [
            self.capacity,
            self.sink,
            self.window,
            self.growth as u8,
            self.global_sink,
            self.batch,
            self.heads,
            self.head_dim,
            self.dtype,
            self.keep_recent_chunks,
            self.quant,
            self.pack_sink as u8,
            self.seed,
        ]
    }
}
