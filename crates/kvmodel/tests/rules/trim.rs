//! docs/contract.md §3 "Trim modes": `trim = "after_read"`, where a write
//! reads the old view and its whole chunk and trims to `C` only afterwards.

use kvmodel::{Config, ErrorKind, Model, Op, Trim, Write};
use proptest::prelude::*;

fn after_read(capacity: usize, sink: usize) -> Config {
    Config {
        sink,
        trim: Trim::AfterRead,
        ..Config::dense(capacity)
    }
}

fn w(start: i64, len: i64) -> Op {
    Op::Write(Write::new(start, len))
}

/// Applies `ops` and returns each outcome's visible positions (or error
/// kind) and the model afterwards.
fn run(config: &Config, ops: &[Op]) -> (Model, Vec<Result<Vec<u64>, ErrorKind>>) {
    let mut model = Model::new(config).expect("valid config");
    let outcomes = ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            model
                .apply(i as u64, op)
                .map(|e| e.visible.unwrap_or_default())
                .map_err(|e| e.kind())
        })
        .collect();
    (model, outcomes)
}

#[test]
fn after_read_is_refused_with_packed_and_with_growth_naming_trim() {
    for config in [
        Config {
            trim: Trim::AfterRead,
            ..Config::packed(4)
        },
        Config {
            growth: true,
            ..after_read(4, 1)
        },
    ] {
        let err = Model::new(&config).expect_err("invalid config");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.to_string().starts_with("invalid_config: trim "),
            "{err}"
        );
    }
    // The default mode stays valid everywhere it was.
    assert!(Model::new(&Config {
        growth: true,
        ..Config::dense(4)
    })
    .is_ok());
    assert!(Model::new(&after_read(4, 1)).is_ok());
}

#[test]
fn second_write_reads_the_old_view_and_the_whole_chunk_then_trims() {
    let ops = [w(0, 4), w(4, 2), w(6, 0)];
    let (model, outcomes) = run(&after_read(4, 1), &ops);
    assert_eq!(outcomes[0], Ok(vec![0, 1, 2, 3]));
    // Read: {0, 1, 2, 3} ∪ {4, 5}; then trim 1 and 2, the oldest evictable.
    assert_eq!(outcomes[1], Ok(vec![0, 1, 2, 3, 4, 5]));
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3, 4, 5]);
    assert_eq!(model.global_end(), 6);
    // A probe shows the trimmed state's view, as before_read would.
    assert_eq!(outcomes[2], Ok(vec![0, 3, 4, 5]));
    // The same ops trimming before the read: sink + (W − n) + n.
    let (_, before) = run(
        &Config {
            sink: 1,
            ..Config::dense(4)
        },
        &ops,
    );
    assert_eq!(before[1], Ok(vec![0, 3, 4, 5]));
}

#[test]
fn writers_are_reported_as_read_before_the_trim() {
    let mut model = Model::new(&after_read(3, 0)).unwrap();
    model.write(0, &Write::new(0, 3)).unwrap();
    let effect = model.write(1, &Write::new(3, 2)).unwrap();
    assert_eq!(effect.visible, Some(vec![0, 1, 2, 3, 4]));
    // Positions 0 and 1 were read (writer 0), then trimmed.
    assert_eq!(
        effect.writers,
        Some(vec![vec![Some(0), Some(0), Some(0), Some(1), Some(1)]])
    );
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![2, 3, 4]);
    // The rows read then trimmed keep their writers for the view's check,
    // until the next op.
    assert_eq!(model.writers(0), None);
    assert_eq!(model.read_writers(0), Some(&[Some(0)][..]));
    assert_eq!(model.read_writers(4), Some(&[Some(1)][..]));
    model.write(2, &Write::new(5, 0)).unwrap();
    assert_eq!(model.read_writers(0), None);
    // A refused op changes nothing, the trimmed rows included.
    model.write(3, &Write::new(5, 2)).unwrap();
    let before = model.clone();
    assert!(model.write(4, &Write::new(9, 1)).is_err());
    assert!(model.pin(1).is_err());
    assert_eq!(model, before);
}

#[test]
fn a_chunk_longer_than_the_room_keeps_its_last_part() {
    let ops = [w(0, 1), w(1, 6), w(1, 6), w(4, 3)];
    let (model, outcomes) = run(&after_read(4, 1), &ops);
    // The whole chunk is read, then only its last C − S positions stay.
    assert_eq!(outcomes[1], Ok((0..7).collect()));
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 4, 5, 6]);
    // Its trimmed part is gone: rewriting it is `evicted`, and only the
    // kept part can be rewritten (reading the trimmed state's view).
    assert_eq!(outcomes[2], Err(ErrorKind::Evicted));
    assert_eq!(outcomes[3], Ok(vec![0, 4, 5, 6]));
    // Trimming before the read refuses it.
    let (_, before) = run(
        &Config {
            sink: 1,
            ..Config::dense(4)
        },
        &ops,
    );
    assert_eq!(before[1], Err(ErrorKind::ChunkTooLarge));
}

#[test]
fn the_old_view_keeps_its_window_and_the_chunk_comes_on_top() {
    let config = Config {
        window: Some(4),
        ..after_read(6, 1)
    };
    let ops = [w(0, 3), w(3, 3), w(6, 2), w(2, 1)];
    let (model, outcomes) = run(&config, &ops);
    assert_eq!(outcomes[0], Ok(vec![0, 1, 2]));
    // Old view {0, 1, 2} (W = 4 has room for it) and the chunk: 6 > W.
    assert_eq!(outcomes[1], Ok(vec![0, 1, 2, 3, 4, 5]));
    // Old view: the sink and the W − 1 = 3 newest, {3, 4, 5}; trim 1, 2.
    assert_eq!(outcomes[2], Ok(vec![0, 3, 4, 5, 6, 7]));
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3, 4, 5, 6, 7]);
    // A rewrite of a position gone to the trim is `evicted`.
    assert_eq!(outcomes[3], Err(ErrorKind::Evicted));
}

#[test]
fn a_rewrite_of_a_hidden_position_shows_it_beside_the_old_view() {
    let config = Config {
        window: Some(3),
        ..after_read(6, 1)
    };
    let ops = [w(0, 5), w(1, 1)];
    let (_, outcomes) = run(&config, &ops);
    // The first chunk is read whole, wider than W.
    assert_eq!(outcomes[0], Ok(vec![0, 1, 2, 3, 4]));
    // Old view {0, 3, 4}, and the rewritten 1 (hidden by W until now).
    assert_eq!(outcomes[1], Ok(vec![0, 1, 3, 4]));
}

#[test]
fn a_recent_window_bounds_the_old_view_from_the_write_start() {
    let ops = [
        w(0, 6),
        Op::write(6, 2, None, Some(2)),
        Op::write(8, 0, None, Some(1)),
    ];
    let (model, outcomes) = run(&after_read(6, 1), &ops);
    // Old view: the sink and {q ≥ 6 − 2} = {4, 5}; then the chunk.
    assert_eq!(outcomes[1], Ok(vec![0, 4, 5, 6, 7]));
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3, 4, 5, 6, 7]);
    // A probe with r = 1: the sink and {q ≥ 7}.
    assert_eq!(outcomes[2], Ok(vec![0, 7]));
}

#[test]
fn a_pin_is_never_trimmed() {
    let config = Config {
        global_sink: 1,
        ..after_read(5, 2)
    };
    let ops = [w(0, 5), Op::Pin { tokens: 2 }, w(5, 3)];
    let (model, outcomes) = run(&config, &ops);
    // Pin [3, 5): protected are 0 and the pin; 1 and 2 are evictable.
    assert_eq!(outcomes[2], Ok((0..8).collect()));
    assert_eq!(model.resident().collect::<Vec<_>>(), vec![0, 3, 4, 6, 7]);
    assert_eq!(model.pin_range(), Some(3..5));
}

#[test]
fn refused_writes_leave_the_state_unchanged() {
    let mut model = Model::new(&after_read(4, 1)).unwrap();
    model.write(0, &Write::new(0, 4)).unwrap();
    model.write(1, &Write::new(4, 3)).unwrap();
    let before = model.clone();
    for (i, request) in [
        Write::new(9, 1),  // non_sequential
        Write::new(1, 2),  // evicted
        Write::new(-1, 2), // invalid_argument
        Write {
            recent_window: Some(-1),
            ..Write::new(7, 1)
        }, // negative_window
    ]
    .iter()
    .enumerate()
    {
        assert!(model.write(2 + i as u64, request).is_err());
        assert_eq!(model, before);
    }
}

/// Arbitrary op sequences on small after_read configs.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0i64..12, 0i64..7, proptest::option::of(0i64..4))
            .prop_map(|(s, n, r)| Op::write(s, n, None, r)),
        1 => (0i64..12).prop_map(|to| Op::Rewind { to }),
        1 => (0i64..4).prop_map(|tokens| Op::Evict { tokens }),
        1 => (0i64..4).prop_map(|tokens| Op::Pin { tokens }),
        1 => Just(Op::Reset),
    ];
    proptest::collection::vec(op, 1..30)
}

proptest! {
    /// Under after_read the whole chunk is always read (never
    /// `window_too_small`), the chunk never fails for room
    /// (`chunk_too_large` needs the protected positions alone to exceed
    /// C, which S < C rules out), every view holds the old view and the
    /// chunk, and `|R| ≤ C` after every op.
    #[test]
    fn after_read_reads_the_chunk_and_keeps_the_capacity(
        capacity in 1usize..7,
        sink in 0usize..4,
        global_sink in 0usize..4,
        window in proptest::option::of(1usize..7),
        ops in ops(),
    ) {
        let sink = sink.min(capacity - 1);
        let window = window.filter(|&w| w > sink && w <= capacity);
        let config = Config {
            window,
            global_sink: global_sink.min(sink),
            ..after_read(capacity, sink)
        };
        let mut model = Model::new(&config).unwrap();
        for (i, op) in ops.iter().enumerate() {
            let before = model.clone();
            let result = model.apply(i as u64, op);
            match (&result, op) {
                (Err(e), _) => {
                    prop_assert!(
                        !matches!(e.kind(), ErrorKind::WindowTooSmall | ErrorKind::ChunkTooLarge),
                        "{op}: {e}"
                    );
                    prop_assert_eq!(&model, &before);
                }
                (Ok(effect), Op::Write(w)) => {
                    let s = w.start as u64;
                    let old = before.view(w.recent_window.map(|r| (s, r as u64)));
                    let mut want: Vec<u64> = old.into_iter().chain(s..s + w.len as u64).collect();
                    want.sort_unstable();
                    want.dedup();
                    prop_assert_eq!(effect.visible.clone(), Some(want));
                }
                _ => {}
            }
            prop_assert!(model.resident_len() <= model.capacity());
        }
    }
}
