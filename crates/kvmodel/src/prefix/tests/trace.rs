//! The prefix-cache trace family (docs/kvtrace.md "Prefix caches"): its
//! documented example, its serde forms, and its refusals.

use super::*;
use crate::prefix::trace::FORMAT;

const KVTRACE_MD: &str = include_str!("../../../../../docs/kvtrace.md");

/// The first ```json block after the "## Prefix caches" heading.
fn documented_example() -> &'static str {
    let section = KVTRACE_MD
        .split_once("\n## Prefix caches\n")
        .expect("docs/kvtrace.md has a Prefix caches section")
        .1;
    let block = section
        .split_once("```json\n")
        .expect("the section has a JSON example")
        .1;
    block.split_once("\n```").expect("the block is closed").0
}

fn parse(text: &str) -> Result<PrefixTrace, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[test]
fn the_documented_example_replays_on_the_model_and_round_trips() {
    let trace = parse(documented_example()).unwrap();
    assert_eq!(trace.check_on_model(), Ok(()));
    assert_eq!(trace.ops.len(), 25);
    let names: std::collections::BTreeSet<&str> = trace.ops.iter().map(PrefixOp::name).collect();
    assert_eq!(names.len(), 11, "every op of the family: {names:?}");
    let value: serde_json::Value = serde_json::from_str(documented_example()).unwrap();
    assert_eq!(serde_json::to_value(&trace).unwrap(), value);
    let back = parse(&serde_json::to_string_pretty(&trace).unwrap()).unwrap();
    assert_eq!(back, trace);
}

#[test]
fn a_config_is_written_in_full_with_the_variant_first() {
    let text = serde_json::to_string(&PrefixConfig::new(4, 2)).unwrap();
    assert_eq!(
        text,
        r#"{"variant":"prefix","blocks":4,"block_size":2,"layers":1,"row_width":1,"hit":"leave_one","seed":0}"#
    );
    let minimal = r#"{"format": "kvtrace/1", "config": {"variant": "prefix", "blocks": 3}, "ops": ["clear"]}"#;
    let trace = parse(minimal).unwrap();
    assert_eq!(trace.config, PrefixConfig::new(3, 1));
    assert_eq!(trace.ops, [PrefixOp::Clear]);
}

#[test]
fn a_reader_of_the_streaming_family_refuses_the_prefix_variant() {
    // The streaming config's `variant` is kvmodel::Variant: "prefix" is
    // refused at the first field of the config, by name.
    let error = serde_json::from_str::<crate::Variant>(r#""prefix""#).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unknown variant `prefix`, expected `dense` or `packed`"),
        "{error}"
    );
    // And the prefix family refuses a streaming config.
    let dense =
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": []}"#;
    assert!(parse(dense)
        .unwrap_err()
        .contains("unknown variant `dense`"));
}

#[test]
fn a_config_that_breaks_a_rule_is_refused_naming_the_field() {
    for (config, message) in [
        (
            r#"{"variant": "prefix", "blocks": 0}"#,
            "invalid_config: blocks must be at least 1, got 0",
        ),
        (
            r#"{"variant": "prefix", "blocks": 2, "block_size": -1}"#,
            "invalid_config: block_size must be at least 1, got -1",
        ),
        (
            r#"{"variant": "prefix", "blocks": 2, "row_width": 0}"#,
            "invalid_config: row_width must be at least 1, got 0",
        ),
        (
            r#"{"variant": "prefix", "blocks": 65536, "block_size": 65536}"#,
            "invalid_config: blocks blocks 65536 x block_size 65536",
        ),
        (
            r#"{"variant": "prefix", "blocks": 2, "capacity": 4}"#,
            "unknown field `capacity`",
        ),
        (
            r#"{"variant": "prefix", "blocks": 2, "hit": "all"}"#,
            "unknown variant `all`",
        ),
    ] {
        let text = format!(r#"{{"format": "kvtrace/1", "config": {config}, "ops": []}}"#);
        let error = parse(&text).unwrap_err();
        assert!(error.contains(message), "{config}: {error}");
    }
}

#[test]
fn malformed_ops_are_refused_by_the_reader() {
    for (op, message) in [
        (
            r#"{"start": {"request": -1, "tokens": [1]}}"#,
            "invalid value",
        ),
        (
            r#"{"start": {"request": 0, "tokens": [1.5]}}"#,
            "invalid type",
        ),
        (
            r#"{"compute": {"request": 0, "n": 1}}"#,
            "unknown field `n`",
        ),
        (
            r#"{"write": {"start": 0, "len": 1}}"#,
            "unknown variant `write`",
        ),
        (r#""reset""#, "unknown variant `reset`"),
    ] {
        let text = format!(
            r#"{{"format": "kvtrace/1", "config": {{"variant": "prefix", "blocks": 2}}, "ops": [{op}]}}"#
        );
        let error = parse(&text).unwrap_err();
        assert!(error.contains(message), "{op}: {error}");
    }
    let oracle = r#"{"format": "kvtrace/1", "oracle": {"version": 1, "kind": "self"}, "config": {"variant": "prefix", "blocks": 2}, "ops": []}"#;
    assert!(parse(oracle)
        .unwrap_err()
        .contains("unknown field `oracle`"));
}

#[test]
fn validate_checks_the_format_and_the_length_of_expect() {
    let mut trace = PrefixTrace::new(PrefixConfig::new(2, 1), vec![PrefixOp::Clear]);
    assert_eq!(trace.validate(), Ok(()));
    trace.format = "kvtrace/2".to_string();
    assert_eq!(
        trace.validate().unwrap_err().to_string(),
        "format is \"kvtrace/2\", expected \"kvtrace/1\""
    );
    trace.format = FORMAT.to_string();
    trace.expect = Some(vec![]);
    assert_eq!(
        trace.validate().unwrap_err().to_string(),
        "expect has 0 outcomes but there are 1 ops"
    );
    trace.config.blocks = 0;
    assert!(matches!(trace.validate(), Err(PrefixTraceError::Config(_))));
}

#[test]
fn check_on_model_names_the_first_step_that_differs() {
    let ops = vec![start(0, &[1, 2]), compute(0, 9)];
    let mut trace = PrefixTrace::new(PrefixConfig::new(2, 1), ops)
        .with_model_outcomes()
        .unwrap();
    trace.expect.as_mut().unwrap()[1] = PrefixOutcome::Err(PrefixErrorKind::NoRoom);
    assert_eq!(
        trace.check_on_model().unwrap_err().to_string(),
        "step 1 (compute r0 9): expected err no_room, the model says err compute_past_end"
    );
}

#[test]
fn outcomes_serialize_as_documented() {
    let ok = PrefixOutcome::Ok(PrefixEffect {
        hit: Some(4),
        ..PrefixEffect::counts(BlockCounts {
            in_use: 3,
            cached: 1,
            free: 0,
        })
    });
    assert_eq!(
        serde_json::to_string(&ok).unwrap(),
        r#"{"ok":{"hit":4,"in_use":3,"cached":1,"free":0}}"#
    );
    let err = PrefixOutcome::Err(PrefixErrorKind::NoRoom);
    assert_eq!(serde_json::to_string(&err).unwrap(), r#"{"err":"no_room"}"#);
    for kind in PrefixErrorKind::OP_KINDS {
        let text = serde_json::to_string(&kind).unwrap();
        assert_eq!(text, format!("\"{}\"", kind.name()));
        assert!(KVTRACE_MD.contains(&text), "docs/kvtrace.md lists {text}");
    }
}
