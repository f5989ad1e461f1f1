//! One test per rule of docs/contract.md §1–§6, including every error kind and the
//! check order when several apply.

use kvmodel::{Config, ErrorKind, Model, Op, PackedPolicy, Quant, Write};

fn dense(capacity: usize, sink: usize) -> Config {
    Config {
        sink,
        ..Config::dense(capacity)
    }
}

fn run(config: &Config, ops: &[Op]) -> (Model, Vec<Result<kvmodel::Effect, ErrorKind>>) {
    let mut model = Model::new(config).expect("valid config");
    let outcomes = ops
        .iter()
        .enumerate()
        .map(|(i, op)| model.apply(i as u64, op).map_err(|e| e.kind()))
        .collect();
    (model, outcomes)
}

fn w(start: i64, len: i64) -> Op {
    Op::Write(Write::new(start, len))
}

fn last_err(config: &Config, ops: &[Op]) -> ErrorKind {
    let (_, outcomes) = run(config, ops);
    outcomes
        .last()
        .unwrap()
        .clone()
        .expect_err("the last op must fail")
}

fn visible(config: &Config, ops: &[Op]) -> Vec<u64> {
    let (_, outcomes) = run(config, ops);
    outcomes.last().unwrap().clone().unwrap().visible.unwrap()
}

#[test]
fn config_rules_name_the_field() {
    let cases: Vec<(Config, &str)> = vec![
        (Config::dense(0), "capacity"),
        (
            Config {
                batch: 0,
                ..Config::dense(4)
            },
            "batch",
        ),
        (
            Config {
                heads: 0,
                ..Config::dense(4)
            },
            "heads",
        ),
        (
            Config {
                head_dim: 0,
                ..Config::dense(4)
            },
            "head_dim",
        ),
        (dense(4, 4), "sink"),
        (
            Config {
                window: Some(2),
                ..dense(4, 2)
            },
            "window",
        ),
        (
            Config {
                window: Some(5),
                ..dense(4, 2)
            },
            "window",
        ),
        (
            Config {
                global_sink: 3,
                ..dense(4, 2)
            },
            "global_sink",
        ),
        (
            Config {
                packed: Some(PackedPolicy::default()),
                ..dense(4, 0)
            },
            "packed",
        ),
        (
            Config {
                growth: true,
                ..Config::packed(4)
            },
            "growth",
        ),
        (
            Config {
                head_dim: 1 << 20,
                heads: 1 << 10,
                ..Config::dense(4)
            },
            "capacity",
        ),
    ];
    for (config, field) in cases {
        let err = Model::new(&config).expect_err("invalid config");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("invalid_config: {field} ")),
            "{text}"
        );
    }
    assert!(Model::new(&Config {
        window: Some(4),
        ..dense(4, 3)
    })
    .is_ok());
}

#[test]
fn write_check_order() {
    let c = Config {
        heads: 2,
        ..dense(4, 1)
    };
    // 1 before 2: negative start and negative window.
    let op = Op::Write(Write {
        start: -1,
        len: 1,
        heads: None,
        recent_window: Some(-1),
    });
    assert_eq!(last_err(&c, &[op]), ErrorKind::InvalidArgument);
    // 2 before 3.
    let op = Op::Write(Write {
        start: 0,
        len: 1,
        heads: Some([5, 1]),
        recent_window: Some(-1),
    });
    assert_eq!(last_err(&c, &[op]), ErrorKind::NegativeWindow);
    // 3 before 5: bad heads and a gap.
    let op = Op::Write(Write {
        start: 9,
        len: 1,
        heads: Some([1, 2]),
        recent_window: None,
    });
    assert_eq!(last_err(&c, &[op]), ErrorKind::HeadRange);
    // 5 before 7: a gap that would also be too large.
    assert_eq!(last_err(&c, &[w(1, 100)]), ErrorKind::NonSequential);
    // 6 before 7: evicted rewrite that would also overflow.
    let ops = [w(0, 4), w(4, 2), w(1, 100)];
    assert_eq!(last_err(&c, &ops), ErrorKind::Evicted);
}

#[test]
fn head_range_bounds() {
    let c = Config {
        heads: 3,
        ..dense(4, 0)
    };
    for heads in [[-1, 1], [0, 0], [2, 2], [3, 1], [0, 4], [1, i64::MAX]] {
        let op = Op::Write(Write {
            start: 0,
            len: 1,
            heads: Some(heads),
            recent_window: None,
        });
        assert_eq!(last_err(&c, &[op]), ErrorKind::HeadRange, "{heads:?}");
    }
    let op = Op::Write(Write {
        start: 0,
        len: 1,
        heads: Some([1, 2]),
        recent_window: None,
    });
    let (model, outcomes) = run(&c, &[op]);
    assert_eq!(
        outcomes[0].clone().unwrap().writers.unwrap(),
        vec![vec![Some(0)], vec![Some(0)]]
    );
    assert_eq!(model.writers(0).unwrap(), &[None, Some(0), Some(0)]);
}

#[test]
fn eviction_keeps_sink_and_takes_oldest() {
    let c = dense(6, 2);
    assert_eq!(
        visible(&c, &[w(0, 4), w(4, 2), w(6, 2)]),
        vec![0, 1, 4, 5, 6, 7]
    );
}

#[test]
fn chunk_too_large_beside_protected_and_unchanged() {
    let c = dense(6, 2);
    let (model, outcomes) = run(&c, &[w(0, 3), w(3, 5)]);
    assert_eq!(outcomes[1], Err(ErrorKind::ChunkTooLarge));
    assert_eq!(model.global_end(), 3);
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 1, 2]);
    // Huge lengths are refused arithmetically, not by allocating.
    assert_eq!(last_err(&c, &[w(0, i64::MAX)]), ErrorKind::ChunkTooLarge);
}

#[test]
fn window_too_small_and_recent_windows() {
    let c = Config {
        window: Some(4),
        ..dense(8, 2)
    };
    assert_eq!(last_err(&c, &[w(0, 2), w(2, 3)]), ErrorKind::WindowTooSmall);
    // A recent window lets the same chunk see itself.
    let op = Op::Write(Write {
        start: 2,
        len: 3,
        heads: None,
        recent_window: Some(0),
    });
    assert_eq!(visible(&c, &[w(0, 2), op]), vec![0, 1, 2, 3, 4]);
    // r reaching below 0 shows everything resident.
    let op = Op::Write(Write {
        start: 2,
        len: 1,
        heads: None,
        recent_window: Some(1000),
    });
    assert_eq!(visible(&c, &[w(0, 2), op]), vec![0, 1, 2]);
}

#[test]
fn zero_length_write_is_a_read_only_probe() {
    let c = dense(4, 1);
    let (model, outcomes) = run(&c, &[w(0, 3), w(3, 0), w(0, 0)]);
    assert_eq!(outcomes[1].clone().unwrap().visible.unwrap(), vec![0, 1, 2]);
    assert_eq!(outcomes[2].clone().unwrap().global_end, 3);
    assert_eq!(model.writers(0).unwrap(), &[Some(0)]);
    assert_eq!(last_err(&c, &[w(0, 3), w(4, 0)]), ErrorKind::NonSequential);
}

#[test]
fn growth_doubles_caps_and_window_follows_only_when_equal() {
    let c = Config {
        growth: true,
        ..dense(2, 1)
    };
    let (model, _) = run(&c, &[w(0, 3)]);
    assert_eq!(model.capacity(), 4);
    assert_eq!(model.window(), 4);
    let (model, _) = run(&c, &[w(0, 9)]);
    assert_eq!(model.capacity(), 9);
    let fixed = Config {
        window: Some(2),
        growth: true,
        ..dense(3, 1)
    };
    let (model, _) = run(&fixed, &[w(0, 1), w(1, 1), w(2, 1), w(3, 1)]);
    assert_eq!((model.capacity(), model.window()), (6, 2));
    // Growth is capped by the size rule: beyond it the chunk is too large.
    let big = Config {
        growth: true,
        head_dim: 1 << 29,
        ..dense(2, 0)
    };
    let (model, outcomes) = run(&big, &[w(0, 3), w(3, 2)]);
    assert_eq!(model.capacity(), 4);
    assert_eq!(outcomes[1], Err(ErrorKind::ChunkTooLarge));
}

#[test]
fn rewind_rules() {
    let c = dense(4, 1);
    assert_eq!(
        last_err(&c, &[Op::Rewind { to: -1 }]),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        last_err(&c, &[w(0, 2), Op::Rewind { to: 3 }]),
        ErrorKind::RewindAhead
    );
    let (model, _) = run(&c, &[w(0, 3), w(3, 3), Op::Rewind { to: 4 }]);
    assert_eq!(model.global_end(), 4);
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3]);
}

#[test]
fn evict_rules() {
    let c = dense(6, 2);
    assert_eq!(
        last_err(&c, &[Op::Evict { tokens: -1 }]),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        last_err(&c, &[w(0, 4), Op::Evict { tokens: 3 }]),
        ErrorKind::EvictTooMany
    );
    let (model, _) = run(&c, &[w(0, 4), Op::Evict { tokens: 1 }]);
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 1, 3]);
    assert_eq!(model.global_end(), 4);
}

#[test]
fn pin_rules() {
    let c = Config {
        global_sink: 1,
        ..dense(6, 2)
    };
    assert_eq!(
        last_err(&c, &[Op::Pin { tokens: -1 }]),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        last_err(&dense(4, 0), &[w(0, 2), Op::Pin { tokens: 1 }]),
        ErrorKind::PinRange
    );
    assert_eq!(
        last_err(&c, &[w(0, 2), Op::Pin { tokens: 3 }]),
        ErrorKind::PinRange
    );
    // The pin is the first min(S, n) of the last n written positions.
    let (model, _) = run(&c, &[w(0, 3), w(3, 3), Op::Pin { tokens: 3 }]);
    assert_eq!(model.pin_range(), Some(3..5));
    assert_eq!(model.protected(), vec![0, 3, 4]);
    // A pinned range with an evicted position is refused.
    let (_, outcomes) = run(&c, &[w(0, 4), w(4, 4), Op::Pin { tokens: 6 }]);
    assert_eq!(outcomes[2], Err(ErrorKind::PinRange));
    // pin 0 clears; a rewind below the pin clears it.
    let (model, _) = run(
        &c,
        &[
            w(0, 3),
            w(3, 3),
            Op::Pin { tokens: 3 },
            Op::Pin { tokens: 0 },
        ],
    );
    assert_eq!(model.pin_range(), None);
    let (model, _) = run(
        &c,
        &[
            w(0, 3),
            w(3, 3),
            Op::Pin { tokens: 3 },
            Op::Rewind { to: 4 },
        ],
    );
    assert_eq!(model.pin_range(), None);
}

#[test]
fn reset_keeps_grown_capacity() {
    let c = Config {
        growth: true,
        ..dense(2, 1)
    };
    let (model, outcomes) = run(&c, &[w(0, 3), Op::Reset]);
    assert_eq!(outcomes[1].clone().unwrap().global_end, 0);
    assert_eq!(model.capacity(), 4);
    assert_eq!(model.resident_len(), 0);
}

fn packed(capacity: usize, sink: usize, keep: usize, quant: Quant) -> Config {
    Config {
        sink,
        packed: Some(PackedPolicy {
            keep_recent_chunks: keep,
            quant,
            pack_sink: false,
        }),
        ..Config::packed(capacity)
    }
}

#[test]
fn packed_supports_only_appends_current_rewrites_and_boundary_rewinds() {
    let c = packed(8, 2, 1, Quant::Int8);
    for op in [
        w(0, 0),
        w(2, 1),
        w(1, 1),
        Op::Evict { tokens: 0 },
        Op::Pin { tokens: 0 },
        Op::Rewind { to: 1 },
    ] {
        assert_eq!(
            last_err(&c, &[w(0, 2), w(2, 2), op]),
            ErrorKind::Unsupported,
            "{op}"
        );
    }
    // Negative arguments are still invalid_argument first.
    assert_eq!(
        last_err(&c, &[Op::Evict { tokens: -1 }]),
        ErrorKind::InvalidArgument
    );
    // Rewind to a chunk start, then the current chunk is gone.
    let (_, outcomes) = run(&c, &[w(0, 2), w(2, 2), Op::Rewind { to: 2 }, w(0, 2)]);
    assert!(outcomes[2].is_ok());
    assert_eq!(outcomes[3], Err(ErrorKind::Unsupported));
}

#[test]
fn packed_chunks_go_cold_permanently() {
    let c = packed(16, 2, 1, Quant::Int4);
    let (model, _) = run(&c, &[w(0, 2), w(2, 2), w(4, 2), w(6, 2)]);
    let cold: Vec<bool> = model.chunks().iter().map(|c| c.cold).collect();
    // The sink chunk stays hot (pack_sink off); [2,4) is beyond keep_recent_chunks = 1.
    assert_eq!(cold, vec![false, true, false, false]);
    assert!(model.is_cold(2) && model.is_cold(3));
    assert!(!model.is_cold(4) && !model.is_cold(0));
    // Rewind does not warm a cold chunk.
    let (model, _) = run(
        &c,
        &[w(0, 2), w(2, 2), w(4, 2), w(6, 2), Op::Rewind { to: 4 }],
    );
    assert!(model.is_cold(2));
}

#[test]
fn packed_resident_bytes_formula() {
    let mut c = packed(16, 0, 0, Quant::Int4);
    c.head_dim = 5;
    c.heads = 2;
    c.dtype = kvmodel::Dtype::Bf16;
    let (model, _) = run(&c, &[w(0, 2), w(2, 3)]);
    // Chunk [0,2) is cold (keep 0): 2 positions · 2 heads · (ceil(5/2)+4); hot [2,5): 3 · 2 · 5·2. K and V.
    assert_eq!(model.resident_bytes(), 2 * (2 * 2 * 7 + 3 * 2 * 10));
    let dense_model = Model::new(&Config {
        heads: 2,
        head_dim: 5,
        ..Config::dense(16)
    })
    .unwrap();
    assert_eq!(dense_model.resident_bytes(), 2 * 16 * 2 * 5 * 4);
}

/// docs/contract.md §3 evict and §5: while a pin exists, the sink positions
/// `[GS, S)` it displaced are evictable, and `evict n` takes the `n`
/// smallest evictable positions; `pin n` pins only the first `min(S, n)`
/// of the last `n` positions written.
#[test]
fn evict_under_a_pin_takes_the_displaced_sink_first() {
    let c = Config {
        global_sink: 1,
        ..dense(10, 3)
    };
    // pin 4 of G = 8: the first min(3, 4) = 3 of [4, 8), that is [4, 7).
    let (model, outcomes) = run(&c, &[w(0, 8), Op::Pin { tokens: 4 }]);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(model.pin_range(), Some(4..7));
    assert_eq!(model.protected(), vec![0, 4, 5, 6]);
    // Evictable: the displaced sink [GS, S) = [1, 3), then 3 and 7.
    assert_eq!(model.evictable(), vec![1, 2, 3, 7]);
    let (model, _) = run(
        &c,
        &[w(0, 8), Op::Pin { tokens: 4 }, Op::Evict { tokens: 2 }],
    );
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3, 4, 5, 6, 7]);
    // Everything evictable goes; one more is too many.
    let (model, _) = run(
        &c,
        &[w(0, 8), Op::Pin { tokens: 4 }, Op::Evict { tokens: 4 }],
    );
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 4, 5, 6]);
    assert_eq!(
        last_err(
            &c,
            &[w(0, 8), Op::Pin { tokens: 4 }, Op::Evict { tokens: 5 }]
        ),
        ErrorKind::EvictTooMany
    );
    // Without the pin, the same eviction keeps the whole sink [0, 3).
    let (model, _) = run(&c, &[w(0, 8), Op::Evict { tokens: 2 }]);
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 1, 2, 5, 6, 7]);
    // A pin shorter than S pins all of its n positions.
    let (model, _) = run(&c, &[w(0, 8), Op::Pin { tokens: 2 }]);
    assert_eq!(model.pin_range(), Some(6..8));
    // Clearing the pin protects what is left of [0, S) again.
    let (model, _) = run(
        &c,
        &[
            w(0, 8),
            Op::Pin { tokens: 4 },
            Op::Evict { tokens: 1 },
            Op::Pin { tokens: 0 },
        ],
    );
    assert_eq!(model.protected(), vec![0, 2]);
}

/// docs/contract.md §6: a chunk removed by a rewind no longer counts among
/// the `keep_recent_chunks` most recent chunks.
#[test]
fn packed_rewound_chunks_leave_the_recent_count() {
    let c = packed(16, 0, 1, Quant::Int8);
    // [0,2) [2,4) [4,6): [0,2) is cold, [2,4) the one recent completed chunk.
    let base = [w(0, 2), w(2, 2), w(4, 2)];
    let (model, _) = run(&c, &base);
    assert!(model.is_cold(0) && !model.is_cold(2));
    // Rewind to 4 forgets [4,6); the append at 4 is then the third chunk,
    // and [2,4) is still the most recent completed one: hot.
    let mut ops = base.to_vec();
    ops.extend([Op::Rewind { to: 4 }, w(4, 2)]);
    let (model, outcomes) = run(&c, &ops);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(model.chunks().len(), 3);
    assert!(!model.is_cold(2) && !model.is_cold(3));
    // (Were the rewound chunk still counted, [2,4) would be cold here.)
    // One more append leaves [2,4) behind two more recent chunks.
    ops.push(w(6, 2));
    let (model, _) = run(&c, &ops);
    assert!(model.is_cold(2) && !model.is_cold(4));
}

/// docs/contract.md §3 write step 4 before step 6: on the packed variant a
/// rewrite of a chunk with an evicted position is `unsupported`, where the
/// dense variant says `evicted`.
#[test]
fn packed_rewrite_of_a_partly_evicted_chunk_is_unsupported() {
    // C = 5: [0,3) then [3,5); the append [5,6) evicts position 0.
    let ops = [w(0, 3), w(3, 2), w(5, 1), w(0, 3)];
    let c = packed(5, 0, 1, Quant::None);
    let (model, outcomes) = run(&c, &ops);
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert_eq!(outcomes[3], Err(ErrorKind::Unsupported));
    // Fully evicted: unsupported too.
    assert_eq!(
        last_err(&packed(3, 0, 1, Quant::None), &[w(0, 3), w(3, 3), w(0, 3)]),
        ErrorKind::Unsupported
    );
    // The same trace on the dense variant reaches step 6.
    assert_eq!(last_err(&dense(5, 0), &ops), ErrorKind::Evicted);
}

#[path = "rules/trim.rs"]
mod trim;
