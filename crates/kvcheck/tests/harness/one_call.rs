//! `kvcheck::check`, the one call a Rust cache's test makes: a correct
//! cache that reports nothing of its storage passes; a cache that panics
//! fails with a minimized `panic` divergence whose reproduce line is its
//! own test under `KVCHECK_REPLAY`, and the saved trace replays through
//! `engine::check::replay`; a cache that only grows and has no sink
//! declares so and is drawn inside its domain, in the campaign and in the
//! property suites alike.

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use kvcache::{KvCache, View};
use kvcheck::engine::check::{replay, REPLAY_VAR};
use kvcheck::engine::suite::{check_subject, SuiteSettings};
use kvcheck::subject::domain::{ConfigLimits, Rewrites};
use kvcheck::subject::{Capabilities, Domain, Factory, Feature, OpKind, ReferenceCache};
use kvcheck::{check, CheckFailure, CheckSettings, Config, Variant, Write};

/// The reference cache behind a door that reports none of its storage
/// (no [`KvCache::internals`]) and, with `panics`, panics on a rewrite.
struct Plain {
    inner: ReferenceCache,
    panics: bool,
}

impl KvCache for Plain {
    fn config(&self) -> &Config {
        self.inner.config()
    }
    fn global_end(&self) -> u64 {
        self.inner.global_end()
    }
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        if self.panics && request.len > 0 && (request.start as u64) < self.global_end() {
            panic!("index out of bounds: a rewrite of {request:?}");
        }
        self.inner.write(request, k, v)
    }
    fn view(&self) -> kvcache::Result<View<'_>> {
        self.inner.view()
    }
    fn rewind(&mut self, to: i64) -> kvcache::Result<u64> {
        self.inner.rewind(to)
    }
    fn evict(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.inner.evict(tokens)
    }
    fn pin(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.inner.pin(tokens)
    }
    fn reset(&mut self) -> kvcache::Result<u64> {
        self.inner.reset()
    }
}

fn plain(name: &str, capabilities: Capabilities, panics: bool) -> Factory {
    Factory::new(name, capabilities, move |config, device: &Device| {
        Ok(Box::new(Plain {
            inner: ReferenceCache::new(config, device)?,
            panics,
        }))
    })
}

fn failures(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvcheck-one-call-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn settings(name: &str) -> CheckSettings {
    CheckSettings {
        failures: failures(name),
        jobs: 1,
        ..CheckSettings::default()
    }
    .cases(12)
    .seed(7)
}

#[test]
fn a_correct_cache_reporting_no_storage_passes_and_counts_its_ops() {
    let checked = check(
        plain("plain", Capabilities::full(), false),
        &settings("plain"),
    )
    .expect("the reference cache keeps the contract");
    assert!(checked.ops() > 0);
    assert!(checked.report.profiles.len() >= 9, "{checked}");
    let text = checked.to_string();
    assert!(text.contains("ops judged: "), "{text}");
    let appends = checked
        .report
        .profiles
        .iter()
        .map(|p| p.coverage.count("op:append"))
        .sum::<u64>();
    let rewrites: u64 = checked
        .report
        .profiles
        .iter()
        .map(|p| p.coverage.count("op:rewrite"))
        .sum();
    assert!(appends > 0 && rewrites > 0, "{text}");
}

#[test]
fn a_panic_is_a_minimized_divergence_replayed_by_the_test() {
    let factory = plain("panics", Capabilities::full(), true);
    let settings = settings("panics");
    let failure = check(factory.clone(), &settings).unwrap_err();
    let CheckFailure::Diverged { report, trace, .. } = &failure else {
        panic!("expected a divergence, got {failure}");
    };
    assert!(report.contains("panic divergence"), "{report}");
    assert!(
        report.contains("the cache panicked: index out of bounds"),
        "{report}"
    );
    // One append and the rewrite that panics.
    assert!(
        report.contains("minimized") || report.contains("→    1:"),
        "{report}"
    );
    assert!(
        report.contains("one_call.rs:"),
        "where it was raised: {report}"
    );
    assert!(
        report.contains(&format!("reproduce: {REPLAY_VAR}=")),
        "the reproduce line runs the test again: {report}"
    );
    assert!(report.contains("cargo test"), "{report}");
    let trace = PathBuf::from(trace.as_ref().expect("the trace is saved"));
    let saved = kvcheck::Trace::load(&trace).unwrap();
    assert_eq!(
        saved.ops.len(),
        2,
        "minimized to the append and the rewrite"
    );
    // The saved trace fails again through the replay the line runs ...
    let again = replay(factory, &trace, &settings).unwrap_err();
    assert!(matches!(again, CheckFailure::Replayed { .. }), "{again}");
    assert!(again.to_string().contains("panic"), "{again}");
    // ... and passes on the cache without the bug.
    let fixed = plain("panics", Capabilities::full(), false);
    assert!(replay(fixed, &trace, &settings).is_ok());
}

/// A cache that only appends and grows, with no sink: candle-nn's
/// `KvCache`, say (the explorer's tests declare it too).
pub(crate) fn grows_only() -> Capabilities {
    Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Reset],
        features: vec![Feature::Growth],
        domain: Some(Domain {
            rewrites: Rewrites::None,
            gaps: false,
            malformed: false,
            configs: Box::new(ConfigLimits {
                max_sink: Some(0),
                growth: Some(true),
                ..ConfigLimits::default()
            }),
            ..Domain::default()
        }),
        ..Capabilities::full()
    }
}

#[test]
fn a_cache_that_only_grows_is_drawn_inside_what_it_declares() {
    let checked = check(
        plain("grows", grows_only(), false),
        &settings("grows").cases(40),
    )
    .expect("a correct growing cache passes");
    assert_eq!(checked.outside_share(), 0.0, "{checked}");
    let ran: Vec<&str> = checked
        .report
        .profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert!(ran.contains(&"growth"), "{checked}");
    assert!(!checked.skipped.is_empty(), "{checked}");
    // Every profile's required events are reachable: none is missed.
    for p in &checked.report.profiles {
        assert!(p.missing().is_empty(), "{}: {:?}", p.name, p.missing());
    }
    // The property suites require the same, and pass.
    let suites = check_subject(
        &plain("grows", grows_only(), false).into(),
        &SuiteSettings {
            cases: 24,
            failures_dir: failures("grows-suites"),
            ..SuiteSettings::default()
        },
    )
    .expect("the suites pass a correct growing cache");
    assert!(!suites.ran.is_empty(), "{suites}");
}

#[test]
fn a_read_then_trim_cache_passes_the_campaign_and_the_suites() {
    // Attention sinks of the StreamingLLM kind: dense, no window, growth
    // or pins, the whole chunk read before the trim.
    let sinks = || Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Reset],
        features: Vec::new(),
        trims: vec![kvcheck::Trim::AfterRead],
        ..Capabilities::full()
    };
    let checked = check(plain("sinks", sinks(), false), &settings("sinks"))
        .expect("a correct read-then-trim cache passes");
    assert!(checked.ops() > 0, "{checked}");
    let suites = check_subject(
        &plain("sinks", sinks(), false).into(),
        &SuiteSettings {
            cases: 24,
            failures_dir: failures("sinks-suites"),
            ..SuiteSettings::default()
        },
    )
    .expect("the suites pass a correct read-then-trim cache");
    assert!(!suites.ran.is_empty(), "{suites}");
}

#[test]
fn keeping_going_lists_each_finding_with_its_replay_line() {
    let settings = settings("keep-going").keep_going();
    let failure = check(plain("panics", Capabilities::full(), true), &settings).unwrap_err();
    let CheckFailure::Diverged { report, trace, .. } = &failure else {
        panic!("expected findings, got {failure}");
    };
    assert!(report.contains("panic"), "{report}");
    assert!(
        report.contains(&format!("reproduce: {REPLAY_VAR}=")),
        "{report}"
    );
    assert!(trace.is_some(), "{report}");
}

/// `KVCHECK_ORACLE` reaches the one call as it reaches `kvcheck run`, and
/// a value that names no oracle is an error naming the variable.
#[test]
fn the_oracle_knob_is_the_one_calls_oracle() {
    let mut knobs = kvcheck::settings::Settings {
        oracle: Some("self".into()),
        ..Default::default()
    };
    let settings = CheckSettings::from_settings(&knobs).unwrap();
    assert_eq!(
        settings.oracle.describe(),
        kvcheck::engine::oracle::Oracle::parse("self")
            .unwrap()
            .describe()
    );
    assert_ne!(
        settings.oracle.describe(),
        CheckSettings::default().oracle.describe()
    );
    knobs.oracle = Some("no-such-oracle".into());
    let error = CheckSettings::from_settings(&knobs).unwrap_err();
    assert!(error.to_string().starts_with("KVCHECK_ORACLE:"), "{error}");
}
