//! Sliding windows (docs/contract.md §19): the config's rules and its
//! trace form, where a window starts, and the rows a windowed read returns
//! and `check_rows` judges.

use super::*;

fn windowed(size: usize, layers: Vec<usize>) -> PrefixConfig {
    PrefixConfig {
        layers: 2,
        row_width: 2,
        window: Some(Window { size, layers }),
        ..PrefixConfig::new(8, 2)
    }
}

fn invalid_window(config: &PrefixConfig) -> String {
    let error = PrefixModel::new(config).unwrap_err();
    assert!(
        matches!(
            &error,
            PrefixError::InvalidConfig {
                field: "window",
                ..
            }
        ),
        "{error}"
    );
    error.to_string()
}

#[test]
fn a_window_that_breaks_a_rule_is_invalid_config_naming_the_window() {
    assert!(invalid_window(&windowed(0, vec![0])).contains("size must be at least 1"));
    assert!(invalid_window(&windowed(2, vec![])).contains("at least one layer"));
    assert!(invalid_window(&windowed(2, vec![1, 0])).contains("distinct and sorted"));
    assert!(invalid_window(&windowed(2, vec![2])).contains("layer 2 is not below layers = 2"));
    assert!(PrefixModel::new(&windowed(1, vec![0, 1])).is_ok());
}

#[test]
fn the_trace_form_fills_in_every_layer_and_names_a_bad_value() {
    let parse = |json: &str| serde_json::from_str::<PrefixConfig>(json);
    let config =
        parse(r#"{"variant":"prefix","blocks":4,"layers":3,"window":{"size":2}}"#).unwrap();
    assert_eq!(config.window, Some(Window::all_layers(2, 3)));
    let text = serde_json::to_string(&config).unwrap();
    assert!(
        text.contains(r#""window":{"size":2,"layers":[0,1,2]}"#),
        "{text}"
    );
    assert_eq!(parse(&text).unwrap(), config);
    // Without a window the form is the one traces had before windows.
    let plain = serde_json::to_string(&PrefixConfig::new(4, 2)).unwrap();
    assert!(!plain.contains("window"), "{plain}");
    for (json, says) in [
        (r#"{"size":-1}"#, "size must be at least 1, got -1"),
        (r#"{"size":2,"layers":[]}"#, "at least one layer"),
        (r#"{"size":2,"layers":[-1]}"#, "layer -1 is negative"),
        (r#"{"size":2,"layers":[0,0]}"#, "distinct"),
        (
            r#"{"size":2,"layers":[1]}"#,
            "layer 1 is not below layers = 1",
        ),
        (r#"{"size":2,"width":3}"#, "unknown field"),
    ] {
        let error = parse(&format!(
            r#"{{"variant":"prefix","blocks":4,"window":{json}}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(error.contains(says), "{json}: {error}");
    }
}

#[test]
fn the_window_starts_w_minus_one_keys_before_the_next_query() {
    let config = windowed(3, vec![1]);
    // The query at position 5 attends keys [3, 5]: 3 and 4 are cached.
    assert_eq!(config.window_start(5), 3);
    assert_eq!(config.window_start(2), 0);
    assert_eq!(config.window_start(0), 0);
    assert_eq!(windowed(1, vec![1]).window_start(4), 4);
    assert_eq!(PrefixConfig::new(8, 2).window_start(5), 0);
    assert_eq!(config.read_range(0, 5, 3), 0..5);
    assert_eq!(config.read_range(1, 5, 3), 3..5);
}

#[test]
fn a_read_returns_a_windowed_layer_from_the_window_start_only() {
    let config = windowed(2, vec![1]);
    let mut model = PrefixModel::new(&config).unwrap();
    let ops = [
        PrefixOp::Start {
            request: 0,
            tokens: vec![1, 2, 3, 4, 5],
        },
        PrefixOp::Compute {
            request: 0,
            count: 5,
        },
    ];
    for (i, op) in ops.iter().enumerate() {
        model.apply(i as u64, op).unwrap();
    }
    assert_eq!(model.window_start(0), Some(4));
    let all = payload_rows(&config, &[1, 2, 3, 4, 5]);
    let rows = model.expected_rows(0).unwrap();
    // Layer 0 (full): 5 rows; layer 1 (windowed): position 4 only.
    assert_eq!(rows.len(), (5 + 1) * 2);
    assert_eq!(rows[..10], all[..10]);
    assert_eq!(rows[10..], all[(5 + 4) * 2..]);
    assert_eq!(check_rows(&config, &[1, 2, 3, 4, 5], 4, &rows), Ok(()));
    // A rollback of two drafts: the next query, at position 3, attends
    // keys [2, 3] again, so the window moves back with it.
    model
        .apply(
            2,
            &PrefixOp::Rollback {
                request: 0,
                count: 2,
            },
        )
        .unwrap();
    assert_eq!(model.window_start(0), Some(2));
    assert_eq!(model.expected_rows(0).unwrap().len(), (3 + 1) * 2);
    // A fork shares it; a resume starts it from its hit.
    model
        .apply(
            3,
            &PrefixOp::Fork {
                request: 0,
                into: 1,
            },
        )
        .unwrap();
    assert_eq!(model.window_start(1), Some(2));
    model.apply(4, &PrefixOp::Preempt { request: 1 }).unwrap();
    assert_eq!(model.window_start(1), None);
    model.apply(5, &PrefixOp::Resume { request: 1 }).unwrap();
    assert_eq!(model.window_start(1), Some(1));
}

#[test]
fn check_rows_judges_the_window_it_was_given() {
    let config = windowed(2, vec![0, 1]);
    let tokens = [7, 8, 9];
    let all = payload_rows(&config, &tokens);
    let rows = config.window_rows(&all, 3, 2);
    assert_eq!(rows.len(), 2 * 2);
    assert_eq!(check_rows(&config, &tokens, 2, &rows), Ok(()));
    // Every row, where only the window's is read: a shape that names it.
    let error = check_rows(&config, &tokens, 2, &all).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the 2 windowed layers from position 2"),
        "{error}"
    );
    // A row of the window holding the position before it.
    let mut stale = rows.clone();
    stale[..2].copy_from_slice(&all[2..4]);
    match check_rows(&config, &tokens, 2, &stale).unwrap_err() {
        PayloadError::WrongRow { at, holds, .. } => {
            assert_eq!(
                at,
                RowAt {
                    layer: 0,
                    position: 2
                }
            );
            assert_eq!(
                holds,
                Some(RowAt {
                    layer: 0,
                    position: 1
                })
            );
        }
        other => panic!("{other}"),
    }
}
