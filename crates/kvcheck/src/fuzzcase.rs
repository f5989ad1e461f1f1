//! Structured fuzz inputs and the bodies of the fuzz targets (feature
//! `arbitrary`).
//!
//! The fuzz targets in `fuzz/`, `kvcheck from-fuzz` and the corpus test
//! (`tests/suites/fuzz_corpus.rs`) all decode input bytes here, so a crash file
//! means the same case everywhere.
//!
//! A [`FuzzCase`] is a bounded configuration (capacity ≤ 64, batch ≤ 2,
//! heads ≤ 4, head_dim ≤ 8, always valid) and up to [`MAX_OPS`] ops. The
//! bytes are read as a [`FuzzConfig`] (derived [`Arbitrary`], one byte per
//! field) followed by four bytes per op. Ops are decoded *relative to the
//! model's state* (an append starts at the global end, a rewrite repeats the
//! latest append), so libFuzzer's mutations change what the stream does
//! instead of producing a wall of `non_sequential` refusals. A few op codes
//! still produce raw, negative or out-of-range arguments so that every
//! refusal of SPEC.md §3 stays reachable.
//!
//! [`FuzzCase::to_bytes`] is the inverse used to turn the test vectors into
//! a seed corpus.

use arbitrary::{Arbitrary, Unstructured};
use candle_core::Device;
use kvmodel::{Config, Dtype, Model, Op, Outcome, PackedPolicy, Quant, Variant, Write};

use crate::lockstep::{Lockstep, ValueCheck};
use crate::replay::replay;
use crate::subject::{Capabilities, Feature, OpKind, SubjectSpec};
use crate::trace::Trace;

/// Ops decoded at most for the lockstep targets.
pub const MAX_OPS: usize = 256;
/// Ops decoded at most for `model_invariants` (the model alone is fast).
pub const MAX_MODEL_OPS: usize = 4096;
/// Largest capacity a fuzz case gets.
pub const MAX_CAPACITY: usize = 64;
/// Bytes per encoded op.
pub const OP_BYTES: usize = 4;
/// `trace_load` replays a loaded trace only when its buffers and payloads
/// stay below this many elements (libFuzzer's rss limit is 2 GiB).
pub const TRACE_LOAD_ELEMENTS: u64 = 1 << 16;
/// `trace_load` replays at most this many ops.
pub const TRACE_LOAD_OPS: usize = 1024;

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

    fn to_bytes(self) -> [u8; CONFIG_BYTES] {
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

/// Op codes: the first byte of an op, modulo 16.
mod code {
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
struct Cursor {
    global_end: i64,
    last_append: Option<(i64, i64)>,
}

impl Cursor {
    fn global_end(&self) -> i64 {
        self.global_end
    }

    /// Follows `op` after the model answered it (`ok` when it accepted
    /// it), leaving the model's global end at `global_end`.
    fn follow(&mut self, op: &Op, ok: bool, global_end: u64) {
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
fn restrict_config(mut config: Config, capabilities: &Capabilities) -> Config {
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
fn restrict_op(op: Op, cursor: &Cursor, capabilities: &Capabilities) -> Op {
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
fn heads_option(c: u8) -> Option<[i64; 2]> {
    (c & 1 != 0).then(|| [((c >> 2) & 3) as i64, 1 + ((c >> 4) & 3) as i64])
}

/// Recent window from a byte: high bit set means `low 6 bits`, `0xff` is -1.
fn recent_option(b: u8) -> Option<i64> {
    match b {
        0xff => Some(-1),
        b if b & 0x80 != 0 => Some((b & 0x3f) as i64),
        _ => None,
    }
}

fn decode_op(bytes: [u8; OP_BYTES], cursor: &Cursor) -> Op {
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

fn encode_heads(heads: Option<[i64; 2]>) -> u8 {
    match heads {
        Some([first, count]) => {
            1 | ((first.clamp(0, 3) as u8) << 2) | (((count.clamp(1, 4) - 1) as u8) << 4)
        }
        None => 0,
    }
}

fn encode_recent(r: Option<i64>) -> u8 {
    match r {
        Some(r) if r < 0 => 0xff,
        Some(r) => 0x80 | r.min(0x3f) as u8,
        None => 0,
    }
}

fn encode_op(op: &Op, cursor: &Cursor) -> [u8; OP_BYTES] {
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

/// The body of `dense_lockstep` / `packed_lockstep`: the case through the
/// lockstep driver, on the shipped cache and again on its device-generic
/// path (`cache:generic`, the code a GPU runs). `Err` holds the divergence
/// report and the kvtrace JSON.
pub fn check_lockstep(case: &FuzzCase) -> Result<(), String> {
    check_lockstep_with(case, ValueCheck::default())
}

/// [`check_lockstep`] comparing views with `value_check`.
pub fn check_lockstep_with(case: &FuzzCase, value_check: ValueCheck) -> Result<(), String> {
    check_subject_with(case, &SubjectSpec::Cache, value_check)?;
    check_subject_with(
        case,
        &SubjectSpec::CachePath(kvcache::Path::Generic),
        value_check,
    )
}

/// [`check_lockstep`] on `subject` (decode the case with
/// [`FuzzCase::decode_for`] and the subject's capabilities).
pub fn check_lockstep_on(case: &FuzzCase, subject: &SubjectSpec) -> Result<(), String> {
    check_subject_with(case, subject, ValueCheck::default())
}

/// [`check_lockstep_on`] comparing views with `value_check`.
pub fn check_subject_with(
    case: &FuzzCase,
    subject: &SubjectSpec,
    value_check: ValueCheck,
) -> Result<(), String> {
    let mut run = Lockstep::open(&case.config, subject, &Device::Cpu)
        .map_err(|e| format!("setup failed for a valid config: {e}"))?;
    run.set_value_check(value_check);
    run.run(&case.ops)
        .map_err(|d| format!("{d}\n──── kvtrace ────\n{}", d.trace.to_json()))
}

/// The lockstep targets' body on raw bytes: the case of
/// [`FuzzCase::from_bytes`] through the driver on each subject in turn.
/// The first run decodes op by op against its own model (the same ops, as
/// the decoder's model would be in the same state: no second model runs);
/// the next runs replay the ops it decoded.
fn check_bytes(
    variant: Variant,
    data: &[u8],
    subjects: &[SubjectSpec],
    value_check: ValueCheck,
) -> Result<(), String> {
    let mut u = Unstructured::new(data);
    let capabilities = Capabilities::full();
    let fuzz_config = FuzzConfig::arbitrary(&mut u).unwrap_or_default();
    let config = restrict_config(fuzz_config.to_config(variant), &capabilities);
    let report = |d: Box<crate::divergence::Divergence>| {
        format!("{d}\n──── kvtrace ────\n{}", d.trace.to_json())
    };
    let mut decoded: Option<Vec<Op>> = None;
    for subject in subjects {
        let mut run = Lockstep::open(&config, subject, &Device::Cpu)
            .map_err(|e| format!("setup failed for a valid config: {e}"))?;
        run.set_value_check(value_check);
        match &decoded {
            Some(ops) => run.run(ops).map_err(report)?,
            None => {
                decode_into(&mut run, &mut u, &capabilities).map_err(report)?;
                decoded = Some(run.ops().to_vec());
            }
        }
    }
    Ok(())
}

/// Decodes the ops left in `u` as [`FuzzCase::decode_for`] does, stepping
/// `run` with each as it is decoded (its model is the decoder's).
fn decode_into(
    run: &mut Lockstep,
    u: &mut Unstructured<'_>,
    capabilities: &Capabilities,
) -> Result<(), Box<crate::divergence::Divergence>> {
    let mut cursor = Cursor::default();
    while !u.is_empty() && run.ops().len() < MAX_OPS {
        let mut bytes = [0u8; OP_BYTES];
        // Fills with zeros past the end: never fails.
        let _ = u.fill_buffer(&mut bytes);
        let op = restrict_op(decode_op(bytes, &cursor), &cursor, capabilities);
        let outcome = run.step(&op)?;
        cursor.follow(
            &op,
            outcome.error_kind().is_none(),
            run.model().global_end(),
        );
    }
    Ok(())
}

/// The body of `model_invariants`: SPEC.md invariants of the model alone,
/// checked after every op. `Err` names the broken invariant.
pub fn check_model_invariants(case: &FuzzCase) -> Result<(), String> {
    let mut model = Model::new(&case.config).map_err(|e| e.to_string())?;
    for (index, op) in case.ops.iter().enumerate() {
        let before = model.clone();
        let outcome: Outcome = model.apply(index as u64, op).into();
        let fail = |what: String| {
            Err(format!(
                "model invariant broken at step {index} ({op}): {what}\n──── kvtrace ────\n{}",
                Trace::new(case.config.clone(), case.ops[..=index].to_vec())
                    .with_model_expect()
                    .to_json()
            ))
        };
        if model.resident_len() > model.capacity() {
            return fail(format!(
                "|R| = {} > C = {}",
                model.resident_len(),
                model.capacity()
            ));
        }
        let view = model.view(None);
        if !view.windows(2).all(|p| p[0] < p[1]) {
            return fail(format!("view not strictly ascending: {view:?}"));
        }
        if model.capacity() < before.capacity() {
            return fail("capacity shrank".to_string());
        }
        let effect = match outcome {
            Outcome::Err(kind) => {
                if model != before {
                    return fail(format!("refused op ({kind}) changed the state"));
                }
                continue;
            }
            Outcome::Ok(effect) => effect,
        };
        if effect.global_end != model.global_end() {
            return fail("outcome's global end differs from the state".to_string());
        }
        // Protected positions survive every op but rewind (below `to`) and reset.
        let survivor_limit = match op {
            Op::Reset => 0,
            Op::Rewind { to } => *to as u64,
            _ => u64::MAX,
        };
        for p in before.protected() {
            if p < survivor_limit && model.writers(p).is_none() {
                return fail(format!("protected position {p} was evicted"));
            }
        }
        match op {
            Op::Rewind { .. } | Op::Reset => {}
            _ if model.global_end() < before.global_end() => {
                return fail(format!(
                    "global end went back from {} to {}",
                    before.global_end(),
                    model.global_end()
                ))
            }
            _ => {}
        }
        match op {
            Op::Evict { tokens } => {
                if before.resident_len() - model.resident_len() != *tokens as usize {
                    return fail(format!("evict {tokens} did not drop exactly {tokens}"));
                }
            }
            Op::Pin { .. } => {
                if before.resident().ne(model.resident()) {
                    return fail("pin changed the resident positions".to_string());
                }
            }
            Op::Rewind { to } => {
                if model.resident().any(|p| p >= *to as u64) {
                    return fail("rewind left a position at or above `to`".to_string());
                }
            }
            Op::Reset => {
                if model.resident_len() != 0 || model.global_end() != 0 {
                    return fail("reset left state behind".to_string());
                }
            }
            Op::Write(w) => {
                let visible = effect.visible.unwrap_or_default();
                if !visible.windows(2).all(|p| p[0] < p[1]) {
                    return fail(format!("visible not strictly ascending: {visible:?}"));
                }
                if let Some(p) = visible.iter().find(|&&p| model.writers(p).is_none()) {
                    return fail(format!("visible position {p} is not resident"));
                }
                let (s, n) = (w.start as u64, w.len as u64);
                if let Some(p) = (s..s + n).find(|p| !visible.contains(p)) {
                    return fail(format!("written position {p} is not visible"));
                }
                if w.recent_window.is_none() {
                    let protected = model.protected().len();
                    if visible.len() > model.window().max(protected) {
                        return fail(format!(
                            "{} visible > max(W = {}, |P| = {protected})",
                            visible.len(),
                            model.window()
                        ));
                    }
                }
                let reported = w
                    .heads
                    .map_or(case.config.heads, |[_, count]| count as usize);
                let writers = effect.writers.unwrap_or_default();
                if writers.len() != reported || writers.iter().any(|w| w.len() != visible.len()) {
                    return fail("writers do not match the reported heads and view".to_string());
                }
                if let Some(h) = writers.iter().position(|hw| {
                    visible.iter().zip(hw).any(|(&p, &writer)| {
                        (s..s + n).contains(&p) && writer != Some(index as u64)
                    })
                }) {
                    return fail(format!(
                        "reported head {h} of a written position has another writer"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether `trace_load` replays `trace`: its buffers, payloads and possible
/// growth stay below [`TRACE_LOAD_ELEMENTS`] and it has at most
/// [`TRACE_LOAD_OPS`] ops.
pub fn trace_load_replays(trace: &Trace) -> bool {
    let c = &trace.config;
    let per_token = c.elements_per_token();
    let written: u64 = trace
        .ops
        .iter()
        .map(|op| match op {
            Op::Write(w) => w.len.clamp(0, 1 << 32) as u64,
            _ => 0,
        })
        .fold(0u64, u64::saturating_add);
    // Growth can at most double past everything ever written.
    let tokens = (c.capacity as u64)
        .saturating_add(written)
        .saturating_mul(2);
    trace.ops.len() <= TRACE_LOAD_OPS && tokens.saturating_mul(per_token) <= TRACE_LOAD_ELEMENTS
}

/// The body of `trace_load`: bytes into [`Trace::from_json`] and, when it
/// loads and is small enough, through the model and the shipped cache.
/// Refused input is fine (`Ok`); `Err` is a divergence or a setup failure.
/// A mismatch with the file's own `expect` is not a bug (the bytes are
/// arbitrary) and is ignored.
pub fn check_trace_load(data: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let Ok(trace) = Trace::from_json(text) else {
        return Ok(());
    };
    if !trace_load_replays(&trace) {
        return Ok(());
    }
    let report = replay(&trace, None, Some(SubjectSpec::Cache), None);
    if let Some(e) = report.setup_error {
        return Err(format!("setup failed for a loaded trace: {e}"));
    }
    match report.divergence {
        Some(d) => Err(format!("{d}\n──── kvtrace ────\n{}", d.trace.to_json())),
        None => Ok(()),
    }
}

/// The fuzz targets, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Structured dense cases through the lockstep driver.
    DenseLockstep,
    /// Structured dense cases through the lockstep driver, on the
    /// `RingCache` (`cache:ring`).
    RingLockstep,
    /// Structured packed cases through the lockstep driver.
    PackedLockstep,
    /// The model alone against SPEC.md invariants.
    ModelInvariants,
    /// Arbitrary bytes as a kvtrace file.
    TraceLoad,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 5] = [
        Target::DenseLockstep,
        Target::RingLockstep,
        Target::PackedLockstep,
        Target::ModelInvariants,
        Target::TraceLoad,
    ];

    /// The target's name in `fuzz/fuzz_targets/`.
    pub fn name(self) -> &'static str {
        match self {
            Target::DenseLockstep => "dense_lockstep",
            Target::RingLockstep => "ring_lockstep",
            Target::PackedLockstep => "packed_lockstep",
            Target::ModelInvariants => "model_invariants",
            Target::TraceLoad => "trace_load",
        }
    }

    /// Parses a target name.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs the target's body on `data`.
    pub fn check(self, data: &[u8]) -> Result<(), String> {
        self.check_with(data, ValueCheck::default())
    }

    /// [`Target::check`] with the lockstep targets comparing views with
    /// `value_check` (the other targets ignore it).
    pub fn check_with(self, data: &[u8], value_check: ValueCheck) -> Result<(), String> {
        let generic = SubjectSpec::CachePath(kvcache::Path::Generic);
        match self {
            Target::DenseLockstep => check_bytes(
                Variant::Dense,
                data,
                &[SubjectSpec::Cache, generic],
                value_check,
            ),
            Target::RingLockstep => {
                check_bytes(Variant::Dense, data, &[SubjectSpec::Ring], value_check)
            }
            Target::PackedLockstep => check_bytes(
                Variant::Packed,
                data,
                &[SubjectSpec::Cache, generic],
                value_check,
            ),
            Target::ModelInvariants => check_model_invariants(&FuzzCase::from_model_bytes(data)),
            Target::TraceLoad => check_trace_load(data),
        }
    }

    /// The input as a kvtrace file: the JSON itself for `trace_load`, the
    /// decoded case with `expect` from the model for the others.
    pub fn to_trace(self, data: &[u8]) -> Result<Trace, String> {
        match self {
            Target::DenseLockstep | Target::RingLockstep => {
                Ok(FuzzCase::from_bytes(Variant::Dense, data).to_trace())
            }
            Target::PackedLockstep => Ok(FuzzCase::from_bytes(Variant::Packed, data).to_trace()),
            Target::ModelInvariants => Ok(FuzzCase::from_model_bytes(data).to_trace()),
            Target::TraceLoad => {
                let text = std::str::from_utf8(data).map_err(|e| format!("not UTF-8: {e}"))?;
                Trace::from_json(text).map_err(|e| e.to_string())
            }
        }
    }
}

/// The case `fault_lockstep` runs for `fault`: `data` decoded for the
/// fault's variant within its capabilities.
pub fn fault_case(fault: kvcache::fault::CacheFault, data: &[u8]) -> FuzzCase {
    fault_case_on(fault, kvcache::fault::FaultBase::Shipped, data)
}

/// [`fault_case`] for `fault` injected into `base`: decoded within that
/// subject's capabilities (the ring's, for [`FaultBase::Ring`]).
///
/// [`FaultBase::Ring`]: kvcache::fault::FaultBase::Ring
pub fn fault_case_on(
    fault: kvcache::fault::CacheFault,
    base: kvcache::fault::FaultBase,
    data: &[u8],
) -> FuzzCase {
    let subject = SubjectSpec::cache_fault(fault, base);
    let capabilities = subject
        .capabilities()
        .expect("an in-process subject states its capabilities");
    FuzzCase::decode_for(fault.variant(), data, MAX_OPS, &capabilities)
}

/// The body of `fault_lockstep`: [`fault_case`] through the lockstep driver
/// on the cache with `fault`. `Err` holds the divergence report and the
/// kvtrace JSON, as for the other lockstep targets.
pub fn check_fault(fault: kvcache::fault::CacheFault, data: &[u8]) -> Result<(), String> {
    check_fault_on(fault, kvcache::fault::FaultBase::Shipped, data)
}

/// [`check_fault`] with `fault` injected into `base`.
pub fn check_fault_on(
    fault: kvcache::fault::CacheFault,
    base: kvcache::fault::FaultBase,
    data: &[u8],
) -> Result<(), String> {
    check_lockstep_on(
        &fault_case_on(fault, base, data),
        &SubjectSpec::cache_fault(fault, base),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_into_a_run_gives_the_decoded_case() {
        let mut state = 3u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as u8
        };
        let mut ops = 0;
        for n in 0..60 {
            let data: Vec<u8> = (0..CONFIG_BYTES + 4 * (n % 40)).map(|_| next()).collect();
            for variant in [Variant::Dense, Variant::Packed] {
                let case = FuzzCase::from_bytes(variant, &data);
                let mut u = Unstructured::new(&data);
                let config = FuzzConfig::arbitrary(&mut u).unwrap().to_config(variant);
                assert_eq!(config, case.config);
                let mut run = Lockstep::new(&config).unwrap();
                decode_into(&mut run, &mut u, &Capabilities::full()).expect("shipped caches agree");
                assert_eq!(run.ops(), case.ops.as_slice(), "{variant:?} {data:?}");
                ops += case.ops.len();
            }
        }
        assert!(ops > 1000);
    }
}
