use super::*;
use crate::engine::oracle::Oracle;
use crate::subject::SubjectSpec;

fn some(text: &str) -> Option<String> {
    Some(text.to_string())
}

#[test]
fn one_policy_for_every_kind() {
    let count = |t| read("KVCHECK_JOBS", some(t), |n: &usize| *n >= 1, "n ≥ 1");
    assert_eq!(count(" 4 "), Ok(Some(4)));
    assert_eq!(count(""), Ok(None));
    let err = count("0").unwrap_err();
    assert_eq!(err.to_string(), "KVCHECK_JOBS=\"0\": n ≥ 1");
    assert!(count("four").is_err());
    assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("0.5")).is_ok());
    assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("-1")).is_err());
    assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("inf")).is_err());
    assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", some("YES")), Ok(true));
    assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", some("0")), Ok(false));
    assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", None), Ok(false));
    let err = parse_flag("KVCHECK_EXACT_KINDS", some("sure")).unwrap_err();
    assert!(err.to_string().starts_with("KVCHECK_EXACT_KINDS=\"sure\""));
}

/// The defaults the table documents are the ones [`Settings`] holds.
#[test]
fn the_table_says_the_defaults_settings_hold() {
    let d = Settings::default();
    let said = |var: &str| KNOBS.iter().find(|k| k.var == var).unwrap().default;
    assert_eq!(said("KVCHECK_CASES"), d.cases.to_string());
    assert_eq!(said("KVCHECK_MAX_OPS"), d.max_ops.to_string());
    assert_eq!(d.seed, None);
    assert_eq!(said("KVCHECK_SUBJECT"), "cache");
    assert_eq!(SubjectSpec::configured(&d).unwrap(), SubjectSpec::Cache);
    assert_eq!(said("KVCHECK_ORACLE"), "model");
    assert_eq!(Oracle::configured(&d).unwrap(), None);
    assert_eq!(d.jobs, None);
    assert_eq!(said("KVCHECK_MAX_TESTS"), d.max_tests.to_string());
    assert_eq!(said("KVCHECK_EXPLORE_DEPTH"), d.explore_depth.to_string());
    assert_eq!(
        said("KVCHECK_SUBJECT_TIMEOUT"),
        d.subject_timeout.as_secs_f64().to_string()
    );
    assert_eq!(said("KVCHECK_EXACT_KINDS"), "no");
    assert!(!d.exact_kinds);
    assert_eq!(
        said("KVCHECK_RELATION_INSTANCES"),
        d.relation_instances.to_string()
    );
    assert_eq!(d.failures_dir, PathBuf::from("target/kvcheck-failures"));
    // Nothing set, or everything blank, is every default.
    assert_eq!(Settings::from_vars(|_| None), Ok(d.clone()));
    assert_eq!(
        Settings::from_vars(|_| some(" ")).map(|s| s.cases),
        Ok(d.cases)
    );
}

/// Every knob is read into its field, and every knob that is not text
/// refuses a bad value with an error naming it.
#[test]
fn from_vars_reads_every_knob_and_names_a_bad_one() {
    let vars = [
        ("KVCHECK_CASES", "8"),
        ("KVCHECK_MAX_OPS", "5"),
        ("KVCHECK_SEED", "0"),
        ("KVCHECK_SUBJECT", " reference "),
        ("KVCHECK_ORACLE", "self"),
        ("KVCHECK_JOBS", "3"),
        ("KVCHECK_MAX_TESTS", "7"),
        ("KVCHECK_EXPLORE_DEPTH", "2"),
        ("KVCHECK_SUBJECT_TIMEOUT", "0.5"),
        ("KVCHECK_EXACT_KINDS", "yes"),
        ("KVCHECK_STRICT_DOMAIN", "1"),
        ("KVCHECK_RELATION_INSTANCES", "4"),
        ("KVCHECK_REPLAY", "t.kvtrace.json"),
        ("CARGO_TARGET_DIR", "/tmp/t"),
    ];
    for knob in KNOBS {
        assert!(vars.iter().any(|(v, _)| *v == knob.var), "{}", knob.var);
    }
    let lookup = |var: &str| {
        vars.iter()
            .find(|(v, _)| *v == var)
            .map(|(_, t)| t.to_string())
    };
    let s = Settings::from_vars(lookup).unwrap();
    assert_eq!(
        s,
        Settings {
            cases: 8,
            max_ops: 5,
            seed: Some(0),
            subject: Some("reference".into()),
            oracle: Some("self".into()),
            jobs: Some(3),
            max_tests: 7,
            explore_depth: 2,
            subject_timeout: Duration::from_millis(500),
            exact_kinds: true,
            strict_domain: true,
            relation_instances: 4,
            failures_dir: PathBuf::from("/tmp/t/kvcheck-failures"),
            replay: Some(PathBuf::from("t.kvtrace.json")),
        }
    );
    assert_eq!(s.workers(), 3);
    assert_eq!(SubjectSpec::configured(&s).unwrap(), SubjectSpec::Reference);
    let oracle = Oracle::configured(&s).unwrap().expect("an oracle");
    assert_eq!(oracle.to_string(), "self");
    assert_eq!(oracle.relation_instances(), Some(4));
    for knob in KNOBS.iter().filter(|k| k.kind != Kind::Text) {
        let bad = |var: &str| (var == knob.var).then(|| "-1.5x".to_string());
        let err = Settings::from_vars(bad).unwrap_err();
        assert_eq!(err.var, knob.var);
        assert!(err
            .to_string()
            .starts_with(&format!("{}=\"-1.5x\"", knob.var)));
    }
    let bad_subject = Settings {
        subject: Some("nonsense".into()),
        ..Settings::default()
    };
    let err = SubjectSpec::configured(&bad_subject)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("KVCHECK_SUBJECT: "), "{err}");
    let bad_oracle = Settings {
        oracle: Some("self:M99".into()),
        ..Settings::default()
    };
    let err = Oracle::configured(&bad_oracle).unwrap_err().to_string();
    assert!(err.starts_with("KVCHECK_ORACLE: "), "{err}");
}

#[test]
fn every_knob_is_listed_once_and_documented() {
    let commands = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/commands.md"
    ))
    .expect("docs/commands.md");
    for (i, knob) in KNOBS.iter().enumerate() {
        assert!(knob.var.starts_with("KVCHECK_"), "{}", knob.var);
        assert!(
            KNOBS[..i].iter().all(|k| k.var != knob.var),
            "{} twice",
            knob.var
        );
        assert!(
            commands.contains(knob.var),
            "docs/commands.md does not list {}",
            knob.var
        );
    }
}
