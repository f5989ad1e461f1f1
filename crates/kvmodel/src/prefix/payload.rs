//! The payload rule (docs/contract.md §16): the KV row of a position is a
//! pure function of the token prefix that ends there, its layer and the
//! seed. A row a request reads must be the payload of *its own* prefix.
//!
//! One rule catches every way a prefix cache can hand a request someone
//! else's KV: stale reuse after an eviction, two prefixes whose block
//! hashes collide, a freed block reallocated while still referenced, a
//! copy-on-write that copied the wrong rows or none. The function is
//! defined bit for bit so that a cache on tensors, a Python subject or any
//! other process computes the very same rows.

use thiserror::Error;

use crate::prefix::config::PrefixConfig;
use crate::prefix::op::Token;

/// splitmix64's multiplier: odd, so `x · GOLDEN` is a bijection of `u64`
/// and no two token ids (or layers, or dims) mix in the same value.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// Salt of the empty prefix: the ASCII bytes of `kvprefix`.
pub const PREFIX_SALT: u64 = 0x6b76_7072_6566_6978;

/// Salt of a layer's row: the ASCII bytes of `kvlayers`.
pub const LAYER_SALT: u64 = 0x6b76_6c61_7965_7273;

/// splitmix64's finalizer (wrapping arithmetic on `u64`): every input bit
/// reaches every output bit, so prefixes that differ anywhere give
/// unrelated hashes.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of the empty prefix: `mix(seed ^ PREFIX_SALT)`.
pub fn empty_prefix_hash(seed: u64) -> u64 {
    mix(seed ^ PREFIX_SALT)
}

/// The hash of a prefix extended by one token: `mix(h ^ token · GOLDEN)`.
/// A prefix's hash is this applied to each of its tokens in order, from
/// [`empty_prefix_hash`]; it depends on every token and on the length.
pub fn extend_hash(hash: u64, token: Token) -> u64 {
    mix(hash ^ u64::from(token).wrapping_mul(GOLDEN))
}

/// The hash of every prefix of `tokens` that ends at a position:
/// `hashes[p]` is the hash of `tokens[..=p]`.
pub fn prefix_hashes(seed: u64, tokens: &[Token]) -> Vec<u64> {
    tokens
        .iter()
        .scan(empty_prefix_hash(seed), |hash, &token| {
            *hash = extend_hash(*hash, token);
            Some(*hash)
        })
        .collect()
}

/// The f32 bit pattern a 64-bit hash stands for:
/// sign `e >> 63`, exponent `(e >> 32) mod 12 − 6`, and the mantissa's top
/// 7 bits `e & 0x7f`, that is `±(1 + m / 128) · 2^x` with `x ∈ [−6, 5]`.
/// Seven mantissa bits and that exponent range make every value exact in
/// f32, f16 and bf16 alike, finite and never zero, so a cache that stores
/// any of the three dtypes reads back the same f32 bits.
pub fn value_bits(e: u64) -> u32 {
    let sign = (e >> 63) as u32;
    let exponent = ((e >> 32) % 12) as u32 + 127 - 6;
    let mantissa = (e & 0x7f) as u32;
    (sign << 31) | (exponent << 23) | (mantissa << 16)
}

/// The `D` values of the row of `layer` at the position whose prefix has
/// hash `prefix_hash`: element `d` is
/// `value_bits(mix(mix(prefix_hash ^ LAYER_SALT ^ layer · GOLDEN) ^ d · GOLDEN))`.
pub fn row_from_hash(prefix_hash: u64, layer: usize, row_width: usize) -> Vec<f32> {
    let row = mix(prefix_hash ^ LAYER_SALT ^ (layer as u64).wrapping_mul(GOLDEN));
    (0..row_width)
        .map(|d| f32::from_bits(value_bits(mix(row ^ (d as u64).wrapping_mul(GOLDEN)))))
        .collect()
}

/// The payload row of `layer` at the last position of `prefix` (the tokens
/// from position 0 up to and including that position), in `config`'s
/// seed and row width. An empty prefix names no position; it answers the
/// row of the empty prefix's hash, which no position ever holds.
pub fn payload_row(config: &PrefixConfig, prefix: &[Token], layer: usize) -> Vec<f32> {
    let hash = prefix
        .iter()
        .fold(empty_prefix_hash(config.seed), |h, &t| extend_hash(h, t));
    row_from_hash(hash, layer, config.row_width)
}

/// Every payload row of `tokens`, laid out `[layer][position][dim]` (layer
/// major, `L · len · D` values): what a read of a request whose computed
/// tokens are `tokens` returns.
pub fn payload_rows(config: &PrefixConfig, tokens: &[Token]) -> Vec<f32> {
    let hashes = prefix_hashes(config.seed, tokens);
    let mut rows = Vec::with_capacity(config.layers * tokens.len() * config.row_width);
    for layer in 0..config.layers {
        for &hash in &hashes {
            rows.extend(row_from_hash(hash, layer, config.row_width));
        }
    }
    rows
}

/// A row that is not where the payload rule says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowAt {
    /// Layer.
    pub layer: usize,
    /// Position.
    pub position: usize,
}

/// Why a subject's rows break the payload rule (docs/contract.md §16).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PayloadError {
    /// The rows do not have the `[L, positions, D]` shape of the read.
    #[error("rows hold {actual} values, expected {expected} ({layers} layers x {positions} positions x {row_width}{})", describe_window(window))]
    Shape {
        /// `L · positions · D`.
        expected: usize,
        /// Values given.
        actual: usize,
        /// `L`.
        layers: usize,
        /// Positions read.
        positions: usize,
        /// `D`.
        row_width: usize,
        /// With a window (§19): how many layers are windowed, and the
        /// position their rows start at.
        window: Option<(usize, usize)>,
    },
    /// A row holds other values than its own prefix's payload.
    #[error("row (layer {}, position {}) is not the payload of its own prefix: dim {dim} holds {actual:?} ({actual_bits:#010x}), expected {expected:?} ({expected_bits:#010x}); {}", at.layer, at.position, describe(holds))]
    WrongRow {
        /// The wrong row.
        at: RowAt,
        /// Its first wrong dim.
        dim: usize,
        /// The value expected there.
        expected: f32,
        /// Its bits.
        expected_bits: u32,
        /// The value found.
        actual: f32,
        /// Its bits.
        actual_bits: u32,
        /// The row of the same tokens whose payload the wrong row holds,
        /// when it holds one: a shifted, stale or cross-layer row.
        holds: Option<RowAt>,
    },
}

fn describe_window(window: &Option<(usize, usize)>) -> String {
    match window {
        Some((layers, start)) => format!(", the {layers} windowed layers from position {start}"),
        None => String::new(),
    }
}

fn describe(holds: &Option<RowAt>) -> String {
    match holds {
        Some(RowAt { layer, position }) => format!(
            "the row holds the payload of layer {layer}, position {position} of the same tokens"
        ),
        None => "the row holds the payload of no position of these tokens".to_string(),
    }
}

/// Judges the rows a subject returned for a read of a request whose
/// computed tokens are `tokens` and whose window starts at `start`
/// (docs/contract.md §19; 0 without a window): `rows` laid out
/// `[layer][position][dim]`, each layer's positions those of
/// [`PrefixConfig::read_range`], must hold, bit for bit, the payload of
/// each position's own prefix. Reports the first wrong row in layer-major
/// order, and which row of the same tokens it holds instead, if any.
pub fn check_rows(
    config: &PrefixConfig,
    tokens: &[Token],
    start: usize,
    rows: &[f32],
) -> Result<(), PayloadError> {
    let (layers, width, positions) = (config.layers, config.row_width, tokens.len());
    let all = payload_rows(config, tokens);
    let expected = config.window_rows(&all, positions, start);
    if rows.len() != expected.len() {
        return Err(PayloadError::Shape {
            expected: expected.len(),
            actual: rows.len(),
            layers,
            positions,
            row_width: width,
            window: config
                .window
                .as_ref()
                .map(|w| (w.layers.len(), start.min(positions))),
        });
    }
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let full_row = |at: RowAt| {
        let first = (at.layer * positions + at.position) * width;
        &all[first..first + width]
    };
    let read = (0..layers).flat_map(|layer| {
        config
            .read_range(layer, positions, start)
            .map(move |position| RowAt { layer, position })
    });
    for (i, at) in read.enumerate() {
        let (want, got) = (full_row(at), &rows[i * width..(i + 1) * width]);
        let Some(dim) = (0..width).find(|&d| want[d].to_bits() != got[d].to_bits()) else {
            continue;
        };
        let holds = (0..layers)
            .flat_map(|layer| (0..positions).map(move |position| RowAt { layer, position }))
            .find(|&other| other != at && same(full_row(other), got));
        return Err(PayloadError::WrongRow {
            at,
            dim,
            expected: want[dim],
            expected_bits: want[dim].to_bits(),
            actual: got[dim],
            actual_bits: got[dim].to_bits(),
            holds,
        });
    }
    Ok(())
}
