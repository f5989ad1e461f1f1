//! The out-of-process subject: the stdlib Python implementation of the
//! contract (`adapters/reference_subject.py`) passes every engine, its
//! planted faults are caught and minimized, and a subject that hangs,
//! exits, prints garbage, sends a short payload or raises
//! (`tests/subjects/misbehaving_subject.py`) is reported as its own
//! divergence kind within the timeout, after which the next case gets a
//! fresh process.
//!
//! Needs `python3`; without it every test says so and passes vacuously.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::lockstep::{Lockstep, SetupError};
use kvcheck::check::record::{observe, Plan};
use kvcheck::check::trace::{collect_trace_files, Trace};
use kvcheck::engine::case::CaseError;
use kvcheck::engine::case::{draw, draw_and_run};
use kvcheck::engine::explore::Explorer;
use kvcheck::engine::minimize::{minimize, Signature};
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::replay::replay;
use kvcheck::engine::strategy::{profile, Case, PROFILES};
use kvcheck::engine::suite::{check_profile, SuiteError, SuiteSettings};
use kvcheck::subject::{ExecSubject, SubjectSpec};
use kvcheck::{Config, Op, Write};

use crate::cli_support::python_missing;
use proptest::test_runner::TestRunner;

fn script(options: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // Options other than --fault need the misbehaving wrapper.
    if options.is_empty() || options.starts_with("--fault") && !options.contains("--caps") {
        dir.join("../../adapters/reference_subject.py")
    } else {
        dir.join("tests/subjects/misbehaving_subject.py")
    }
}

/// The Python subject with `options`, responses timing out after `timeout`.
fn exec(options: &str, timeout: Duration) -> (SubjectSpec, Arc<ExecSubject>) {
    let command = format!("python3 {} {options}", script(options).display());
    let subject = Arc::new(
        ExecSubject::new(&command)
            .unwrap()
            .with_timeout(timeout)
            .with_exact_kinds(false),
    );
    (SubjectSpec::Exec(Arc::clone(&subject)), subject)
}

fn corpus() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    collect_trace_files(&[root.join("tests/vectors"), root.join("tests/regressions")]).unwrap()
}

fn settings(cases: u32) -> SuiteSettings {
    SuiteSettings {
        cases,
        max_ops: 40,
        seed: None,
        subject: SubjectSpec::Cache,
        oracle: kvcheck::engine::oracle::Oracle::model(),
        ..SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
    }
}

fn sink_config() -> Config {
    Config {
        sink: 1,
        ..Config::dense(4)
    }
}

#[test]
fn the_correct_subject_passes_the_vectors_and_regressions() {
    if python_missing() {
        return;
    }
    let (subject, process) = exec("", Duration::from_secs(10));
    let files = corpus();
    for file in &files {
        let trace = Trace::load(file).unwrap();
        let report = replay(&trace, Some(file), Some(subject.clone()), None);
        assert!(report.passed(), "{}", report.failure().unwrap_or_default());
        assert_eq!(report.skipped, None);
    }
    assert!(files.len() >= 30, "{} traces", files.len());
    assert_eq!(process.spawned(), 1, "one process serves every trace");
}

#[test]
fn the_correct_subject_passes_every_suite_in_one_process() {
    if python_missing() {
        return;
    }
    let (subject, process) = exec("", Duration::from_secs(10));
    let report = kvcheck::engine::suite::check_subject(&subject, &settings(48)).unwrap();
    assert_eq!(report.ran.len(), PROFILES.len(), "{report}");
    assert_eq!(process.spawned(), 1, "cases reuse the process");
}

#[test]
fn a_planted_fault_is_caught_by_the_suites_and_the_explorer_and_minimized() {
    if python_missing() {
        return;
    }
    let (subject, _) = exec("--fault stale-rewrite", Duration::from_secs(10));
    let message = kvcheck::engine::suite::check_subject(&subject, &settings(64))
        .unwrap_err()
        .to_string();
    assert!(message.contains("values divergence"), "{message}");
    let found = Explorer::new(&sink_config(), subject.clone())
        .depth(2)
        .assert_discovery();
    assert_eq!(found.kind, DivergenceKind::Values);
    assert_eq!(found.trace.ops.len(), 2, "{found}");
    // A long trace that shows the fault shrinks to a rewrite of one write.
    let mut ops: Vec<Op> = (0..6).map(|i| Op::Write(Write::new(i, 1))).collect();
    ops.extend([Op::Evict { tokens: 1 }, Op::Write(Write::new(5, 1))]);
    let m = minimize(&Trace::new(sink_config(), ops), subject, 500).unwrap();
    assert!(m.one_minimal);
    assert_eq!(m.trace.ops.len(), 2, "{}", m.trace.to_json());
    assert_eq!(m.divergence.kind, DivergenceKind::Values);
}

#[test]
fn exceptions_agree_on_refused_unless_kinds_are_exact() {
    if python_missing() {
        return;
    }
    let trace = Trace::new(
        sink_config(),
        vec![Op::Write(Write::new(0, 2)), Op::Write(Write::new(5, 1))],
    );
    let (lenient, _) = exec("--raise-on-refusal", Duration::from_secs(10));
    assert!(replay(&trace, None, Some(lenient), None).passed());
    let exact = lenient_to_exact("--raise-on-refusal");
    let d = replay(&trace, None, Some(exact), None).divergence.unwrap();
    assert_eq!(d.kind, DivergenceKind::Exception);
    assert!(d.actual.contains("ValueError"), "{d}");
    // An exception where the model succeeds is an outcome divergence in
    // either mode.
    let (overlap, _) = exec("--raise-on-overlap", Duration::from_secs(10));
    let trace = Trace::new(
        sink_config(),
        vec![Op::Write(Write::new(0, 2)), Op::Write(Write::new(1, 2))],
    );
    let d = replay(&trace, None, Some(overlap), None)
        .divergence
        .unwrap();
    assert_eq!(d.kind, DivergenceKind::Outcome);
    assert!(
        d.actual.contains("exception ValueError: overlapping write"),
        "{d}"
    );
}

fn lenient_to_exact(options: &str) -> SubjectSpec {
    let (subject, _) = exec(options, Duration::from_secs(10));
    subject.with_exec_options(None, true)
}

/// Runs three appends on a subject that misbehaves at its op request
/// `at`, then a clean case; returns the divergence and the process count.
fn misbehave(
    kind: &str,
    at: usize,
) -> (Box<kvcheck::check::divergence::Divergence>, Duration, usize) {
    let (subject, process) = exec(
        &format!("--misbehave {kind} --at {at}"),
        Duration::from_secs(3),
    );
    let ops: Vec<Op> = (0..3).map(|i| Op::Write(Write::new(i, 1))).collect();
    let started = Instant::now();
    let mut run = Lockstep::open(&sink_config(), &subject, &candle_core::Device::Cpu).unwrap();
    let divergence = run.run(&ops).unwrap_err();
    let elapsed = started.elapsed();
    drop(run);
    // The next case starts a fresh process (which misbehaves only later
    // in its life, at request `at`, so one op is clean).
    let mut next = Lockstep::open(&sink_config(), &subject, &candle_core::Device::Cpu).unwrap();
    next.step(&ops[0]).expect("a fresh process answers");
    (divergence, elapsed, process.spawned())
}

/// [`misbehave`], asserting the divergence's kind and step and that its
/// report says each of `says`; returns the time taken and the processes
/// started.
fn assert_reported(
    misbehaviour: &str,
    at: usize,
    kind: DivergenceKind,
    says: &[&str],
) -> (Duration, usize) {
    let (d, elapsed, spawned) = misbehave(misbehaviour, at);
    assert_eq!((d.kind, d.step), (kind, at), "{d}");
    for needle in says {
        assert!(d.actual.contains(needle), "{needle:?} missing from {d}");
    }
    (elapsed, spawned)
}

#[test]
fn a_subject_that_hangs_is_a_timeout_within_the_timeout() {
    if python_missing() {
        return;
    }
    let says = ["within 3s", "about to misbehave: sleep"];
    let (elapsed, spawned) = assert_reported("sleep", 1, DivergenceKind::Timeout, &says);
    // The 3 s timeout, plus starting Python on a loaded machine.
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_eq!(spawned, 2);
}

#[test]
fn a_subject_that_exits_or_raises_mid_trace_is_a_crash_with_its_status_and_stderr() {
    if python_missing() {
        return;
    }
    let says = ["exit status: 3", "about to misbehave: exit"];
    let (_, spawned) = assert_reported("exit", 2, DivergenceKind::Crash, &says);
    assert_eq!(spawned, 2);
    let says = [
        "exit status: 1",
        "RuntimeError: planted: the adapter itself is broken",
    ];
    assert_reported("raise", 2, DivergenceKind::Crash, &says);
}

#[test]
fn a_subject_that_prints_garbage_or_short_payloads_breaks_the_protocol() {
    if python_missing() {
        return;
    }
    let says = ["this is not json"];
    assert_reported("garbage", 1, DivergenceKind::Protocol, &says);
    let says = ["k has 7 bytes, expected 8"];
    assert_reported("short", 1, DivergenceKind::Protocol, &says);
}

#[test]
fn a_subject_that_fails_a_reset_is_reported_at_the_reset() {
    if python_missing() {
        return;
    }
    let ops = [
        Op::Write(Write::new(0, 1)),
        Op::Write(Write::new(1, 1)),
        Op::Reset,
    ];
    // The reset is op request 2: the lockstep driver reports the crash there…
    let (subject, _) = exec("--misbehave exit --at 2", Duration::from_secs(3));
    let mut run = Lockstep::open(&sink_config(), &subject, &candle_core::Device::Cpu).unwrap();
    let d = run.run(&ops).unwrap_err();
    assert_eq!((d.kind, d.step), (DivergenceKind::Crash, 2), "{d}");
    assert!(d.actual.contains("exit status: 3"), "{d}");
    // …and a caller's transcript ends at it with the same classification.
    let (subject, _) = exec("--misbehave garbage --at 2", Duration::from_secs(3));
    let transcript = observe(&subject, &Plan::of(&sink_config(), &ops)).unwrap();
    assert_eq!(transcript.seen.len(), 2, "{transcript:?}");
    let (kind, actual) = transcript.failure.expect("the reset failed");
    assert_eq!(kind, DivergenceKind::Protocol, "{actual}");
    assert!(actual.contains("this is not json"), "{actual}");
}

/// The `NAME INDEX` lines the misbehaving subject logged with `--log-index`
/// since the last call, one per op request.
fn take_logged(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text.lines().map(str::to_string).collect()
}

#[test]
fn every_op_request_carries_the_index_of_the_op_being_checked() {
    if python_missing() {
        return;
    }
    let log = std::env::temp_dir().join(format!("kvcheck-index-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (subject, _) = exec(
        &format!("--log-index {}", log.display()),
        Duration::from_secs(10),
    );
    // A write, a rewind ahead of the global end (refused, then probed on
    // this dense config by a zero-length write), a write and a reset.
    let ops = [
        Op::Write(Write::new(0, 2)),
        Op::Rewind { to: 5 },
        Op::Write(Write::new(2, 1)),
        Op::Reset,
    ];
    let mut run = Lockstep::open(&sink_config(), &subject, &candle_core::Device::Cpu).unwrap();
    run.run(&ops).unwrap();
    drop(run);
    // The probe carries the index of the refused op.
    assert_eq!(
        take_logged(&log),
        ["write 0", "rewind 1", "write 1", "write 2", "reset 3"]
    );
    // A caller's run has no probe; each op still carries its own index.
    let transcript = observe(&subject, &Plan::of(&sink_config(), &ops)).unwrap();
    assert!(transcript.failure.is_none(), "{transcript:?}");
    assert!(transcript.seen[1].is_refused(), "{transcript:?}");
    assert_eq!(
        take_logged(&log),
        ["write 0", "rewind 1", "write 2", "reset 3"]
    );
}

#[test]
fn a_slow_first_open_has_the_start_up_allowance() {
    if python_missing() {
        return;
    }
    let (subject, _) = exec("--slow-start 1.5", Duration::from_millis(700));
    let trace = Trace::new(sink_config(), vec![Op::Write(Write::new(0, 2))]);
    let report = replay(&trace, None, Some(subject), None);
    assert!(report.passed(), "{}", report.failure().unwrap_or_default());
}

#[test]
fn a_command_that_does_not_start_is_a_setup_error_naming_it() {
    let subject = SubjectSpec::parse("exec:/nonexistent/kvcheck-subject --flag").unwrap();
    let err = Lockstep::open(&sink_config(), &subject, &candle_core::Device::Cpu)
        .err()
        .expect("nothing to start");
    assert!(matches!(err, SetupError::CacheRefused(_)));
    assert!(err.to_string().contains("cannot start"), "{err}");
    // A suite names the profile it could not run, and why.
    let suite = SuiteSettings {
        subject: subject.clone(),
        ..settings(4)
    };
    let err = check_profile(profile("growth").unwrap(), &suite).expect_err("nothing to start");
    assert!(
        matches!(
            err,
            SuiteError::Case {
                profile: "growth",
                source: CaseError::Capabilities { .. }
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("profile growth: cannot ask") && message.contains("kvcheck-subject"),
        "{message}"
    );
    assert!(SubjectSpec::parse("exec:").is_err());
    assert!(SubjectSpec::parse("exec:python3 'unclosed").is_err());
}

#[test]
fn a_positions_only_subject_is_compared_on_positions_only() {
    if python_missing() {
        return;
    }
    // The stale rewrite changes values only: invisible without values…
    let (subject, _) = exec(
        "--fault stale-rewrite --caps positions-only",
        Duration::from_secs(10),
    );
    let trace = Trace::new(
        sink_config(),
        vec![Op::Write(Write::new(0, 2)), Op::Write(Write::new(0, 2))],
    );
    assert!(replay(&trace, None, Some(subject.clone()), None).passed());
    // …while outcomes and positions are still checked.
    let report = kvcheck::engine::suite::check_subject(&subject, &settings(32)).unwrap();
    assert_eq!(report.ran.len(), PROFILES.len(), "{report}");
}

#[test]
fn a_subject_without_ops_and_features_gets_only_what_it_supports() {
    if python_missing() {
        return;
    }
    let (subject, _) = exec("--caps dense-writes-only", Duration::from_secs(10));
    // Replay skips, with the reason, what it cannot express.
    let trace = Trace::new(
        sink_config(),
        vec![Op::Write(Write::new(0, 2)), Op::Evict { tokens: 1 }],
    );
    let report = replay(&trace, None, Some(subject.clone()), None);
    assert_eq!(
        report.skipped.as_deref(),
        Some("unsupported by the subject: op evict")
    );
    assert!(report.divergence.is_none());
    // The suites run the profiles it allows, generating only writes (a
    // generated evict would reach the subject and diverge as unsupported).
    let report = kvcheck::engine::suite::check_subject(&subject, &settings(32)).unwrap();
    let skipped: Vec<&str> = report.skipped.iter().map(|(name, _)| *name).collect();
    assert_eq!(skipped, ["window", "growth", "packed"], "{report}");
    // The explorer's alphabet, too.
    Explorer::new(&Config::dense(2), subject)
        .depth(2)
        .assert_no_discovery();
}

#[test]
fn a_differential_oracle_draws_only_what_both_subjects_express() {
    if python_missing() {
        return;
    }
    let (narrow, _) = exec("--caps dense-writes-only", Duration::from_secs(10));
    let oracle = Oracle::subject(narrow.clone());
    assert_eq!(oracle.runs(), Some(&narrow));
    let tiny = profile("tiny").unwrap();
    let mut runner = TestRunner::deterministic();
    let mut writes = 0;
    for _ in 0..16 {
        let Case { config, ops } =
            draw(tiny, &mut runner, 24, &SubjectSpec::Reference, &oracle).unwrap();
        assert!(
            ops.iter()
                .all(|op| matches!(op, Op::Write(w) if w.heads.is_none())),
            "{ops:?}"
        );
        writes += ops.len();
        let checked = oracle
            .check(&config, &ops, &SubjectSpec::Reference)
            .unwrap();
        assert!(checked.is_none(), "{}", checked.unwrap());
    }
    assert!(writes >= 16, "only {writes} writes drawn");
    // A profile the oracle cannot open is unsupported, not drawn.
    let window = profile("window").unwrap();
    let err = draw(window, &mut runner, 24, &SubjectSpec::Reference, &oracle)
        .unwrap_err()
        .to_string();
    assert!(err.contains("profile window"), "{err}");
}

#[test]
fn every_fault_of_the_reference_subject_is_caught_by_a_campaign_and_minimized() {
    if python_missing() {
        return;
    }
    let listed = std::process::Command::new("python3")
        .arg(script(""))
        .arg("--list-faults")
        .output()
        .unwrap();
    let faults: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(faults.len() >= 5, "{faults:?}");
    for fault in faults {
        let (subject, _) = exec(&format!("--fault {fault}"), Duration::from_secs(10));
        let mut runners: Vec<TestRunner> = (0..PROFILES.len())
            .map(|_| TestRunner::deterministic())
            .collect();
        let found = (0..100)
            .flat_map(|_| 0..PROFILES.len())
            .find_map(|i| {
                draw_and_run(
                    &PROFILES[i],
                    &mut runners[i],
                    40,
                    &subject,
                    &Oracle::model(),
                )
                .unwrap()
                .divergence
            })
            .unwrap_or_else(|| panic!("fault {fault} was not caught in 100 cases per profile"));
        let m = minimize(&found.trace, subject, 1000).unwrap();
        assert_eq!(
            Signature::of(&m.divergence),
            Signature::of(&found),
            "{fault}"
        );
        assert!(
            m.one_minimal && m.after <= m.before,
            "{fault}: {} → {}",
            m.before,
            m.after
        );
        assert!(m.trace.ops.len() <= 4, "{fault}: {}", m.trace.to_json());
    }
}
