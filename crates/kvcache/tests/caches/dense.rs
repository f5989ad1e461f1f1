//! `DenseCache` in lockstep with the reference model `kvmodel::Model`.
//!
//! Every op runs on both. The cache must return the model's outcome kind,
//! global end and visible positions, and its view tensors must hold,
//! bitwise, the values the model's writers imply: the payload of op `i` at
//! (position, batch row, head, dim, K|V) is a fixed hash turned into a value
//! exact in every dtype, and a head never written reads as zero. After every
//! op the full `view()` is compared the same way, so a refused op that
//! changed anything is caught; refused ops are also checked against a
//! snapshot of the view taken before them.
//!
//! `PROPTEST_CASES` overrides the number of random sequences (default 256).

use std::ops::Range;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use kvcache::{DenseCache, Internals, KvCache, Path, Slot};
use kvmodel::{Config, Dtype, ErrorKind, Model, Op, Write};
use proptest::prelude::*;

/// A value of the payload of op `op`, exactly representable in f32, f16 and
/// bf16 (a non-zero 7-bit integer times a small power of two), so that
/// comparing as f32 is comparing bits.
fn value(op: u64, position: u64, batch: usize, head: usize, dim: usize, kv: usize) -> f32 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for x in [
        op,
        position,
        batch as u64,
        head as u64,
        dim as u64,
        kv as u64,
    ] {
        h = (h ^ x).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 31;
    }
    let magnitude = (h % 254) as i32 - 127;
    let magnitude = if magnitude >= 0 {
        magnitude + 1
    } else {
        magnitude
    };
    magnitude as f32 / (1u32 << ((h >> 20) & 3)) as f32
}

/// The K (`kv = 0`) or V (`kv = 1`) payload of op `op` writing `[start,
/// start + len)` for `heads`, shape `[B, len, heads, D]`.
fn payload(
    config: &Config,
    op: u64,
    start: u64,
    len: usize,
    heads: Range<usize>,
    kv: usize,
) -> Tensor {
    let mut data = Vec::with_capacity(config.batch * len * heads.len() * config.head_dim);
    for b in 0..config.batch {
        for t in 0..len {
            for h in heads.clone() {
                for d in 0..config.head_dim {
                    data.push(value(op, start + t as u64, b, h, d, kv));
                }
            }
        }
    }
    let shape = (config.batch, len, heads.len(), config.head_dim);
    Tensor::from_vec(data, shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(kvcache::candle_dtype(config.dtype)))
        .expect("payload tensor")
}

/// The values a view of `positions` for `heads` must hold, `[B, len, heads, D]`
/// flattened, from the writers (`writers[j][i]` for head `heads.start + j`).
fn expected(
    config: &Config,
    positions: &[u64],
    heads: Range<usize>,
    writers: &[Vec<Option<u64>>],
    kv: usize,
) -> Vec<f32> {
    let mut out = Vec::new();
    for b in 0..config.batch {
        for (i, &p) in positions.iter().enumerate() {
            for (j, h) in heads.clone().enumerate() {
                for d in 0..config.head_dim {
                    out.push(writers[j][i].map_or(0.0, |w| value(w, p, b, h, d, kv)));
                }
            }
        }
    }
    out
}

/// A tensor's values as f32 (exact for f16 / bf16).
fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("view values")
}

/// What a view shows, for snapshots: global end, positions, K and V values.
type Snapshot = (u64, Vec<u64>, Vec<f32>, Vec<f32>);

fn snapshot(cache: &DenseCache) -> Snapshot {
    let view = cache.view().expect("view");
    (
        view.global_end,
        view.positions.clone(),
        values(&view.k),
        values(&view.v),
    )
}

/// The cache and the model, driven op by op.
struct Lockstep {
    config: Config,
    model: Model,
    cache: DenseCache,
    index: u64,
}

impl Lockstep {
    fn new(config: &Config) -> Lockstep {
        Lockstep::with_path(config, Path::InPlace)
    }

    fn with_path(config: &Config, path: Path) -> Lockstep {
        Lockstep {
            config: config.clone(),
            model: Model::new(config).expect("valid config"),
            cache: DenseCache::with_path(config, &Device::Cpu, path).expect("valid config"),
            index: 0,
        }
    }

    /// Applies `op` to both, asserts they agree, returns the model's outcome.
    fn step(&mut self, op: &Op) -> Result<kvmodel::Effect, ErrorKind> {
        let index = self.index;
        self.index += 1;
        let before = snapshot(&self.cache);
        let expect = self.model.apply(index, op).map_err(|e| e.kind());
        let context = format!("op {index} `{op}` on {:?}", self.config);
        let actual: Result<u64, ErrorKind> = match op {
            Op::Write(w) => self.write(index, w, &expect, &context),
            Op::Rewind { to } => self.cache.rewind(*to).map_err(kind),
            Op::Evict { tokens } => self.cache.evict(*tokens).map_err(kind),
            Op::Pin { tokens } => self.cache.pin(*tokens).map_err(kind),
            Op::Reset => self.cache.reset().map_err(kind),
        };
        assert_eq!(
            actual,
            expect.as_ref().map(|e| e.global_end).map_err(|k| *k),
            "{context}: outcome"
        );
        if expect.is_err() {
            assert_eq!(
                snapshot(&self.cache),
                before,
                "{context}: a refused op changed the view"
            );
        }
        self.check_state(&context);
        expect
    }

    /// Runs a write on the cache and checks its view; returns its global end.
    fn write(
        &mut self,
        index: u64,
        w: &Write,
        expect: &Result<kvmodel::Effect, ErrorKind>,
        context: &str,
    ) -> Result<u64, ErrorKind> {
        let heads = match w.heads {
            None => Some(0..self.config.heads),
            Some([first, count])
                if first >= 0
                    && count >= 1
                    && first
                        .checked_add(count)
                        .is_some_and(|e| e <= self.config.heads as i64) =>
            {
                Some(first as usize..(first + count) as usize)
            }
            Some(_) => None,
        };
        // A payload only for requests of a sane size; the others must be
        // refused by the contract before the payload is looked at.
        let (k, v) = match (heads.clone(), usize::try_from(w.len)) {
            (Some(heads), Ok(len)) if w.start >= 0 && len <= 64 => (
                payload(&self.config, index, w.start as u64, len, heads.clone(), 0),
                payload(&self.config, index, w.start as u64, len, heads, 1),
            ),
            _ => {
                let empty = payload(&self.config, index, 0, 0, 0..1, 0);
                (empty.clone(), empty)
            }
        };
        let config = self.config.clone();
        let view = match self.cache.write(w, &k, &v) {
            Ok(view) => view,
            Err(e) => {
                return Err(e
                    .kind()
                    .unwrap_or_else(|| panic!("{context}: non-contract error {e}")))
            }
        };
        if let Ok(effect) = expect {
            let heads = heads.expect("the model accepted the head range");
            let visible = effect.visible.as_ref().expect("write visible");
            let writers = effect.writers.as_ref().expect("write writers");
            assert_eq!(&view.positions, visible, "{context}: visible");
            assert_eq!(
                view.k.dims(),
                [config.batch, visible.len(), heads.len(), config.head_dim],
                "{context}: view shape"
            );
            assert_eq!(
                values(&view.k),
                expected(&config, visible, heads.clone(), writers, 0),
                "{context}: K"
            );
            assert_eq!(
                values(&view.v),
                expected(&config, visible, heads, writers, 1),
                "{context}: V"
            );
        }
        Ok(view.global_end)
    }

    /// The full view, layout, capacity and bytes against the model.
    fn check_state(&self, context: &str) {
        assert_eq!(
            self.cache.global_end(),
            self.model.global_end(),
            "{context}: global end"
        );
        assert_eq!(
            self.cache.capacity(),
            self.model.capacity(),
            "{context}: capacity"
        );
        assert_eq!(
            self.cache.window(),
            self.model.window(),
            "{context}: window"
        );
        assert_eq!(
            self.cache.resident_bytes(),
            self.model.resident_bytes(),
            "{context}: bytes"
        );
        let layout = self.cache.layout();
        assert_eq!(
            layout.slots.len(),
            self.cache.capacity(),
            "{context}: layout size"
        );
        let hot: Vec<u64> = layout
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Hot(p) => Some(*p),
                _ => None,
            })
            .collect();
        assert_eq!(
            hot,
            self.model.resident().collect::<Vec<_>>(),
            "{context}: layout"
        );
        let view = self.cache.view().expect("view");
        let visible = self.model.view(None);
        assert_eq!(view.positions, visible, "{context}: view() positions");
        let heads = 0..self.config.heads;
        let writers: Vec<Vec<Option<u64>>> = heads
            .clone()
            .map(|h| {
                visible
                    .iter()
                    .map(|p| self.model.writers(*p).expect("resident")[h])
                    .collect()
            })
            .collect();
        assert_eq!(
            values(&view.k),
            expected(&self.config, &visible, heads.clone(), &writers, 0),
            "{context}: view() K"
        );
        assert_eq!(
            values(&view.v),
            expected(&self.config, &visible, heads, &writers, 1),
            "{context}: view() V"
        );
    }
}

fn kind(e: kvcache::Error) -> ErrorKind {
    e.kind().unwrap_or_else(|| panic!("non-contract error {e}"))
}

/// An op relative to the current global end, so that random sequences mostly
/// hit meaningful cases, plus raw extreme ones.
#[derive(Clone, Debug)]
enum Step {
    Write {
        back: i64,
        len: i64,
        heads: Option<[i64; 2]>,
        recent: Option<i64>,
    },
    Rewind {
        back: i64,
    },
    Evict(i64),
    Pin(i64),
    Reset,
    Raw(Op),
}

impl Step {
    fn resolve(&self, global_end: u64) -> Op {
        let g = global_end as i64;
        match self {
            Step::Write {
                back,
                len,
                heads,
                recent,
            } => Op::Write(Write {
                start: g - back,
                len: *len,
                heads: *heads,
                recent_window: *recent,
            }),
            Step::Rewind { back } => Op::Rewind { to: g - back },
            Step::Evict(k) => Op::Evict { tokens: *k },
            Step::Pin(n) => Op::Pin { tokens: *n },
            Step::Reset => Op::Reset,
            Step::Raw(op) => *op,
        }
    }
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let extreme = prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(-1i64),
        Just(1i64 << 40)
    ];
    prop_oneof![
        8 => (
            prop_oneof![4 => Just(0i64), 4 => 1i64..=6, 1 => -2i64..=-1],
            prop_oneof![1 => Just(0i64), 8 => 1i64..=5, 1 => -1i64..=-1],
            prop_oneof![4 => Just(None), 1 => (-1i64..=3, -1i64..=3).prop_map(|(a, b)| Some([a, b]))],
            prop_oneof![4 => Just(None), 1 => (-1i64..=6).prop_map(Some)],
        )
            .prop_map(|(back, len, heads, recent)| Step::Write { back, len, heads, recent }),
        1 => (-1i64..=6).prop_map(|back| Step::Rewind { back }),
        1 => (-1i64..=5).prop_map(Step::Evict),
        1 => (-1i64..=8).prop_map(Step::Pin),
        1 => Just(Step::Reset),
        1 => (extreme.clone(), extreme, 0usize..5).prop_map(|(a, b, which)| Step::Raw(match which {
            0 => Op::Write(Write::new(0, a)),
            1 => Op::Write(Write::new(a, b)),
            2 => Op::Rewind { to: a },
            3 => Op::Evict { tokens: a },
            _ => Op::Pin { tokens: a },
        })),
    ]
}

fn config_strategy() -> impl Strategy<Value = Config> {
    (
        1usize..=8,
        1usize..=2,
        1usize..=3,
        1usize..=3,
        0usize..3,
        any::<bool>(),
    )
        .prop_flat_map(|(capacity, batch, heads, head_dim, dtype, growth)| {
            (
                Just((capacity, batch, heads, head_dim, dtype, growth)),
                0..capacity,
                any::<bool>(),
                any::<bool>(),
                0usize..=8,
            )
        })
        .prop_map(
            |(
                (capacity, batch, heads, head_dim, dtype, growth),
                sink,
                global_is_sink,
                windowed,
                w,
            )| {
                let mut config = Config::dense(capacity);
                config.batch = batch;
                config.heads = heads;
                config.head_dim = head_dim;
                config.dtype = [Dtype::F32, Dtype::F16, Dtype::Bf16][dtype];
                config.growth = growth;
                config.sink = sink;
                config.global_sink = if global_is_sink { sink } else { 0 };
                if windowed && sink + 1 < capacity {
                    config.window = Some(sink + 1 + w % (capacity - sink));
                }
                config
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random op sequences over small configs: the cache agrees with the
    /// model after every op, values included, on both paths.
    #[test]
    fn dense_matches_model(
        config in config_strategy(),
        steps in prop::collection::vec(step_strategy(), 1..48),
        path in prop::sample::select(Path::ALL.to_vec()),
    ) {
        let mut lockstep = Lockstep::with_path(&config, path);
        for step in &steps {
            let op = step.resolve(lockstep.model.global_end());
            lockstep.step(&op).ok();
        }
    }
}

/// The project's copy of the contract's vectors (`tests/vectors`).
fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// A docs/kvtrace.md config object, with its defaults.
fn parse_config(json: &serde_json::Value) -> Config {
    let int = |name: &str, default: usize| {
        json.get(name)
            .and_then(|v| v.as_u64())
            .map_or(default, |v| v as usize)
    };
    let mut config = Config::dense(int("capacity", 0));
    config.batch = int("batch", 1);
    config.heads = int("heads", 1);
    config.head_dim = int("head_dim", 1);
    config.sink = int("sink", 0);
    config.global_sink = int("global_sink", 0);
    config.window = json
        .get("window")
        .and_then(|v| v.as_u64())
        .map(|v| v as usize);
    config.growth = json
        .get("growth")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    config.dtype = match json.get("dtype").and_then(|v| v.as_str()).unwrap_or("f32") {
        "f16" => Dtype::F16,
        "bf16" => Dtype::Bf16,
        _ => Dtype::F32,
    };
    config
}

/// Every dense vector of `tests/vectors` replays through the cache with the
/// outcomes it expects (and in lockstep with the model).
#[test]
fn dense_replays_shared_vectors() {
    let mut replayed = 0;
    for entry in std::fs::read_dir(vectors_dir()).expect("vectors dir") {
        let path = entry.expect("entry").path();
        if !path.to_string_lossy().ends_with(".kvtrace.json") {
            continue;
        }
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        if trace["config"]["variant"] != "dense" {
            continue;
        }
        let config = parse_config(&trace["config"]);
        let ops: Vec<Op> = serde_json::from_value(trace["ops"].clone()).expect("ops");
        let expect = trace["expect"].as_array().cloned().unwrap_or_default();
        for cache_path in Path::ALL {
            let mut lockstep = Lockstep::with_path(&config, cache_path);
            for (i, op) in ops.iter().enumerate() {
                let outcome = lockstep.step(op);
                let Some(want) = expect.get(i) else { continue };
                let name = path.file_name().unwrap().to_string_lossy();
                match (&outcome, want.get("err"), want.get("ok")) {
                    (Err(kind), Some(err), _) => assert_eq!(kind.name(), err, "{name} op {i}"),
                    (Ok(effect), _, Some(ok)) => {
                        assert_eq!(
                            effect.global_end,
                            ok["global_end"].as_u64().unwrap(),
                            "{name} op {i}"
                        );
                        if let Some(visible) = ok.get("visible") {
                            let visible: Vec<u64> =
                                serde_json::from_value(visible.clone()).unwrap();
                            assert_eq!(effect.visible.as_ref(), Some(&visible), "{name} op {i}");
                        }
                    }
                    _ => panic!("{name} op {i} ({cache_path}): got {outcome:?}, expected {want}"),
                }
            }
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "only {replayed} dense vectors found");
}

/// The example of docs/kvtrace.md, parsed from the document: on each path
/// the cache's views hold, bit for bit, the rows the model's writers imply,
/// and the model gives the document's `expect`, writers included.
#[test]
fn kvtrace_md_example_bytes_match_the_model() {
    let (config, ops, expect) = crate::answers::kvtrace_md_example();
    for path in Path::ALL {
        let mut lockstep = Lockstep::with_path(&config, path);
        for (i, op) in ops.iter().enumerate() {
            let got: kvmodel::Outcome = lockstep.step(op).into();
            assert_eq!(got, expect[i], "{path}: op {i} ({op})");
        }
    }
}

/// Steady-state rolling (sink followed by the contiguous tail) returns a
/// zero-copy view; a window below capacity hides the middle and needs a cat.
#[test]
fn dense_rolling_view_is_zero_copy() {
    let mut config = Config::dense(12);
    config.sink = 2;
    config.heads = 2;
    config.head_dim = 4;
    let mut lockstep = Lockstep::new(&config);
    for i in 0..10 {
        lockstep
            .step(&Op::Write(Write::new(
                if i == 0 { 0 } else { 2 * i as i64 },
                2,
            )))
            .unwrap();
    }
    let view = lockstep.cache.view().unwrap();
    assert!(view.zero_copy);
    assert_eq!(
        view.positions,
        vec![0, 1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    );
    // A head-range write of the steady state is still a narrow.
    let k = payload(&config, 99, 20, 2, 1..2, 0);
    let w = Write {
        start: 20,
        len: 2,
        heads: Some([1, 1]),
        recent_window: None,
    };
    assert!(lockstep.cache.write(&w, &k, &k).unwrap().zero_copy);

    config.window = Some(6);
    let mut lockstep = Lockstep::new(&config);
    for i in 0..10 {
        lockstep.step(&Op::Write(Write::new(2 * i, 2))).unwrap();
    }
    let view = lockstep.cache.view().unwrap();
    assert!(!view.zero_copy);
    assert_eq!(view.positions, vec![0, 1, 16, 17, 18, 19]);
}

/// Heads outside a head-range write of new positions read as zero, even in
/// slots that held other data before a rewind.
#[test]
fn dense_unwritten_heads_read_zero() {
    let mut config = Config::dense(4);
    config.heads = 3;
    config.head_dim = 2;
    let mut lockstep = Lockstep::new(&config);
    lockstep.step(&Op::Write(Write::new(0, 4))).unwrap();
    lockstep.step(&Op::Rewind { to: 1 }).unwrap();
    let w = Write {
        start: 1,
        len: 3,
        heads: Some([1, 1]),
        recent_window: None,
    };
    lockstep.step(&Op::Write(w)).unwrap();
    let view = lockstep.cache.view().unwrap();
    let k = values(&view.k);
    // Position 1 (slot 1), head 0 and head 2 are zero; head 1 is written.
    assert_eq!(&k[6..8], &[0.0, 0.0]);
    assert_ne!(&k[8..10], &[0.0, 0.0]);
    assert_eq!(&k[10..12], &[0.0, 0.0]);
}

/// Extreme arguments get the model's kinds, never a panic or an allocation.
#[test]
fn dense_extreme_arguments_are_refused() {
    for growth in [false, true] {
        let mut config = Config::dense(4);
        config.sink = 1;
        config.growth = growth;
        let mut lockstep = Lockstep::new(&config);
        lockstep.step(&Op::Write(Write::new(0, 3))).unwrap();
        for op in [
            Op::Write(Write::new(0, i64::MAX)),
            Op::Write(Write::new(3, i64::MAX)),
            Op::Write(Write::new(i64::MAX, i64::MAX)),
            Op::Write(Write::new(i64::MIN, 1)),
            Op::Write(Write {
                start: 0,
                len: 1,
                heads: Some([i64::MAX, i64::MAX]),
                recent_window: Some(i64::MAX),
            }),
            Op::Write(Write {
                start: 3,
                len: 1,
                heads: None,
                recent_window: Some(i64::MIN),
            }),
            Op::Rewind { to: i64::MAX },
            Op::Rewind { to: i64::MIN },
            Op::Evict { tokens: i64::MAX },
            Op::Pin { tokens: i64::MAX },
            Op::Pin { tokens: -1 },
        ] {
            lockstep.step(&op).unwrap_err();
        }
    }
}

/// A payload of the wrong shape or dtype is refused after the contract
/// checks, and changes nothing.
#[test]
fn dense_bad_payload_changes_nothing() {
    let mut config = Config::dense(4);
    config.heads = 2;
    let mut cache = DenseCache::new(&config, &Device::Cpu).unwrap();
    let good = payload(&config, 0, 0, 2, 0..2, 0);
    cache.write(&Write::new(0, 2), &good, &good).unwrap();
    let before = snapshot(&cache);
    let wrong_shape = payload(&config, 1, 2, 3, 0..2, 0);
    let err = cache
        .write(&Write::new(2, 2), &wrong_shape, &wrong_shape)
        .unwrap_err();
    assert!(matches!(err, kvcache::Error::Payload { .. }));
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument));
    let message = err.to_string();
    let expected = format!("{:?}", [1, 2, 2, config.head_dim]);
    let actual = format!("{:?}", wrong_shape.dims());
    assert!(
        message.contains(&expected) && message.contains(&actual),
        "the message names the actual {actual} and the expected {expected} shape: {message}"
    );
    let wrong_dtype = good.to_dtype(DType::F16).unwrap();
    let err = cache
        .write(&Write::new(2, 2), &good, &wrong_dtype)
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument));
    assert!(err.to_string().contains("F16"), "{err}");
    // Contract first: a gap is `non_sequential` whatever the payload.
    let err = cache
        .write(&Write::new(5, 2), &wrong_shape, &good)
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NonSequential));
    assert_eq!(snapshot(&cache), before);
    assert_eq!(cache.layout().slots[2], Slot::Free);
}

/// The random sequences reach every error kind the dense variant has, and
/// evictions, growth and pins succeed too (a deterministic sample of the
/// same strategies as `dense_matches_model`).
#[test]
fn dense_random_sequences_cover_every_kind() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;

    let mut runner = TestRunner::deterministic();
    let strategy = (
        config_strategy(),
        prop::collection::vec(step_strategy(), 1..48),
    );
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    for _ in 0..400 {
        let (config, steps) = strategy.new_tree(&mut runner).expect("tree").current();
        let mut lockstep = Lockstep::new(&config);
        for step in &steps {
            let op = step.resolve(lockstep.model.global_end());
            let capacity = lockstep.model.capacity();
            let resident = lockstep.model.resident_len();
            let name = match lockstep.step(&op) {
                Err(kind) => kind.name(),
                Ok(_) if lockstep.model.capacity() > capacity => "ok_grow",
                Ok(_) if matches!(op, Op::Pin { tokens } if tokens > 0) => "ok_pin",
                Ok(_)
                    if matches!(op, Op::Write(_)) && lockstep.model.resident_len() <= resident =>
                {
                    "ok_write_roll"
                }
                Ok(_) => "ok",
            };
            *seen.entry(name).or_default() += 1;
        }
    }
    eprintln!("outcomes over 400 random sequences: {seen:?}");
    for kind in ErrorKind::OP_KINDS
        .iter()
        .filter(|k| **k != ErrorKind::Unsupported)
    {
        assert!(seen.contains_key(kind.name()), "never saw {kind}: {seen:?}");
    }
    for name in ["ok_grow", "ok_pin", "ok_write_roll"] {
        assert!(seen.contains_key(name), "never saw {name}: {seen:?}");
    }
}
