//! Prefix subjects in kvcheck's engines: `kvcheck prefix run`, `replay`
//! and `serve`; the model and the invariants of docs/contract.md §17 as
//! judges of the shipped paged cache (no false alarm) and of each planted
//! fault (each caught and minimized), in process and over the protocol.

use std::collections::BTreeSet;

use kvcache::fault::PrefixFault;
use kvcheck::engine::prefix::campaign::{self, PagedSubject, PrefixRunSettings, PrefixSubject};
use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::invariants::Invariant;
use kvcheck::engine::prefix::PrefixDivergenceKind;
use kvcheck::subject::prefix::Steps;

use crate::cli_support::{kvcheck, path, python_missing, scratch};

fn judges() -> [Judge; 2] {
    [Judge::Model, Judge::Invariants(BTreeSet::new())]
}

fn settings(judge: Judge, cases: u64) -> PrefixRunSettings {
    PrefixRunSettings {
        seed: 1,
        cases: Some(cases),
        judge: Some(judge),
        ..PrefixRunSettings::default()
    }
}

#[test]
fn both_judges_pass_the_paged_cache() {
    for judge in judges() {
        let mut subject = PagedSubject { fault: None };
        let report = campaign::run(&mut subject, &settings(judge.clone(), 600), &mut |_| {});
        assert!(report.failure.is_none(), "{judge:?}: {:?}", report.failure);
        assert_eq!(report.cases, 600);
        assert!(report.ops > 10_000, "{} ops", report.ops);
    }
}

#[test]
fn both_judges_catch_every_paged_fault_and_minimize_it() {
    for fault in PrefixFault::ALL {
        for judge in judges() {
            // A policy error may keep every invariant of §17: only the
            // model, which knows the order of §14, is bound to catch it.
            if fault.is_policy() && matches!(judge, Judge::Invariants(_)) {
                continue;
            }
            let mut subject = PagedSubject { fault: Some(fault) };
            let report = campaign::run(&mut subject, &settings(judge.clone(), 3_000), &mut |_| {});
            let failure = report
                .failure
                .unwrap_or_else(|| panic!("{fault} escaped {judge:?}"));
            let minimized = failure.minimized.expect("minimized");
            assert!(minimized.after <= 10, "{fault}: {} ops", minimized.after);
            assert!(minimized.divergence.same_failure(&failure.divergence));
            if matches!(judge, Judge::Invariants(_)) {
                assert_eq!(failure.divergence.kind, PrefixDivergenceKind::Invariant);
            }
            // The minimized trace fails on the fault and passes on the
            // shipped cache, in a free order.
            let trace = minimized.trace;
            let again = subject
                .drive(&trace.config, &judge, Steps::Free, &trace.ops)
                .unwrap();
            assert!(again.divergence.is_some(), "{fault}: the trace passes");
            let clean = PagedSubject { fault: None }
                .drive(&trace.config, &judge, Steps::Free, &trace.ops)
                .unwrap();
            assert!(clean.passed(), "{fault}: {:?}", clean.divergence);
        }
    }
}

#[test]
fn a_waived_invariant_is_not_judged() {
    // hit-stays-evictable breaks the accounting first (P1); waived, the
    // same campaign goes on to a later invariant or none.
    let waived = BTreeSet::from([Invariant::Accounting]);
    let mut subject = PagedSubject {
        fault: Some(PrefixFault::HitStaysEvictable),
    };
    let report = campaign::run(
        &mut subject,
        &settings(Judge::Invariants(waived), 300),
        &mut |_| {},
    );
    if let Some(failure) = report.failure {
        assert!(
            !failure.divergence.expected.starts_with("P1"),
            "{}",
            failure.divergence
        );
    }
}

#[test]
fn prefix_run_passes_paged_and_saves_a_fault_that_replays() {
    let (code, out, err) = kvcheck(&["prefix", "run", "--cases", "150", "--seed", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("paged: 150 cases"), "{out}");
    assert!(out.contains("no failure"), "{out}");

    let dir = scratch("prefix-run-fault");
    let out_dir = path(&dir, "failures");
    let (code, out, err) = kvcheck(&[
        "prefix",
        "run",
        "--subject",
        "fault:trust-weak-hash",
        "--judge",
        "invariants",
        "--cases",
        "2000",
        "--seed",
        "1",
        "--out",
        &out_dir,
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("invariant divergence"), "{out}");
    let saved = out
        .lines()
        .find_map(|l| l.strip_prefix("saved "))
        .expect("a saved trace")
        .to_string();
    let (code, out, _) = kvcheck(&[
        "prefix",
        "replay",
        &saved,
        "--subject",
        "fault:trust-weak-hash",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL"), "{out}");
    let (code, out, _) = kvcheck(&["prefix", "replay", &saved]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PASS"), "{out}");
    // Streaming replay reads the same file on the paged cache too.
    let (code, out, err) = kvcheck(&["replay", &saved]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn an_exec_subject_speaks_the_prefix_family() {
    let serve = |subject: &str| {
        format!(
            "exec:{} prefix serve --subject {subject}",
            env!("CARGO_BIN_EXE_kvcheck")
        )
    };
    let (code, out, err) = kvcheck(&[
        "prefix",
        "run",
        "--subject",
        &serve("paged"),
        "--cases",
        "120",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("kvcheck paged: 120 cases"), "{out}");
    assert!(out.contains("judged by the model"), "{out}");
    let dir = scratch("prefix-exec-fault");
    let (code, out, err) = kvcheck(&[
        "prefix",
        "run",
        "--subject",
        &serve("fault:hit-stays-evictable"),
        "--cases",
        "500",
        "--seed",
        "1",
        "--out",
        &path(&dir, "failures"),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("outcome divergence"), "{out}");
}

#[test]
fn prefix_commands_refuse_bad_input_with_exit_two() {
    let streaming = format!(
        "exec:{} serve --subject cache",
        env!("CARGO_BIN_EXE_kvcheck")
    );
    let cases: [(&[&str], &str); 5] = [
        (
            &["prefix", "run", "--subject", "bogus"],
            "unknown prefix subject",
        ),
        (
            &["prefix", "run", "--subject", "fault:nope"],
            "unknown paged fault",
        ),
        (
            &["prefix", "run", "--judge", "model", "--waive", "P5"],
            "--waive applies",
        ),
        (&["prefix", "run", "--time=0"], "--time must be a positive"),
        (
            &["prefix", "run", "--subject", &streaming, "--cases", "1"],
            "streaming subject",
        ),
    ];
    for (args, message) in cases {
        let (code, out, err) = kvcheck(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

#[test]
fn the_python_reference_prefix_subject_agrees_with_the_model() {
    if python_missing() {
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let command = format!(
        "exec:env PYTHONPATH={root}/python python3 {root}/adapters/reference_prefix_subject.py"
    );
    let (code, out, err) = kvcheck(&[
        "prefix",
        "run",
        "--subject",
        &command,
        "--cases",
        "200",
        "--seed",
        "3",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("200 cases"), "{out}");
}

/// The paged cache with `fault`, judged as a cache of `policy`.
fn paged_factory(
    policy: kvcheck::subject::prefix::Policy,
    fault: PrefixFault,
) -> kvcheck::engine::prefix::check::PrefixFactory<
    impl FnMut(&kvmodel::prefix::PrefixConfig) -> Result<kvcache::fault::FaultyPagedCache, String>,
> {
    use kvcheck::subject::prefix::PrefixCapabilities;
    kvcheck::engine::prefix::check::PrefixFactory {
        name: format!("paged {fault}"),
        capabilities: PrefixCapabilities {
            policy,
            ..PrefixCapabilities::full()
        },
        make: move |config: &kvmodel::prefix::PrefixConfig| {
            kvcache::fault::FaultyPagedCache::new(config, &candle_core::Device::Cpu, fault)
                .map_err(|e| e.to_string())
        },
    }
}

#[test]
fn check_prefix_passes_the_paged_cache_under_either_policy() {
    use kvcheck::engine::prefix::check::PrefixFactory;
    use kvcheck::subject::prefix::{Policy, PrefixCapabilities};
    for policy in [Policy::Contract, Policy::Own] {
        let factory = PrefixFactory {
            name: "paged".into(),
            capabilities: PrefixCapabilities {
                policy,
                ..PrefixCapabilities::full()
            },
            make: |config: &kvmodel::prefix::PrefixConfig| {
                kvcache::PagedCache::new(config, &candle_core::Device::Cpu)
                    .map_err(|e| e.to_string())
            },
        };
        let settings = kvcheck::CheckSettings::default().cases(200).seed(5);
        let checked = kvcheck::check_prefix(factory, &settings).unwrap();
        let report = checked.report.unwrap();
        assert_eq!(report.cases, 200, "{policy:?}");
    }
}

#[test]
fn check_prefix_fails_a_fault_saves_it_and_replays_it_alone() {
    use kvcheck::subject::prefix::Policy;
    let dir = scratch("check-prefix-fault");
    let mut settings = kvcheck::CheckSettings::default().cases(3_000).seed(1);
    settings.failures = dir.clone();
    let failure = kvcheck::check_prefix(
        paged_factory(Policy::Own, PrefixFault::SkipCopyOnWrite),
        &settings,
    )
    .unwrap_err()
    .to_string();
    assert!(failure.contains("judged by the invariants"), "{failure}");
    assert!(failure.contains("KVCHECK_REPLAY="), "{failure}");
    let saved = failure
        .lines()
        .find_map(|l| l.strip_prefix("saved "))
        .expect("a saved trace");
    settings.replay = Some(saved.into());
    let again = kvcheck::check_prefix(
        paged_factory(Policy::Own, PrefixFault::SkipCopyOnWrite),
        &settings,
    )
    .unwrap_err()
    .to_string();
    assert!(again.contains("still fails"), "{again}");
}

#[test]
fn prefix_power_prints_every_fault_under_both_judges_and_a_clean_control() {
    let (code, out, err) = kvcheck(&["prefix", "power", "--cases", "3000"]);
    assert_eq!(code, 0, "{out}{err}");
    for fault in PrefixFault::ALL {
        let rows = out.lines().filter(|l| l.starts_with(fault.name())).count();
        assert_eq!(rows, 2, "{fault}: {out}");
    }
    assert_eq!(out.matches("paged (control)").count(), 2, "{out}");
    assert!(!out.contains("ESCAPED"), "{out}");
}

#[test]
fn exploring_to_depth_six_passes_paged_and_catches_every_fault_under_both_judges() {
    use kvcheck::engine::prefix::explore::{default_configs, explore};
    use kvcheck::subject::prefix::PrefixCapabilities;
    let configs = default_configs(&PrefixCapabilities::full());
    for judge in judges() {
        let report = explore(
            &mut PagedSubject { fault: None },
            &judge,
            &configs,
            5,
            20_000,
        );
        assert!(report.failure.is_none(), "{judge:?}: {:?}", report.failure);
        assert_eq!(report.configs.len(), 8);
        assert!(report.configs.iter().all(|c| c.depth == 5 && !c.truncated));
        for fault in PrefixFault::ALL {
            // A policy error may keep every invariant of §17.
            if fault.is_policy() && matches!(judge, Judge::Invariants(_)) {
                continue;
            }
            let report = explore(
                &mut PagedSubject { fault: Some(fault) },
                &judge,
                &configs,
                6,
                20_000,
            );
            let failure = report
                .failure
                .unwrap_or_else(|| panic!("{fault} escaped {judge:?} to depth 6"));
            let minimized = failure.minimized.expect("minimized");
            assert!(minimized.after <= 6, "{fault}: {} ops", minimized.after);
        }
    }
}

#[test]
fn prefix_explore_on_the_command_line() {
    let (code, out, err) = kvcheck(&["prefix", "explore", "--depth", "3"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches(" states ").count(), 8, "{out}");
    assert!(out.contains("no failure"), "{out}");
    let dir = scratch("prefix-explore-fault");
    let (code, out, err) = kvcheck(&[
        "prefix",
        "explore",
        "--depth",
        "4",
        "--subject",
        "fault:trust-weak-hash",
        "--out",
        &path(&dir, "failures"),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("saved "), "{out}");
    let (code, _, err) = kvcheck(&["prefix", "explore", "--blocks", "0", "--block-size", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid_config"), "{err}");
}

#[test]
fn expect_and_save_take_prefix_traces() {
    let dir = scratch("prefix-expect-save");
    let trace = path(&dir, "weak.kvtrace.json");
    std::fs::write(
        &trace,
        r#"{"format": "kvtrace/1", "config": {"variant": "prefix", "blocks": 3, "block_size": 2},
            "ops": [{"start": {"request": 0, "tokens": [0, 1, 2]}}, {"compute": {"request": 0, "count": 3}},
                    {"finish": {"request": 0}}, {"start": {"request": 1, "tokens": [1, 0, 2]}}]}"#,
    )
    .unwrap();
    let (code, out, err) = kvcheck(&["expect", &trace]);
    assert_eq!(code, 0, "{err}");
    let filled: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(filled["expect"].as_array().unwrap().len(), 4, "{out}");
    assert_eq!(filled["expect"][3]["ok"]["hit"], 0, "{out}");
    // Stored as it is when it passes, with the model's expect, and the
    // stored trace replays clean.
    let corpus = path(&dir, "corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let (code, out, err) = kvcheck(&["save", &trace, "--name", "weak_hash", "--dir", &corpus]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("passes on the paged cache"), "{out}");
    let stored = path(&dir, "corpus/weak_hash.kvtrace.json");
    let (code, out, err) = kvcheck(&["replay", &stored]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn prefix_explain_walks_to_the_failure() {
    let dir = scratch("prefix-explain");
    let trace = path(&dir, "cow.kvtrace.json");
    std::fs::write(
        &trace,
        r#"{"format": "kvtrace/1", "config": {"variant": "prefix", "blocks": 2, "block_size": 2},
            "ops": [{"start": {"request": 0, "tokens": [0, 1, 2]}}, {"compute": {"request": 0, "count": 3}},
                    {"fork": {"request": 0, "into": 1}}, {"extend": {"request": 0, "tokens": [1]}}]}"#,
    )
    .unwrap();
    let (code, out, err) = kvcheck(&[
        "prefix",
        "explain",
        &trace,
        "--subject",
        "fault:skip-copy-on-write",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("r1 [0 1 2] computed 3/3, sealed blocks [0 1]"),
        "{out}"
    );
    assert!(
        out.contains("outcome divergence at step 3 (extend r0 [1])"),
        "{out}"
    );
    let (code, out, err) = kvcheck(&["explain", &trace]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("no failure\n"), "{out}");
}

#[test]
fn from_fuzz_decodes_a_prefix_lockstep_input_to_a_prefix_trace() {
    let dir = scratch("prefix-from-fuzz");
    let input = path(&dir, "input.bin");
    let bytes: Vec<u8> = (0u8..=255).map(|b| b.wrapping_mul(37)).collect();
    std::fs::write(&input, bytes).unwrap();
    let output = path(&dir, "input.kvtrace.json");
    let (code, out, err) = kvcheck(&["from-fuzz", "prefix_lockstep", &input, "-o", &output]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = kvcheck(&["replay", &output]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 passed"), "{out}");
    let (code, _, err) = kvcheck(&["from-fuzz", "prefix_lockstep", &input, "--keep-going"]);
    assert_eq!(code, 2, "{err}");
}
