//! `PackedCache` in lockstep with `kvmodel::Model`.
//!
//! Every write carries a deterministic payload: the value of (op index,
//! position, batch row, head, dim, K|V) is a hash mapped to a finite value of
//! the dtype. The model says which op last wrote each visible (position,
//! head) and whether the position is cold, so the expected view follows:
//! hot rows hold their writer's payload, cold rows
//! `cold_round_trip(payload row)`, never-written heads zeros. Views are
//! compared bit for bit after every op (with `view()` after refused ops too,
//! which proves they changed nothing), and `resident_bytes()` against the
//! model's formula.

use std::path::Path;

use crate::vector_config::config_from_trace;
use candle_core::{DType, Device, Tensor};
use kvcache::{candle_dtype, Internals, KvCache, PackedCache};
use kvmodel::quant::{cold_round_trip, round_to_dtype};
use kvmodel::{Config, Dtype, Effect, Model, Op, Outcome, PackedPolicy, Quant, Variant, Write};
use proptest::prelude::*;

// ---------------------------------------------------------------- payload

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The payload row of (writer, position, batch row, head, K|V), as dtype
/// values given as f32. Rows vary in magnitude (tiny, ordinary, large) so
/// that the quantizer sees every regime.
fn payload_row(
    config: &Config,
    writer: u64,
    position: u64,
    b: usize,
    h: usize,
    is_v: bool,
) -> Vec<f32> {
    let seed = [writer, position, b as u64, h as u64, is_v as u64]
        .iter()
        .fold(config.seed ^ 0x9e37_79b9_7f4a_7c15, |acc, &x| {
            mix(acc ^ x.wrapping_add(0x632b_e59b))
        });
    let magnitude = match seed % 4 {
        0 => 1e-6,
        1 => 1.0,
        2 => 300.0,
        _ => 60000.0,
    };
    (0..config.head_dim)
        .map(|d| {
            let bits = mix(seed ^ (d as u64 + 1));
            let unit = (bits >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            round_to_dtype(unit * magnitude, config.dtype)
        })
        .collect()
}

/// K or V of a write: `[B, len, heads, D]` in the cache dtype.
fn payload(
    config: &Config,
    writer: u64,
    start: u64,
    len: usize,
    heads: std::ops::Range<usize>,
    is_v: bool,
) -> Tensor {
    let mut values = Vec::with_capacity(config.batch * len * heads.len() * config.head_dim);
    for b in 0..config.batch {
        for p in 0..len {
            for h in heads.clone() {
                values.extend(payload_row(config, writer, start + p as u64, b, h, is_v));
            }
        }
    }
    Tensor::from_vec(
        values,
        (config.batch, len, heads.len(), config.head_dim),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(candle_dtype(config.dtype))
    .unwrap()
}

// ---------------------------------------------------------------- checks

/// The view the model implies for `positions` and `heads`, as f32 bits,
/// `[B][pos][head][D]` flattened, for K and V.
fn expected_view(
    model: &Model,
    positions: &[u64],
    heads: std::ops::Range<usize>,
    writer: impl Fn(u64, usize) -> Option<u64>,
) -> [Vec<u32>; 2] {
    let config = model.config();
    let quant = config.packed_policy().quant;
    let mut out = [Vec::new(), Vec::new()];
    for (kv, out) in out.iter_mut().enumerate() {
        for b in 0..config.batch {
            for &p in positions {
                for h in heads.clone() {
                    let row = match writer(p, h) {
                        None => vec![0.0; config.head_dim],
                        Some(w) => {
                            let row = payload_row(config, w, p, b, h, kv == 1);
                            if model.is_cold(p) {
                                cold_round_trip(&row, quant, config.dtype)
                            } else {
                                row
                            }
                        }
                    };
                    out.extend(row.iter().map(|x| x.to_bits()));
                }
            }
        }
    }
    out
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn model_writer(model: &Model) -> impl Fn(u64, usize) -> Option<u64> + '_ {
    |p, h| model.writers(p).expect("visible positions are resident")[h]
}

/// `view()` and `resident_bytes()` against the model's state.
fn assert_state(model: &Model, cache: &PackedCache, context: &str) {
    let view = cache.view().unwrap();
    assert_eq!(view.global_end, model.global_end(), "{context}: global end");
    assert_eq!(
        view.positions,
        model.view(None),
        "{context}: view() positions"
    );
    let [k, v] = expected_view(
        model,
        &view.positions,
        0..model.config().heads,
        model_writer(model),
    );
    assert!(bits(&view.k) == k, "{context}: view() K differs");
    assert!(bits(&view.v) == v, "{context}: view() V differs");
    assert_eq!(
        cache.resident_bytes(),
        model.resident_bytes(),
        "{context}: resident bytes"
    );
    assert_eq!(
        cache.layout().slots.len(),
        model.resident_len(),
        "{context}: layout slots"
    );
}

/// Applies `op` (index `index`) to both and compares outcome and tensors.
fn step(model: &mut Model, cache: &mut PackedCache, index: u64, op: &Op) -> Outcome {
    let context = format!("op {index} ({op})");
    let expected: Outcome = model.apply(index, op).into();
    let config = model.config().clone();
    let actual: Outcome = match op {
        Op::Write(w) => {
            let heads = match w.heads {
                Some([first, count]) if first >= 0 && count >= 1 => {
                    let first = (first as usize).min(config.heads);
                    first..(first + count as usize).min(config.heads)
                }
                _ => 0..config.heads,
            };
            let len = w.len.clamp(0, 64) as usize;
            let start = w.start.max(0) as u64;
            let k = payload(&config, index, start, len, heads.clone(), false);
            let v = payload(&config, index, start, len, heads.clone(), true);
            match cache.write(w, &k, &v) {
                Err(e) => Outcome::Err(
                    e.kind()
                        .unwrap_or_else(|| panic!("{context}: non-contract error {e}")),
                ),
                Ok(view) => {
                    if let Outcome::Ok(Effect {
                        writers: Some(_), ..
                    }) = &expected
                    {
                        let [ek, ev] = expected_view(
                            model,
                            &view.positions,
                            heads.clone(),
                            model_writer(model),
                        );
                        assert!(bits(&view.k) == ek, "{context}: write view K differs");
                        assert!(bits(&view.v) == ev, "{context}: write view V differs");
                    }
                    Outcome::Ok(Effect {
                        global_end: view.global_end,
                        visible: Some(view.positions.clone()),
                        writers: Some(
                            heads
                                .map(|h| {
                                    view.positions
                                        .iter()
                                        .map(|&p| model.writers(p).and_then(|w| w[h]))
                                        .collect()
                                })
                                .collect(),
                        ),
                    })
                }
            }
        }
        Op::Rewind { to } => cache
            .rewind(*to)
            .map(Effect::moved)
            .map_err(|e| e.kind().unwrap())
            .into(),
        Op::Evict { tokens } => cache
            .evict(*tokens)
            .map(Effect::moved)
            .map_err(|e| e.kind().unwrap())
            .into(),
        Op::Pin { tokens } => cache
            .pin(*tokens)
            .map(Effect::moved)
            .map_err(|e| e.kind().unwrap())
            .into(),
        Op::Reset => cache
            .reset()
            .map(Effect::moved)
            .map_err(|e| e.kind().unwrap())
            .into(),
    };
    match (&expected, &actual) {
        (Outcome::Ok(e), Outcome::Ok(a)) => {
            assert_eq!(a.global_end, e.global_end, "{context}: global end");
            assert_eq!(a.visible, e.visible, "{context}: visible");
        }
        _ => assert_eq!(actual, expected, "{context}: outcome"),
    }
    assert_state(model, cache, &context);
    expected
}

// ---------------------------------------------------------------- op generation

/// An abstract op, resolved against the model's state when it runs, so that
/// the denoise pattern (append, then rewrites of the same chunk) is common.
#[derive(Clone, Debug)]
enum Step {
    Append {
        len: i64,
        heads: Option<[i64; 2]>,
        recent: Option<i64>,
    },
    Rewrite {
        heads: Option<[i64; 2]>,
        recent: Option<i64>,
    },
    RewindToChunk {
        pick: usize,
    },
    RewindTo {
        to: i64,
    },
    Reset,
    Evict {
        tokens: i64,
    },
    Pin {
        tokens: i64,
    },
    Raw(Write),
    ZeroLen,
}

fn heads_strategy() -> impl Strategy<Value = Option<[i64; 2]>> {
    prop_oneof![
        6 => Just(None),
        3 => (0i64..3, 1i64..3).prop_map(|(f, c)| Some([f, c])),
        1 => (-1i64..4, -1i64..4).prop_map(|(f, c)| Some([f, c])),
    ]
}

fn recent_strategy() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![6 => Just(None), 3 => (0i64..8).prop_map(Some), 1 => Just(Some(-1))]
}

fn step_strategy() -> impl Strategy<Value = Vec<Step>> {
    let append = || {
        (1i64..6, heads_strategy(), recent_strategy())
            .prop_map(|(len, heads, recent)| Step::Append { len, heads, recent })
    };
    let rewrite = (heads_strategy(), recent_strategy(), 1usize..6)
        .prop_map(|(heads, recent, times)| vec![Step::Rewrite { heads, recent }; times]);
    let single = prop_oneof![
        8 => append(),
        2 => any::<usize>().prop_map(|pick| Step::RewindToChunk { pick }),
        1 => (-2i64..20).prop_map(|to| Step::RewindTo { to }),
        1 => Just(Step::Reset),
        1 => (-2i64..3).prop_map(|tokens| Step::Evict { tokens }),
        1 => (-2i64..3).prop_map(|tokens| Step::Pin { tokens }),
        1 => (prop_oneof![-2i64..20, Just(i64::MAX), Just(i64::MIN)], prop_oneof![-2i64..6, Just(i64::MAX)], heads_strategy(), recent_strategy())
            .prop_map(|(start, len, heads, recent_window)| Step::Raw(Write { start, len, heads, recent_window })),
        1 => Just(Step::ZeroLen),
    ];
    let group = prop_oneof![
        3 => (append(), rewrite).prop_map(|(a, mut r)| { r.insert(0, a); r }),
        2 => single.prop_map(|s| vec![s]),
    ];
    prop::collection::vec(group, 1..14).prop_map(|groups| groups.concat())
}

fn resolve(step: &Step, model: &Model) -> Op {
    let g = model.global_end() as i64;
    match step {
        Step::Append { len, heads, recent } => Op::Write(Write {
            start: g,
            len: *len,
            heads: *heads,
            recent_window: *recent,
        }),
        Step::Rewrite { heads, recent } => match model.current_chunk() {
            Some(c) => Op::Write(Write {
                start: c.start as i64,
                len: c.len as i64,
                heads: *heads,
                recent_window: *recent,
            }),
            None => Op::Write(Write {
                start: g,
                len: 2,
                heads: *heads,
                recent_window: *recent,
            }),
        },
        Step::RewindToChunk { pick } => {
            let starts: Vec<i64> = model
                .chunks()
                .iter()
                .map(|c| c.start as i64)
                .chain([0, g])
                .collect();
            Op::Rewind {
                to: starts[pick % starts.len()],
            }
        }
        Step::RewindTo { to } => Op::Rewind { to: *to },
        Step::Reset => Op::Reset,
        Step::Evict { tokens } => Op::Evict { tokens: *tokens },
        Step::Pin { tokens } => Op::Pin { tokens: *tokens },
        Step::Raw(w) => Op::Write(*w),
        Step::ZeroLen => Op::Write(Write::new(g, 0)),
    }
}

fn config_strategy() -> impl Strategy<Value = Config> {
    (
        1usize..=8,
        0usize..=3,
        any::<u16>(),
        (
            0usize..=3,
            prop_oneof![Just(Quant::None), Just(Quant::Int8), Just(Quant::Int4)],
            any::<bool>(),
        ),
        (1usize..=3, 1usize..=2, 1usize..=5),
        prop_oneof![Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::Bf16)],
        any::<u64>(),
    )
        .prop_map(
            |(
                capacity,
                sink,
                window_pick,
                (keep, quant, pack_sink),
                (heads, batch, head_dim),
                dtype,
                seed,
            )| {
                let sink = sink.min(capacity - 1);
                // W in (S, C]; None (= C) half of the time.
                let window = (window_pick % 2 == 0)
                    .then(|| sink + 1 + (window_pick as usize / 2) % (capacity - sink));
                Config {
                    variant: Variant::Packed,
                    batch,
                    heads,
                    head_dim,
                    dtype,
                    capacity,
                    sink,
                    window,
                    growth: false,
                    global_sink: 0,
                    trim: kvmodel::Trim::BeforeRead,
                    packed: Some(PackedPolicy {
                        keep_recent_chunks: keep,
                        quant,
                        pack_sink,
                    }),
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Random op sequences over small packed configs, in lockstep with the model.
    #[test]
    fn packed_cache_matches_the_model(
        config in config_strategy(),
        steps in step_strategy(),
        path in prop::sample::select(kvcache::Path::ALL.to_vec()),
    ) {
        let mut model = Model::new(&config).unwrap();
        let mut cache = PackedCache::with_path(&config, &Device::Cpu, path).unwrap();
        assert_state(&model, &cache, "start");
        for (i, s) in steps.iter().enumerate() {
            let op = resolve(s, &model);
            step(&mut model, &mut cache, i as u64, &op);
        }
    }
}

// ---------------------------------------------------------------- fixed cases

#[test]
fn dense_configs_are_refused() {
    let err = PackedCache::new(&Config::dense(4), &Device::Cpu).unwrap_err();
    assert_eq!(err.kind(), Some(kvmodel::ErrorKind::InvalidConfig));
    let mut config = Config::packed(4);
    config.growth = true;
    assert_eq!(
        PackedCache::new(&config, &Device::Cpu).unwrap_err().kind(),
        Some(kvmodel::ErrorKind::InvalidConfig)
    );
}

/// The shipped caches implement the default trim mode only: an
/// `after_read` config is refused naming `trim`, never run by the other
/// rule (docs/contract.md §3, trim modes).
#[test]
fn after_read_configs_are_refused_by_every_shipped_cache() {
    let dense = Config {
        sink: 1,
        trim: kvmodel::Trim::AfterRead,
        ..Config::dense(4)
    };
    let packed = Config {
        trim: kvmodel::Trim::AfterRead,
        ..Config::packed(4)
    };
    let errors = [
        kvcache::DenseCache::new(&dense, &Device::Cpu)
            .map(|_| ())
            .unwrap_err(),
        kvcache::RingCache::new(&dense, &Device::Cpu)
            .map(|_| ())
            .unwrap_err(),
        PackedCache::new(&packed, &Device::Cpu)
            .map(|_| ())
            .unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.kind(), Some(kvmodel::ErrorKind::InvalidConfig));
        assert!(err.to_string().contains("trim"), "{err}");
    }
}

#[test]
fn extreme_arguments_are_refused_like_the_model() {
    let mut config = Config::packed(6);
    config.sink = 1;
    config.heads = 2;
    let mut model = Model::new(&config).unwrap();
    let mut cache = PackedCache::new(&config, &Device::Cpu).unwrap();
    let ops = [
        Op::Write(Write::new(0, 3)),
        Op::Write(Write::new(3, i64::MAX)),
        Op::Write(Write::new(i64::MAX, i64::MAX)),
        Op::Write(Write::new(i64::MIN, 1)),
        Op::Write(Write {
            start: 3,
            len: 2,
            heads: Some([i64::MAX, i64::MAX]),
            recent_window: None,
        }),
        Op::Write(Write {
            start: 3,
            len: 2,
            heads: None,
            recent_window: Some(i64::MIN),
        }),
        Op::Rewind { to: i64::MAX },
        Op::Rewind { to: i64::MIN },
        Op::Evict { tokens: i64::MIN },
        Op::Pin { tokens: i64::MAX },
        Op::Write(Write::new(3, 0)),
        Op::Write(Write::new(3, 7)),
    ];
    for (i, op) in ops.iter().enumerate() {
        step(&mut model, &mut cache, i as u64, op);
    }
}

/// A long stream with partial eviction of a chunk that straddles the sink.
#[test]
fn chunk_straddling_the_sink_is_trimmed_not_requantized() {
    let mut config = Config::packed(7);
    config.sink = 2;
    config.head_dim = 3;
    config.packed = Some(PackedPolicy {
        keep_recent_chunks: 0,
        quant: Quant::Int4,
        pack_sink: true,
    });
    let mut model = Model::new(&config).unwrap();
    let mut cache = PackedCache::new(&config, &Device::Cpu).unwrap();
    let mut i = 0;
    for len in [4, 2, 3, 1, 2, 3] {
        let g = model.global_end() as i64;
        step(&mut model, &mut cache, i, &Op::Write(Write::new(g, len)));
        i += 1;
        step(&mut model, &mut cache, i, &Op::Write(Write::new(g, len)));
        i += 1;
    }
    step(&mut model, &mut cache, i, &Op::Rewind { to: 0 });
}

// ---------------------------------------------------------------- vectors

#[test]
fn shared_packed_vectors_replay() {
    // The project's copy of the contract's vectors.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("packed_") || !name.ends_with(".kvtrace.json") {
            continue;
        }
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let config = config_from_trace(&trace["config"]);
        let ops: Vec<Op> = serde_json::from_value(trace["ops"].clone()).unwrap();
        let expect: Vec<Outcome> = serde_json::from_value(trace["expect"].clone()).unwrap();
        for cache_path in kvcache::Path::ALL {
            let mut model = Model::new(&config).unwrap();
            let mut cache = PackedCache::with_path(&config, &Device::Cpu, cache_path).unwrap();
            for (i, (op, want)) in ops.iter().zip(&expect).enumerate() {
                let got = step(&mut model, &mut cache, i as u64, op);
                assert_eq!(&got, want, "{name} ({cache_path}): op {i} ({op})");
            }
        }
        replayed += 1;
    }
    assert!(
        replayed >= 2,
        "found {replayed} packed vectors in {}",
        dir.display()
    );
}
