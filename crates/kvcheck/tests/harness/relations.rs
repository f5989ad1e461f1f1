//! The relations and the invariants of one run of docs/contract.md §9 on
//! the reference model and the shipped caches, and the failures of the zoo
//! each of them catches.

use kvcheck::check::relation::Relation;
use kvcheck::engine::case::draw;
use kvcheck::engine::oracle::Work;
use kvcheck::engine::relation::{check, domain};
use kvcheck::engine::strategy::{Case, PROFILES};
use kvcheck::settings::DEFAULT_INSTANCES;
use kvcheck::subject::SubjectSpec;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

/// Cases per profile (`KVCHECK_CASES` overrides, as for the suites).
fn cases() -> usize {
    std::env::var("KVCHECK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Every relation holds on `subject` over random traces of every profile:
/// for the reference model this is the proof that the preconditions are
/// complete.
fn relations_hold(subject: &SubjectSpec, seed: u64) {
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let mut work = Work::default();
    let mut applied = std::collections::BTreeMap::<Relation, usize>::new();
    // Drawn as `--oracle self` draws (shaped into the relations' domains,
    // a third of the cases left as the profile drew them).
    let capabilities = std::sync::Arc::new(subject.capabilities().expect("an in-process subject"));
    for (index, profile) in PROFILES.iter().enumerate() {
        for case in 0..cases() {
            let Case { config, ops } =
                domain::draw(&PROFILES[index], &capabilities, &mut runner, 30)
                    .expect("every profile draws");
            for relation in Relation::ALL {
                let before = work.judged.cases_of(relation);
                let found = check(&config, &ops, subject, &[relation], 4, &mut work)
                    .expect("the subject runs every drawn trace");
                if let Some(d) = found {
                    panic!(
                        "{relation} fails on {} (profile {}, case {case}):\n{d}\n{}",
                        subject.name(&config),
                        profile.name,
                        d.trace
                    );
                }
                // A case counts where an instance of the relation ran and
                // was compared, or where the invariant judged an op.
                *applied.entry(relation).or_default() +=
                    (work.judged.cases_of(relation) - before) as usize;
            }
        }
    }
    // Every relation was applied somewhere: a precondition that never
    // holds on the profiles would prove nothing.
    for relation in Relation::ALL {
        assert!(
            applied.get(&relation).copied().unwrap_or(0) > 0,
            "{relation} never applied: {applied:?}"
        );
    }
}

#[test]
fn every_relation_holds_on_the_reference_model() {
    relations_hold(&SubjectSpec::Reference, 11);
}

#[test]
fn every_relation_holds_on_the_shipped_caches() {
    relations_hold(&SubjectSpec::Cache, 12);
}

/// Append-only traces of every profile's configurations (packed ones
/// without quantization): where M7's precondition holds on every case.
fn append_only() -> impl proptest::strategy::Strategy<Value = (kvcheck::Config, Vec<kvcheck::Op>)> {
    use kvcheck::{Op, Quant, Write};
    use proptest::prelude::*;
    let configs: Vec<_> = PROFILES.iter().map(|p| (p.configs)()).collect();
    (
        proptest::strategy::Union::new(configs),
        prop::collection::vec((1i64..=7, 0u8..10), 1..14),
    )
        .prop_map(|(mut config, chunks)| {
            if let Some(packed) = config.packed.as_mut() {
                packed.quant = Quant::None;
            }
            // Only the appends the model accepts: M7 needs every write to
            // succeed.
            let mut model = kvcheck::Model::new(&config).expect("profiles draw valid configs");
            let mut ops = Vec::new();
            for (len, roll) in chunks {
                let op = if roll == 0 {
                    Op::Reset
                } else {
                    Op::Write(Write::new(model.global_end() as i64, len))
                };
                if model.clone().apply(ops.len() as u64, &op).is_ok() {
                    model
                        .apply(ops.len() as u64, &op)
                        .expect("accepted on the clone");
                    ops.push(op);
                }
            }
            (config, ops)
        })
}

proptest::proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// M7 on traces built for it: the appends that the model accepts are
    /// split in every way the instances pick, on the model and the caches.
    #[test]
    fn chunking_holds_on_append_only_traces((config, ops) in append_only()) {
        for subject in [SubjectSpec::Reference, SubjectSpec::Cache] {
            let mut work = Work::default();
            let found = check(&config, &ops, &subject, &[Relation::ChunkingInvariant], 8, &mut work)
                .expect("every subject runs append-only traces");
            let splittable = ops.iter().any(|op| matches!(op, kvcheck::Op::Write(w) if w.len >= 2));
            proptest::prop_assert!(!splittable || work.runs > 1, "M7 did not apply to {:?}", ops);
            proptest::prop_assert!(found.is_none(), "{}", found.map(|d| format!("{d}\n{}", d.trace)).unwrap_or_default());
        }
    }
}

/// A fault of the zoo that breaks each relation (names as `fault:NAME`
/// takes them).
const BREAKS: [(Relation, &str); 18] = [
    (Relation::ResetIsFresh, "growth-keeps-window"),
    (Relation::HeadSplit, "head-start-ignored"),
    (Relation::BatchRowsIndependent, "roll-crosses-batch"),
    (Relation::HeadsIndependent, "head-start-ignored"),
    (Relation::RewriteIdempotent, "stale-view-after-rewrite"),
    (Relation::ProbePure, "probe-makes-room"),
    (Relation::ChunkingInvariant, "chunk-over-protected"),
    (Relation::AppendRewound, "mutate-then-raise"),
    (Relation::RefusalPure, "mutate-then-raise"),
    (Relation::LastWriteWins, "roll-one-short"),
    (Relation::NoDuplicates, "pin-duplicated-in-view"),
    (Relation::SinksStay, "window-drops-sink"),
    (Relation::PinsStay, "pin-lost-on-misaligned-roll"),
    (Relation::WindowWidth, "window-double-counts-sink"),
    (Relation::Provenance, "evicted-rewrite-on-sink"),
    (Relation::ViewShape, "packed-returns-every-head"),
    (Relation::GlobalEnd, "gap-write-accepted"),
    (Relation::MustRefuse, "zero-length-advances"),
];

/// Asserts that `row` is a catch by `relation`, minimized and replayed.
fn assert_caught(
    row: &kvcheck::engine::power::relations::SelfCatch,
    relation: Relation,
    what: &str,
) {
    use kvcheck::check::divergence::DivergenceKind;
    assert_eq!(
        row.caught,
        Some(DivergenceKind::Relation(relation)),
        "{relation} on {what}: {}",
        row.note
    );
    assert!(
        row.minimized_ops.is_some(),
        "{relation} on {what}: not minimized"
    );
    assert_eq!(
        row.replayed,
        Some(true),
        "{relation} on {what}: does not replay"
    );
}

/// Every relation has a fault of the zoo that breaks it: that relation
/// alone catches it within a few hundred cases, the minimizer keeps the
/// same relation failing, and the minimized trace replays from its file
/// form (in process; `exec_path` below does the same through a process).
#[test]
fn every_relation_catches_a_fault_of_the_zoo() {
    use kvcache::fault::{CacheFault, FaultBase};
    use kvcheck::engine::power::relations::catch;
    use kvcheck::engine::power::Target;
    use std::time::Duration;
    assert_eq!(BREAKS.len(), Relation::ALL.len());
    for (relation, fault) in BREAKS {
        let fault = CacheFault::from_name(fault).expect("a fault of the zoo");
        let target = Target::fault(fault, FaultBase::Shipped);
        let row = catch(
            target,
            &[relation],
            DEFAULT_INSTANCES,
            1,
            Duration::from_secs(120),
            400,
            40,
        );
        assert_caught(&row, relation, fault.name());
    }
}

/// `run --oracle self` finds a relation failure, saves it with its oracle;
/// `replay` checks the same relation again (and passes on the correct
/// cache), `explain` shows both runs side by side.
#[test]
fn a_relation_failure_is_saved_replayed_and_explained() {
    use crate::cli_support::{kvcheck, scratch};
    let dir = scratch("relations-cli");
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let out = dir.to_str().unwrap();
    let subject = "fault:mutate-then-raise";
    let (code, stdout, stderr) = kvcheck(&[
        "run",
        "--oracle",
        "self:M9",
        "--subject",
        subject,
        "--seed",
        "1",
        "--time",
        "60",
        "--out",
        out,
        "--jobs",
        "1",
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("relation_m9 divergence"), "{stdout}");
    assert!(stderr.contains("oracle self:M9"), "{stderr}");
    let mut saved: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    saved.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    let smallest = saved
        .first()
        .expect("a saved trace")
        .to_str()
        .unwrap()
        .to_string();
    let trace = kvcheck::check::trace::Trace::load(std::path::Path::new(&smallest)).unwrap();
    let tag = trace.oracle.clone().expect("the oracle is saved");
    assert_eq!(tag.relation, Some(Relation::RefusalPure));
    assert!(trace.expect.is_none());

    let (code, stdout, _) = kvcheck(&["replay", &smallest, "--subject", subject]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("relation_m9"), "{stdout}");
    let (code, stdout, _) = kvcheck(&["replay", &smallest]);
    assert_eq!(code, 0, "the correct cache keeps M9: {stdout}");

    let (code, stdout, _) = kvcheck(&["explain", &smallest, "--subject", subject]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("first step where they part"), "{stdout}");
    assert!(stdout.contains("│"), "{stdout}");
}

/// A reader refuses an `oracle` field of a version it does not know, by
/// name, instead of checking the trace against the model.
#[test]
fn an_oracle_field_of_a_newer_version_is_refused() {
    let text = r#"{"format": "kvtrace/1", "oracle": {"version": 2, "kind": "self"},
        "config": {"variant": "dense", "capacity": 4}, "ops": [{"write": {"start": 0, "len": 1}}]}"#;
    let err = kvcheck::check::trace::Trace::from_json(text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("oracle: version 2 is not understood by this reader (it reads version 1)"),
        "{err}"
    );
    let unknown = text.replace(r#""kind": "self""#, r#""kind": "self", "relation": "M99""#);
    let err = kvcheck::check::trace::Trace::from_json(&unknown)
        .unwrap_err()
        .to_string();
    assert!(err.contains("M99"), "{err}");
}

/// `--oracle SUBJECT`: the ring and the shipped dense cache agree step by
/// step on every dense profile; a fault of the zoo against the correct
/// cache is a `differential` divergence that names both subjects.
#[test]
fn differential_checking_tells_a_fault_from_another_correct_cache() {
    use kvcheck::check::divergence::DivergenceKind;
    use kvcheck::engine::oracle::Oracle;
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(4),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let oracle = Oracle::parse("cache").unwrap();
    let faulty = SubjectSpec::parse("fault:roll-one-short").unwrap();
    let mut found = None;
    for _ in 0..8 {
        for profile in PROFILES {
            if profile.name == "packed" {
                continue;
            }
            let Case { config, ops } = draw(
                profile,
                &mut runner,
                30,
                &SubjectSpec::Ring,
                &Oracle::model(),
            )
            .unwrap();
            let agreed = oracle.check(&config, &ops, &SubjectSpec::Ring).unwrap();
            assert!(agreed.is_none(), "ring against dense: {}", agreed.unwrap());
            if found.is_none() {
                found = oracle.check(&config, &ops, &faulty).unwrap();
            }
        }
    }
    let d = found.expect("roll-one-short differs from the correct cache");
    assert_eq!(d.kind, DivergenceKind::Differential);
    assert_eq!(d.subject, "fault:roll-one-short");
    assert!(
        d.summary()
            .ends_with("on fault:roll-one-short against cache"),
        "{}",
        d.summary()
    );
    // The replay command names the subject; the saved trace names its oracle.
    let mut d = d;
    let dir = std::env::temp_dir().join(format!("kvcheck-differential-{}", std::process::id()));
    d.save_in(&dir).unwrap();
    let command = d.replay_command().unwrap();
    assert!(
        command.ends_with("--subject fault:roll-one-short"),
        "{command}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(d.expected.starts_with("dense: "), "{}", d.expected);
}

/// The same faults through the out-of-process path: the zoo served by
/// `kvcheck serve` as an `exec:` subject (one process for the original and
/// every transformed run), caught by the same relation, minimized and
/// replayed.
#[test]
fn every_relation_catches_a_fault_through_an_exec_subject() {
    use kvcheck::engine::power::relations::catch_on;
    use std::time::Duration;
    // An exec: subject reports no capacity, so M1 leaves growth out there
    // and its one fault of the zoo cannot show (docs/relations.md).
    for (relation, fault) in BREAKS.into_iter().skip(1) {
        let command = format!(
            "exec:{} serve --subject fault:{fault}",
            env!("CARGO_BIN_EXE_kvcheck")
        );
        let subject = SubjectSpec::parse(&command).unwrap();
        let row = catch_on(
            &subject,
            &[relation],
            DEFAULT_INSTANCES,
            1,
            Duration::from_secs(120),
            400,
            40,
        );
        assert_caught(&row, relation, &format!("{fault} through exec"));
    }
}

/// Faults planted in a subject written in Python (`--fault NAME` of the
/// reference adapter) and the relation that must catch each: bugs of
/// caches whose contract the model may not know, so the relations are the
/// only judge.
const PYTHON_BREAKS: [(Relation, &str); 5] = [
    // sglang's D14: reset forgets positions but keeps their rows.
    (Relation::ResetIsFresh, "reset-keeps-rows"),
    // Cross-talk *into* the last row or head: caught only when the row it
    // reads from (row 0, head 0) is the one changed.
    (Relation::BatchRowsIndependent, "batch-crosstalk-last"),
    (Relation::HeadsIndependent, "head-crosstalk-last"),
    // Shows only after an eviction, on appends of three or more rows.
    (Relation::ChunkingInvariant, "long-append-hides-sink"),
    (Relation::RefusalPure, "refusal-moves-end"),
];

/// Each Python fault through a process: caught by its relation alone
/// within a few hundred drawn (and shaped) cases, minimized, and the
/// minimized trace replays from its file form.
#[test]
fn each_relation_catches_its_fault_of_a_python_subject() {
    use kvcheck::engine::power::relations::catch_on;
    use std::time::Duration;
    if crate::cli_support::python_missing() {
        return;
    }
    let adapter = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../adapters/reference_subject.py");
    for (relation, fault) in PYTHON_BREAKS {
        let command = format!("exec:python3 {} --fault {fault}", adapter.display());
        let subject = SubjectSpec::parse(&command).unwrap();
        let row = catch_on(
            &subject,
            &[relation],
            DEFAULT_INSTANCES,
            1,
            Duration::from_secs(120),
            400,
            40,
        );
        assert_caught(&row, relation, &format!("{fault} through exec"));
    }
}

/// M6 applies to packed caches (docs/contract.md §9): a zero-length write,
/// which the packed variant refuses, is refused in both runs (the probe
/// added after a zero-length write repeats it and is compared with it),
/// and nothing else changes; on the model and the shipped caches, on
/// every packed quantization.
#[test]
fn probe_pure_judges_packed_caches() {
    use kvcheck::check::record::{observe, Plan};
    use kvcheck::engine::relation::transform::{instances, Pair, Part};
    use kvcheck::{Config, Op, PackedPolicy, Quant, Write};
    for quant in [Quant::None, Quant::Int8, Quant::Int4] {
        let config = Config {
            sink: 1,
            head_dim: 3,
            packed: Some(PackedPolicy {
                keep_recent_chunks: 1,
                quant,
                pack_sink: false,
            }),
            ..Config::packed(6)
        };
        let ops = [
            Op::Write(Write::new(0, 2)),
            Op::Write(Write::new(2, 0)),
            Op::Write(Write::new(2, 3)),
            Op::Write(Write::new(2, 3)),
            Op::Write(Write::new(5, 2)),
            Op::Write(Write::new(7, 0)),
            Op::Rewind { to: 5 },
            Op::Write(Write::new(5, 0)),
        ];
        for subject in [SubjectSpec::Reference, SubjectSpec::Cache] {
            let mut work = Work::default();
            let found = check(
                &config,
                &ops,
                &subject,
                &[Relation::ProbePure],
                16,
                &mut work,
            )
            .expect("the subject runs the trace");
            assert!(
                found.is_none(),
                "{}",
                found
                    .map(|d| format!("{d}\n{}", d.trace))
                    .unwrap_or_default()
            );
            assert!(work.runs > 8, "M6 judged {} runs on {quant:?}", work.runs);
            assert!(work.judged.cases_of(Relation::ProbePure) > 0);
        }
        // The probe added after op 1 (a refused zero-length write at 2)
        // repeats it and is paired with it.
        let plan = Plan::of(&config, &ops);
        let run = observe(&SubjectSpec::Cache, &plan).expect("the cache runs the trace");
        let capabilities = SubjectSpec::Cache.capabilities().unwrap();
        let all = instances(Relation::ProbePure, &plan, &run, &capabilities, 64);
        let after_1 = all
            .iter()
            .find(|i| i.what == "a zero-length write at 2 added after op 1")
            .expect("a probe after op 1");
        assert!(after_1.pairs.contains(&Pair {
            original: 1,
            transformed: 2,
            part: Part::Whole,
        }));
    }
}

/// The reference cache opening `after_read` alone, so that every case
/// drawn for it trims after the read (docs/contract.md §3, trim modes).
fn after_read_reference(fault: Option<kvcheck::subject::Fault>) -> SubjectSpec {
    use kvcheck::subject::{Capabilities, Factory, ReferenceCache};
    let capabilities = Capabilities {
        trims: vec![kvcheck::Trim::AfterRead],
        ..Capabilities::full()
    };
    Factory::new("after-read", capabilities, move |config, device| {
        Ok(Box::new(match fault {
            None => ReferenceCache::new(config, device)?,
            Some(fault) => ReferenceCache::with_fault(config, device, fault)?,
        }))
    })
    .into()
}

/// Under `trim = "after_read"` every relation and invariant holds on the
/// reference model over random traces of every profile that fits (the
/// dense ones without growth), each judging some case, except M7, whose
/// domain is empty there (docs/relations.md).
#[test]
fn every_relation_holds_on_the_reference_model_trimming_after_the_read() {
    use kvcheck::engine::strategy::profile_support;
    let subject = after_read_reference(None);
    let capabilities = std::sync::Arc::new(subject.capabilities().expect("in process"));
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(17),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let mut work = Work::default();
    let mut drawn = 0;
    for (index, profile) in PROFILES.iter().enumerate() {
        if profile_support(profile, &capabilities).is_err() {
            assert!(
                ["growth", "packed"].contains(&profile.name),
                "{}",
                profile.name
            );
            continue;
        }
        for case in 0..cases() {
            let Case { config, ops } =
                domain::draw(&PROFILES[index], &capabilities, &mut runner, 30)
                    .expect("every dense profile draws");
            assert_eq!(config.trim, kvcheck::Trim::AfterRead);
            drawn += 1;
            let found = check(&config, &ops, &subject, &Relation::ALL, 4, &mut work)
                .expect("the subject runs every drawn trace");
            if let Some(d) = found {
                panic!("profile {} case {case}:\n{d}\n{}", profile.name, d.trace);
            }
        }
    }
    assert!(drawn > 0);
    for relation in Relation::ALL {
        let judged = work.judged.cases_of(relation);
        if relation == Relation::ChunkingInvariant {
            assert_eq!(judged, 0, "M7 has no domain under after_read");
        } else {
            assert!(judged > 0, "{relation} never judged under after_read");
        }
    }
}

/// A cache that claims `after_read` but trims before the read: the model
/// sees it at its second write, and so does `--oracle self` with no model
/// (I4, the width of the view before the write and the whole chunk), on
/// a fixed trace and on the cases the engines draw for it.
#[test]
fn a_trim_before_the_read_under_after_read_is_caught_by_model_and_self() {
    use kvcheck::check::divergence::DivergenceKind;
    use kvcheck::subject::Fault;
    let fault = SubjectSpec::Fault(Fault::TrimBeforeRead);
    let config = kvcheck::Config {
        sink: 1,
        trim: kvcheck::Trim::AfterRead,
        ..kvcheck::Config::dense(4)
    };
    let ops = vec![
        kvcheck::Op::Write(kvcheck::Write::new(0, 4)),
        kvcheck::Op::Write(kvcheck::Write::new(4, 2)),
    ];
    let trace = kvcheck::Trace::new(config.clone(), ops.clone()).with_model_expect();
    let report = kvcheck::engine::replay::replay(&trace, None, Some(fault.clone()), None);
    assert!(!report.passed(), "the model misses it");
    let clean = kvcheck::engine::replay::replay(&trace, None, Some(SubjectSpec::Reference), None);
    assert!(clean.passed(), "the reference cache diverges");
    let mut work = Work::default();
    let found = check(&config, &ops, &fault, &Relation::ALL, 4, &mut work)
        .expect("runs")
        .expect("--oracle self catches it");
    assert_eq!(found.kind, DivergenceKind::Relation(Relation::WindowWidth));
    assert!(
        check(
            &config,
            &ops,
            &SubjectSpec::Reference,
            &Relation::ALL,
            4,
            &mut work
        )
        .expect("runs")
        .is_none(),
        "the reference cache breaks a relation"
    );
    // On drawn cases, as `run --oracle self` draws them.
    let subject = after_read_reference(Some(Fault::TrimBeforeRead));
    let capabilities = std::sync::Arc::new(subject.capabilities().expect("in process"));
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(5),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let sinks = PROFILES.iter().position(|p| p.name == "sinks").unwrap();
    let caught = (0..50).find(|_| {
        let Case { config, ops } =
            domain::draw(&PROFILES[sinks], &capabilities, &mut runner, 30).expect("draws");
        check(&config, &ops, &subject, &Relation::ALL, 4, &mut work)
            .expect("runs")
            .is_some()
    });
    assert!(caught.is_some(), "no drawn case caught it");
}

/// The property suites in lockstep with the model, on the reference cache
/// opening `after_read` alone: every dense profile without growth runs in
/// that mode and reaches its events (those the mode can reach), and the
/// cache agrees with the model op by op, views bit for bit.
#[test]
fn the_property_suites_pass_on_the_reference_cache_trimming_after_the_read() {
    use kvcheck::subject::{Capabilities, ReferenceCache};
    let capabilities = Capabilities {
        trims: vec![kvcheck::Trim::AfterRead],
        ..Capabilities::full()
    };
    let report =
        kvcheck::engine::suite::assert_all("after-read", capabilities, |config, device| {
            assert_eq!(config.trim, kvcheck::Trim::AfterRead);
            Ok(Box::new(ReferenceCache::new(config, device)?))
        });
    let skipped: Vec<&str> = report.skipped.iter().map(|(name, _)| *name).collect();
    assert_eq!(skipped, ["growth", "packed"], "{report}");
}

/// The trim modes cross kvcheck-subject/1 (revision 4): `kvcheck serve`
/// of the reference cache declares both in its hello and passes the
/// after_read trace, the served fault that trims before the read fails
/// it, a served shipped cache declares nothing and the trace is skipped
/// there; and `--oracle self` catches the fault through the process.
#[test]
fn trim_modes_cross_the_protocol() {
    use kvcheck::check::divergence::DivergenceKind;
    use kvcheck::subject::ExecSubject;
    use std::sync::Arc;
    let served = |subject: &str| {
        let command = format!(
            "{} serve --subject {subject}",
            env!("CARGO_BIN_EXE_kvcheck")
        );
        SubjectSpec::Exec(Arc::new(ExecSubject::new(&command).expect("a command")))
    };
    let trace_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/trims/after_read.kvtrace.json");
    let trace = kvcheck::Trace::load(&trace_path).expect("the trace");
    let reference = served("reference");
    assert_eq!(
        reference.capabilities().unwrap().trims,
        kvcheck::Trim::ALL.to_vec()
    );
    let report = kvcheck::engine::replay::replay(&trace, None, Some(reference), None);
    assert!(
        report.passed() && report.skipped.is_none(),
        "{:?}",
        report.failure()
    );
    let fault = served("fault:trim-before-read");
    let report = kvcheck::engine::replay::replay(&trace, None, Some(fault.clone()), None);
    assert!(!report.passed());
    let cache = served("cache");
    assert_eq!(
        cache.capabilities().unwrap().trims,
        vec![kvcheck::Trim::BeforeRead]
    );
    let report = kvcheck::engine::replay::replay(&trace, None, Some(cache), None);
    assert!(report.skipped.is_some());
    let mut work = Work::default();
    let found = check(
        &trace.config,
        &trace.ops,
        &fault,
        &Relation::ALL,
        4,
        &mut work,
    )
    .expect("runs")
    .expect("--oracle self catches it through a process");
    assert_eq!(found.kind, DivergenceKind::Relation(Relation::WindowWidth));
}
