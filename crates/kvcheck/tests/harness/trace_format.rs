//! kvtrace/1 loading: malformed documents are refused with messages that
//! name the problem; valid ones round-trip; `expect` output is exactly
//! docs/kvtrace.md's outcome format.

use kvcheck::check::trace::{Trace, TraceError};
use kvcheck::subject::SubjectSpec;

fn err(text: &str) -> String {
    Trace::from_json(text)
        .expect_err("must be refused")
        .to_string()
}

const OK: &str = r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4, "sink": 1}, "ops": [{"write": {"start": 0, "len": 2}}, "reset"]}"#;

#[test]
fn a_minimal_trace_loads_with_defaults() {
    let trace = Trace::from_json(OK).unwrap();
    assert_eq!(trace.config.heads, 1);
    assert_eq!(trace.config.batch, 1);
    assert_eq!(trace.config.head_dim, 1);
    assert_eq!(trace.ops.len(), 2);
    let again = Trace::from_json(&trace.to_json()).unwrap();
    assert_eq!(again, trace);
}

#[test]
fn truncated_json_names_line_and_column() {
    let text = err(&OK[..OK.len() - 10]);
    assert!(text.contains("line 1 column"), "{text}");
}

#[test]
fn wrong_types_name_the_field() {
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": "four"}, "ops": []}"#,
    );
    assert!(text.contains("invalid type: string \"four\""), "{text}");
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": [{"write": {"start": 0.5, "len": 1}}]}"#,
    );
    assert!(text.contains("invalid type: floating point"), "{text}");
}

#[test]
fn unknown_fields_and_ops_are_refused() {
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4, "sinks": 1}, "ops": []}"#,
    );
    assert!(text.contains("unknown field `sinks`"), "{text}");
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": [{"shrink": {"tokens": 1}}]}"#,
    );
    assert!(text.contains("unknown variant `shrink`"), "{text}");
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": [{"write": {"start": 0, "len": 1, "head": [0, 1]}}]}"#,
    );
    assert!(text.contains("unknown field `head`"), "{text}");
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "sparse", "capacity": 4}, "ops": []}"#,
    );
    assert!(text.contains("unknown variant `sparse`"), "{text}");
}

#[test]
fn wrong_format_and_expect_length_are_refused() {
    let text =
        err(r#"{"format": "kvtrace/2", "config": {"variant": "dense", "capacity": 4}, "ops": []}"#);
    assert!(text.contains("format is \"kvtrace/2\""), "{text}");
    let text = err(
        r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": ["reset"], "expect": []}"#,
    );
    assert!(
        text.contains("expect has 0 outcomes but there are 1 ops"),
        "{text}"
    );
}

#[test]
fn every_config_rule_is_invalid_config_naming_the_field() {
    let cases = [
        (
            r#""capacity": 0"#,
            "config.invalid_config: capacity must be at least 1, got 0",
        ),
        (
            r#""capacity": -3"#,
            "config.invalid_config: capacity must be at least 1, got -3",
        ),
        (
            r#""capacity": 4, "batch": 0"#,
            "config.invalid_config: batch",
        ),
        (
            r#""capacity": 4, "heads": -1"#,
            "config.invalid_config: heads",
        ),
        (
            r#""capacity": 4, "head_dim": 0"#,
            "config.invalid_config: head_dim",
        ),
        (
            r#""capacity": 4, "sink": 4"#,
            "config.invalid_config: sink must be below capacity 4, got 4",
        ),
        (
            r#""capacity": 4, "sink": -1"#,
            "config.invalid_config: sink",
        ),
        (
            r#""capacity": 4, "sink": 2, "window": 2"#,
            "config.invalid_config: window",
        ),
        (
            r#""capacity": 4, "window": 5"#,
            "config.invalid_config: window",
        ),
        (
            r#""capacity": 4, "window": -1"#,
            "config.invalid_config: window",
        ),
        (
            r#""capacity": 4, "sink": 1, "global_sink": 2"#,
            "config.invalid_config: global_sink",
        ),
        (
            r#""capacity": 4, "packed": {"quant": "int8"}"#,
            "config.invalid_config: packed",
        ),
        (
            r#""capacity": 65536, "heads": 4096, "head_dim": 16"#,
            "config.invalid_config: capacity",
        ),
    ];
    for (fields, expected) in cases {
        let text = format!(
            r#"{{"format": "kvtrace/1", "config": {{"variant": "dense", {fields}}}, "ops": []}}"#
        );
        let e = Trace::from_json(&text).expect_err(fields);
        assert!(
            matches!(e, TraceError::InvalidConfig { .. }),
            "{fields}: {e}"
        );
        assert!(e.to_string().starts_with(expected), "{fields}: {e}");
    }
    let packed = r#"{"format": "kvtrace/1", "config": {"variant": "packed", "capacity": 4, "growth": true}, "ops": []}"#;
    assert!(err(packed).contains("config.invalid_config: growth"));
    let packed = r#"{"format": "kvtrace/1", "config": {"variant": "packed", "capacity": 4, "packed": {"keep_recent_chunks": -1}}, "ops": []}"#;
    assert!(err(packed).contains("packed.keep_recent_chunks"));
    // Trimming after the read: dense without growth only, reported on trim.
    for (variant, growth) in [("packed", false), ("dense", true)] {
        let text = format!(
            r#"{{"format": "kvtrace/1", "config": {{"variant": "{variant}", "capacity": 4, "growth": {growth}, "trim": "after_read"}}, "ops": []}}"#
        );
        assert!(
            err(&text).contains("config.invalid_config: trim "),
            "{}",
            err(&text)
        );
    }
    let unknown = r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4, "trim": "never"}, "ops": []}"#;
    assert!(
        err(unknown).contains("unknown variant `never`"),
        "{}",
        err(unknown)
    );
}

/// `trim` is written only when it is not the default, so every trace of
/// the default mode is written byte for byte as before the field existed;
/// `after_read` is kept through a round trip, and an explicit
/// `"before_read"` loads as the default and is written without the field.
#[test]
fn trim_is_written_only_when_not_the_default() {
    let default = Trace::from_json(OK).unwrap();
    assert_eq!(default.config.trim, kvcheck::Trim::BeforeRead);
    assert!(!default.to_json().contains("trim"), "{}", default.to_json());
    let explicit = OK.replace(r#""sink": 1"#, r#""sink": 1, "trim": "before_read""#);
    let explicit = Trace::from_json(&explicit).unwrap();
    assert_eq!(explicit.to_json(), default.to_json());
    let after = OK.replace(r#""sink": 1"#, r#""sink": 1, "trim": "after_read""#);
    let after = Trace::from_json(&after).unwrap();
    assert_eq!(after.config.trim, kvcheck::Trim::AfterRead);
    let json = after.to_json();
    assert!(json.contains(r#""trim": "after_read""#), "{json}");
    assert_eq!(Trace::from_json(&json).unwrap(), after);
}

#[test]
fn negative_op_numbers_load_and_become_outcomes() {
    let text = r#"{"format": "kvtrace/1", "config": {"variant": "dense", "capacity": 4}, "ops": [{"write": {"start": -1, "len": 1}}, {"evict": {"tokens": -2}}]}"#;
    let trace = Trace::from_json(text).unwrap().with_model_expect();
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(
        json["expect"],
        serde_json::json!([{"err": "invalid_argument"}, {"err": "invalid_argument"}])
    );
}

#[test]
fn expect_output_is_trace_md_outcome_format() {
    let trace = Trace::from_json(OK).unwrap().with_model_expect();
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(
        json["expect"],
        serde_json::json!([
            {"ok": {"global_end": 2, "visible": [0, 1], "writers": [[0, 0]]}},
            {"ok": {"global_end": 0}}
        ])
    );
    assert_eq!(json["ops"][1], serde_json::json!("reset"));
    assert_eq!(json["format"], "kvtrace/1");
}

/// A configuration that breaks docs/contract.md §1, reached through the public API
/// rather than a file: no function panics, the model's outcomes are an
/// error naming the field, and `Trace::checked` refuses it.
#[test]
fn an_invalid_config_through_the_api_is_an_error_not_a_panic() {
    let mut config = kvcheck::Config::dense(4);
    config.sink = 9;
    let ops = vec![kvcheck::Op::Write(kvcheck::Write::new(0, 2))];
    let trace = Trace::new(config.clone(), ops.clone());
    let err = trace.model_outcomes().unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    assert!(err.to_string().contains("sink"), "{err}");
    assert_eq!(trace.clone().with_model_expect().expect, None);
    let err = Trace::checked(config, ops).unwrap_err();
    assert!(err.to_string().contains("sink"), "{err}");
    let report = kvcheck::engine::replay::replay(&trace, None, Some(SubjectSpec::Cache), None);
    assert!(!report.passed());
    let setup = report.setup_error.expect("a setup error");
    assert!(setup.contains("sink"), "{setup}");
}

/// The worked example of docs/kvtrace.md "Trim modes" is what the model
/// says, op by op, and the same ops trimming before the read differ where
/// the document says they do.
#[test]
fn the_trim_modes_example_of_kvtrace_md_is_the_models() {
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/kvtrace.md");
    let text = std::fs::read_to_string(&doc).expect("docs/kvtrace.md");
    let section = &text[text.find("## Trim modes").expect("a trim modes section")..];
    let start = section.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + section[start..].find("```").expect("the block ends");
    let trace = Trace::from_json(&section[start..end]).expect("a valid trace");
    assert_eq!(trace.config.trim, kvcheck::Trim::AfterRead);
    let expect = trace.expect.clone().expect("the example carries expect");
    assert_eq!(trace.model_outcomes().unwrap(), expect);
    let mut before = trace.clone();
    before.config.trim = kvcheck::Trim::BeforeRead;
    let kinds: Vec<String> = before
        .model_outcomes()
        .unwrap()
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    assert!(kinds[1].contains("[0,3,4,5]"), "{}", kinds[1]);
    assert!(kinds[4].contains("chunk_too_large"), "{}", kinds[4]);
}
