//! Cases the contract settles explicitly (docs/contract.md §3, §5, §6 and the
//! example of docs/kvtrace.md), run on the model and on every shipped cache
//! of the variant: `DenseCache` on each path and `RingCache` for dense
//! configurations, `PackedCache` on each path for packed ones. Each op's
//! outcome (kind, global end, visible positions) and the full `view()`
//! after it must be the model's, and every cache must return the same view
//! bytes as the first one for the same payloads (the first one's bytes are
//! checked against the model by the lockstep suites of `dense` and
//! `packed`).

use candle_core::{DType, Device, Tensor};
use kvcache::{DenseCache, KvCache, PackedCache, Path, RingCache};
use kvmodel::{Config, Effect, ErrorKind, Model, Op, Outcome, PackedPolicy, Quant, Variant, Write};

/// A payload value of op `op`, exact in f32: distinct per (op, position,
/// batch row, head, dim, K|V).
fn value(op: u64, position: u64, batch: usize, head: usize, dim: usize, kv: usize) -> f32 {
    let mut h = 0x2545_f491_4f6c_dd1du64;
    for x in [
        op,
        position,
        batch as u64,
        head as u64,
        dim as u64,
        kv as u64,
    ] {
        h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    ((h % 2001) as f32 - 1000.0) / 8.0 + 0.125
}

fn payload(config: &Config, op: u64, w: &Write, kv: usize) -> Tensor {
    let heads = match w.heads {
        Some([first, count]) if first >= 0 && count >= 1 => {
            first as usize..(first + count).min(config.heads as i64) as usize
        }
        _ => 0..config.heads,
    };
    let (start, len) = (w.start.max(0) as u64, w.len.clamp(0, 64) as usize);
    let mut data = Vec::new();
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
        .expect("payload")
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("view values")
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Every shipped cache of `config`'s variant, named.
fn caches(config: &Config) -> Vec<(String, Box<dyn KvCache>)> {
    let device = Device::Cpu;
    let mut out: Vec<(String, Box<dyn KvCache>)> = Vec::new();
    for path in Path::ALL {
        match config.variant {
            Variant::Dense => out.push((
                format!("dense {path}"),
                Box::new(DenseCache::with_path(config, &device, path).unwrap()),
            )),
            Variant::Packed => out.push((
                format!("packed {path}"),
                Box::new(PackedCache::with_path(config, &device, path).unwrap()),
            )),
        }
    }
    if config.variant == Variant::Dense {
        out.push((
            "ring".to_string(),
            Box::new(RingCache::new(config, &device).unwrap()),
        ));
    }
    out
}

/// What one op showed: outcome (writers left out, as caches do not report
/// them), then the view bytes (K, V) of a write and of `view()` after it.
type Shown = (Result<(u64, Option<Vec<u64>>), ErrorKind>, Vec<Vec<u32>>);

fn apply(cache: &mut dyn KvCache, config: &Config, index: u64, op: &Op) -> Shown {
    let kind = |e: kvcache::Error| e.kind().expect("a contract error");
    let mut bytes = Vec::new();
    let outcome = match op {
        Op::Write(w) => {
            let (k, v) = (payload(config, index, w, 0), payload(config, index, w, 1));
            cache.write(w, &k, &v).map_err(kind).map(|view| {
                bytes.extend([bits(&view.k), bits(&view.v)]);
                (view.global_end, Some(view.positions.clone()))
            })
        }
        Op::Rewind { to } => cache.rewind(*to).map_err(kind).map(|g| (g, None)),
        Op::Evict { tokens } => cache.evict(*tokens).map_err(kind).map(|g| (g, None)),
        Op::Pin { tokens } => cache.pin(*tokens).map_err(kind).map(|g| (g, None)),
        Op::Reset => cache.reset().map_err(kind).map(|g| (g, None)),
    };
    let view = cache.view().expect("view");
    bytes.extend([
        view.positions.iter().map(|&p| p as u32).collect(),
        bits(&view.k),
        bits(&view.v),
    ]);
    (outcome, bytes)
}

/// Runs `ops` on the model and every cache; asserts they agree and
/// returns the model's outcomes.
fn run_all(config: &Config, ops: &[Op]) -> Vec<Outcome> {
    let mut model = Model::new(config).unwrap();
    let mut caches = caches(config);
    let mut outcomes = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let index = i as u64;
        let expected = model.apply(index, op).map_err(|e| e.kind());
        let mut first: Option<Vec<Vec<u32>>> = None;
        for (name, cache) in &mut caches {
            let (outcome, bytes) = apply(cache.as_mut(), config, index, op);
            let want = expected
                .clone()
                .map(|e: Effect| (e.global_end, e.visible.clone()));
            assert_eq!(outcome, want, "{name}: op {i} ({op})");
            let view = cache.view().unwrap();
            assert_eq!(
                view.positions,
                model.view(None),
                "{name}: view() after op {i} ({op})"
            );
            match &first {
                None => first = Some(bytes),
                Some(first) => assert!(first == &bytes, "{name}: op {i} ({op}): other view bytes"),
            }
        }
        outcomes.push(expected.into());
    }
    outcomes
}

fn w(start: i64, len: i64) -> Op {
    Op::Write(Write::new(start, len))
}

/// docs/contract.md §3 evict and pin, §5: `pin n` pins the first `min(S, n)`
/// of the last `n` positions; under the pin the displaced sink `[GS, S)`
/// is evictable, smallest first; clearing the pin protects it again.
#[test]
fn evict_under_a_pin_on_every_dense_cache() {
    let config = Config {
        sink: 3,
        global_sink: 1,
        heads: 2,
        head_dim: 2,
        ..Config::dense(10)
    };
    let ops = [
        w(0, 8),
        Op::Pin { tokens: 4 },   // [4, 7): 3 of the last 4
        Op::Evict { tokens: 2 }, // 1 and 2, the displaced sink
        w(8, 1),
        Op::Evict { tokens: 2 }, // 3 and 7
        Op::Evict { tokens: 2 }, // only 8 is left: too many
        Op::Pin { tokens: 0 },
        Op::Evict { tokens: 1 }, // 4: [0, S) is protected again, 1 and 2 are gone
        w(9, 1),
    ];
    let outcomes = run_all(&config, &ops);
    assert_eq!(outcomes[5].error_kind(), Some(ErrorKind::EvictTooMany));
    let Outcome::Ok(last) = &outcomes[8] else {
        panic!("{outcomes:?}")
    };
    assert_eq!(last.visible.as_deref(), Some(&[0, 5, 6, 8, 9][..]));
}

/// docs/contract.md §3 write: a probe (`len` 0) that names a head range
/// writes nothing and answers the view, on every cache; a cache that
/// merged the untouched heads for it would have no rows to merge.
#[test]
fn a_probe_of_a_head_range_writes_nothing_on_every_cache() {
    let config = Config {
        heads: 2,
        head_dim: 2,
        ..Config::dense(6)
    };
    let probe = |start| {
        Op::Write(Write {
            heads: Some([1, 1]),
            ..Write::new(start, 0)
        })
    };
    let ops = [probe(0), w(0, 4), probe(4), w(4, 4), probe(8)];
    let outcomes = run_all(&config, &ops);
    for (i, outcome) in outcomes.iter().enumerate() {
        assert!(outcome.error_kind().is_none(), "op {i}: {outcomes:?}");
    }
}

/// docs/contract.md §3 write step 4 before step 6: on the packed caches a
/// rewrite of a chunk with an evicted position is `unsupported`; the dense
/// caches, which have no step 4, say `evicted`.
#[test]
fn rewrite_of_a_partly_evicted_chunk_on_every_cache() {
    let ops = [w(0, 3), w(3, 2), w(5, 1), w(0, 3), w(5, 1)];
    let packed = Config {
        packed: Some(PackedPolicy {
            keep_recent_chunks: 1,
            quant: Quant::Int8,
            pack_sink: false,
        }),
        head_dim: 3,
        ..Config::packed(5)
    };
    let outcomes = run_all(&packed, &ops);
    assert_eq!(outcomes[3].error_kind(), Some(ErrorKind::Unsupported));
    assert!(outcomes[4].error_kind().is_none(), "{outcomes:?}");
    let dense = Config {
        head_dim: 3,
        ..Config::dense(5)
    };
    let outcomes = run_all(&dense, &ops);
    assert_eq!(outcomes[3].error_kind(), Some(ErrorKind::Evicted));
}

/// docs/contract.md §6: after a rewind, the forgotten chunks no longer count
/// among the most recent ones, on every packed cache (the view bytes of a
/// cold row differ from the hot row's, so a cache that still counted them
/// would quantize `[2, 4)` one append early).
#[test]
fn rewound_chunks_leave_the_recent_count_on_every_packed_cache() {
    let config = Config {
        packed: Some(PackedPolicy {
            keep_recent_chunks: 1,
            quant: Quant::Int4,
            pack_sink: false,
        }),
        head_dim: 3,
        ..Config::packed(16)
    };
    let ops = [w(0, 2), w(2, 2), w(4, 2), Op::Rewind { to: 4 }, w(4, 2)];
    run_all(&config, &ops);
    let mut model = Model::new(&config).unwrap();
    for (i, op) in ops.iter().enumerate() {
        model.apply(i as u64, op).unwrap();
    }
    assert!(!model.is_cold(2) && model.is_cold(0));
    for (name, mut cache) in caches(&config) {
        for (i, op) in ops.iter().enumerate() {
            let (outcome, _) = apply(cache.as_mut(), &config, i as u64, op);
            assert!(outcome.is_ok(), "{name}: op {i} ({op})");
        }
        let hot: Vec<u64> = cache
            .internals()
            .expect("the shipped caches report their storage")
            .layout()
            .slots
            .iter()
            .filter_map(|s| match s {
                kvcache::Slot::Hot(p) => Some(*p),
                _ => None,
            })
            .collect();
        assert_eq!(hot, vec![2, 3, 4, 5], "{name}: hot positions");
    }
}

/// The example of docs/kvtrace.md ("An example"), parsed from the document
/// itself: its `expect` is the model's outcome of every op, writers
/// included, and every dense cache agrees (`dense::kvtrace_md_example_*`
/// checks the bytes against the model too).
#[test]
fn the_kvtrace_md_example_holds_on_the_model_and_every_dense_cache() {
    let (config, ops, expect) = kvtrace_md_example();
    let outcomes = run_all(&config, &ops);
    assert_eq!(ops.len(), 12);
    for (i, (got, want)) in outcomes.iter().zip(&expect).enumerate() {
        assert_eq!(got, want, "op {i} ({})", ops[i]);
    }
}

/// The first JSON block of docs/kvtrace.md: config, ops and expect.
pub fn kvtrace_md_example() -> (Config, Vec<Op>, Vec<Outcome>) {
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/kvtrace.md");
    let text = std::fs::read_to_string(&doc).expect("docs/kvtrace.md");
    let start = text.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + text[start..].find("```").expect("the block ends");
    let trace: serde_json::Value = serde_json::from_str(&text[start..end]).expect("valid JSON");
    assert_eq!(trace["format"], "kvtrace/1");
    let config = crate::vector_config::config_from_trace(&trace["config"]);
    let ops: Vec<Op> = serde_json::from_value(trace["ops"].clone()).expect("ops");
    let expect: Vec<Outcome> = serde_json::from_value(trace["expect"].clone()).expect("expect");
    assert_eq!(expect.len(), ops.len());
    (config, ops, expect)
}
