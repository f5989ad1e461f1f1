//! Op bytes decoded relative to the model's state, the case they make,
//! and the inverse encoding that turns traces into seed corpora.

use arbitrary::{Arbitrary, Unstructured};
use kvmodel::{Config, Model, Op, PackedPolicy, Quant, Variant, Write};

use crate::check::trace::Trace;
use crate::subject::{Capabilities, Feature, OpKind};

use super::config::*;
use super::limits::*;

/// Op codes: the first byte of an op, modulo 16.
pub(super) mod code {
    /// `write G+len` (0..=4).
    pub const APPEND: u8 = 0;
    /// Repeat the latest append (5..=7).
    pub const REWRITE: u8 = 5;
    /// `write (G - back)+len` (8..=9).
    pub const WRITE_BACK: u8 = 8;
    /// `rewind G - back` (10..=11).
    pub const REWIND: u8 = 10;
    pub const EVICT: u8 = 12;
    pub const PIN: u8 = 13;
    pub const RESET: u8 = 14;
    /// `write start+len` with raw signed bytes.
    pub const RAW_WRITE: u8 = 15;
}

/// What relative op codes refer to while decoding: the model's global end
/// and the latest append. It follows a model that it does not own, so the
/// lockstep targets decode against the run's own model.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cursor {
    global_end: i64,
    last_append: Option<(i64, i64)>,
}

impl Cursor {
    fn global_end(&self) -> i64 {
        self.global_end
    }

    /// Follows `op` after the model answered it (`ok` when it accepted
    /// it), leaving the model's global end at `global_end`.
    pub(super) fn follow(&mut self, op: &Op, ok: bool, global_end: u64) {
        match op {
            Op::Write(w) if ok && w.start == self.global_end && w.len > 0 => {
                self.last_append = Some((w.start, w.len))
            }
            Op::Rewind { .. } | Op::Reset if ok => self.last_append = None,
            _ => {}
        }
        self.global_end = global_end as i64;
    }

    /// Applies `op` to `model` and follows it.
    fn apply(&mut self, model: &mut Model, index: usize, op: &Op) {
        let ok = model.apply(index as u64, op).is_ok();
        self.follow(op, ok, model.global_end());
    }
}

/// `config` without what `capabilities` lack (see [`FuzzCase::decode_for`]).
pub(super) fn restrict_config(mut config: Config, capabilities: &Capabilities) -> Config {
    if !capabilities.dtypes.contains(&config.dtype) {
        if let Some(&dtype) = capabilities.dtypes.first() {
            config.dtype = dtype;
        }
    }
    if !capabilities.has(Feature::Window) {
        config.window = None;
    }
    if !capabilities.has(Feature::Growth) {
        config.growth = false;
    }
    if !capabilities.has(Feature::GlobalSink) {
        config.global_sink = 0;
    }
    if !capabilities.has(Feature::Quant) && config.variant == Variant::Packed {
        config.packed = Some(PackedPolicy {
            quant: Quant::None,
            ..config.packed_policy()
        });
    }
    config
}

/// `op` without what `capabilities` lack (see [`FuzzCase::decode_for`]).
pub(super) fn restrict_op(op: Op, cursor: &Cursor, capabilities: &Capabilities) -> Op {
    match op {
        Op::Write(mut w) => {
            if !capabilities.has(Feature::HeadRanges) {
                w.heads = None;
            }
            if !capabilities.has(Feature::RecentWindow) {
                w.recent_window = None;
            }
            Op::Write(w)
        }
        other if capabilities.has_op(OpKind::of(&other)) => other,
        _ => Op::write(cursor.global_end(), 1, None, None),
    }
}

/// Head range from an options byte: bit 0 set means `[bits 2-3, 1 + bits 4-5]`
/// (may reach past the last head: `head_range`).
pub(super) fn heads_option(c: u8) -> Option<[i64; 2]> {
    (c & 1 != 0).then(|| [((c >> 2) & 3) as i64, 1 + ((c >> 4) & 3) as i64])
}

/// Recent window from a byte: high bit set means `low 6 bits`, `0xff` is -1.
pub(super) fn recent_option(b: u8) -> Option<i64> {
    match b {
        0xff => Some(-1),
        b if b & 0x80 != 0 => Some((b & 0x3f) as i64),
        _ => None,
    }
}

pub(super) fn decode_op(bytes: [u8; OP_BYTES], cursor: &Cursor) -> Op {
    let [tag, a, b, c] = bytes;
    let g = cursor.global_end();
    let write = |start: i64, len: i64, heads, recent_window| {
        Op::Write(Write {
            start,
            len,
            heads,
            recent_window,
        })
    };
    let back = |a: u8| {
        if a == 0xff {
            g + 1
        } else {
            (g - (a % 32) as i64).max(0)
        }
    };
    match tag % 16 {
        0..=4 => write(g, 1 + (a % 16) as i64, heads_option(c), recent_option(b)),
        5..=7 => {
            let (start, len) = cursor.last_append.unwrap_or((g, 0));
            write(start, len, heads_option(c), recent_option(b))
        }
        8..=9 => write(back(a), (b % 17) as i64, heads_option(c), recent_option(c)),
        10..=11 => Op::Rewind { to: back(a) },
        code::EVICT => Op::Evict {
            tokens: if a == 0xff { -1 } else { (a % 16) as i64 },
        },
        code::PIN => Op::Pin {
            tokens: if a == 0xff { -1 } else { (a % 33) as i64 },
        },
        code::RESET => Op::Reset,
        _ => write(
            a as i8 as i64,
            b as i8 as i64,
            heads_option(c),
            recent_option(c ^ 0x80),
        ),
    }
}

/// One structured fuzz input: a valid configuration and the decoded ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuzzCase {
    /// The configuration (always valid).
    pub config: Config,
    /// The ops, at most the decoder's limit.
    pub ops: Vec<Op>,
}

impl FuzzCase {
    /// Decodes fuzzer bytes for `variant` with at most `max_ops` ops. Total:
    /// every byte string decodes (missing bytes read as zeros).
    pub fn decode(variant: Variant, data: &[u8], max_ops: usize) -> FuzzCase {
        Self::decode_for(variant, data, max_ops, &Capabilities::full())
    }

    /// [`FuzzCase::decode`] within a subject's `capabilities` (whose
    /// variants must include `variant`): the config drops the features it
    /// lacks (window, growth, global sink, quantization; an unsupported
    /// dtype becomes its first dtype), writes drop head ranges and recent
    /// windows it lacks, and an op kind it lacks decodes as an append of
    /// one position. Still total.
    pub fn decode_for(
        variant: Variant,
        data: &[u8],
        max_ops: usize,
        capabilities: &Capabilities,
    ) -> FuzzCase {
        let mut u = Unstructured::new(data);
        let fuzz_config = FuzzConfig::arbitrary(&mut u).unwrap_or_default();
        let config = restrict_config(fuzz_config.to_config(variant), capabilities);
        let mut model = Model::new(&config).expect("fuzz configs are valid by construction");
        let mut cursor = Cursor::default();
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < max_ops {
            let mut bytes = [0u8; OP_BYTES];
            // Fills with zeros past the end: never fails.
            let _ = u.fill_buffer(&mut bytes);
            let op = restrict_op(decode_op(bytes, &cursor), &cursor, capabilities);
            cursor.apply(&mut model, ops.len(), &op);
            ops.push(op);
        }
        FuzzCase { config, ops }
    }

    /// Decodes the input of a lockstep target (`dense_lockstep`,
    /// `packed_lockstep`).
    pub fn from_bytes(variant: Variant, data: &[u8]) -> FuzzCase {
        Self::decode(variant, data, MAX_OPS)
    }

    /// Decodes the input of `model_invariants`: the first byte picks the
    /// variant (even: dense, odd: packed).
    pub fn from_model_bytes(data: &[u8]) -> FuzzCase {
        let (variant, rest) = match data.split_first() {
            Some((v, rest)) if v & 1 == 1 => (Variant::Packed, rest),
            Some((_, rest)) => (Variant::Dense, rest),
            None => (Variant::Dense, data),
        };
        Self::decode(variant, rest, MAX_MODEL_OPS)
    }

    /// Bytes that decode to this case, as closely as the encoding allows
    /// (the config is clamped into the fuzz bounds; ops that have no code
    /// are approximated). Used to seed the corpus from the test vectors.
    pub fn to_bytes(config: &Config, ops: &[Op]) -> Vec<u8> {
        let fuzz_config = FuzzConfig::from_config(config);
        let mut model = Model::new(&fuzz_config.to_config(config.variant)).expect("valid");
        let mut cursor = Cursor::default();
        let mut out = fuzz_config.to_bytes().to_vec();
        for (index, op) in ops.iter().enumerate() {
            let bytes = encode_op(op, &cursor);
            let decoded = decode_op(bytes, &cursor);
            cursor.apply(&mut model, index, &decoded);
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// The case as a kvtrace with `expect` filled in by the model.
    pub fn to_trace(&self) -> Trace {
        Trace::new(self.config.clone(), self.ops.clone()).with_model_expect()
    }
}

pub(super) fn encode_heads(heads: Option<[i64; 2]>) -> u8 {
    match heads {
        Some([first, count]) => {
            1 | ((first.clamp(0, 3) as u8) << 2) | (((count.clamp(1, 4) - 1) as u8) << 4)
        }
        None => 0,
    }
}

pub(super) fn encode_recent(r: Option<i64>) -> u8 {
    match r {
        Some(r) if r < 0 => 0xff,
        Some(r) => 0x80 | r.min(0x3f) as u8,
        None => 0,
    }
}

pub(super) fn encode_op(op: &Op, cursor: &Cursor) -> [u8; OP_BYTES] {
    let g = cursor.global_end();
    let back = |to: i64| {
        if to > g {
            0xff
        } else {
            (g - to).clamp(0, 31) as u8
        }
    };
    match *op {
        Op::Write(w) if w.start == g && (1..=16).contains(&w.len) => [
            code::APPEND,
            (w.len - 1) as u8,
            encode_recent(w.recent_window),
            encode_heads(w.heads),
        ],
        Op::Write(w) if cursor.last_append == Some((w.start, w.len)) => [
            code::REWRITE,
            0,
            encode_recent(w.recent_window),
            encode_heads(w.heads),
        ],
        Op::Write(w) if w.start >= 0 && w.start <= g + 1 && (0..=16).contains(&w.len) => [
            code::WRITE_BACK,
            back(w.start),
            w.len as u8,
            encode_heads(w.heads),
        ],
        Op::Write(w) => [
            code::RAW_WRITE,
            w.start.clamp(-128, 127) as i8 as u8,
            w.len.clamp(-128, 127) as i8 as u8,
            encode_heads(w.heads) | (encode_recent(w.recent_window) ^ 0x80),
        ],
        Op::Rewind { to } => [code::REWIND, back(to), 0, 0],
        Op::Evict { tokens } => [
            code::EVICT,
            if tokens < 0 {
                0xff
            } else {
                tokens.min(15) as u8
            },
            0,
            0,
        ],
        Op::Pin { tokens } => [
            code::PIN,
            if tokens < 0 {
                0xff
            } else {
                tokens.min(32) as u8
            },
            0,
            0,
        ],
        Op::Reset => [code::RESET, 0, 0, 0],
    }
}
