//! Triage mode: every divergence of a campaign grouped by signature, one
//! minimized representative per signature, the same for any number of
//! workers, and shard reports that merge to the unsharded table.

use std::time::Duration;

use crate::cli_support::{kvcheck, path, scratch};
use kvcheck::engine::explore::Explorer;
use kvcheck::engine::scale::Campaign;
use kvcheck::engine::strategy::PROFILES;
use kvcheck::engine::triage::settle;
use kvcheck::report::findings::{merge_findings, FindingReport, TriageSignature};
use kvcheck::report::shard::Shard;
use kvcheck::report::Report;
use kvcheck::subject::{Fault, SubjectSpec};
use kvcheck::Config;

fn profile(name: &str) -> usize {
    PROFILES.iter().position(|p| p.name == name).unwrap()
}

fn campaign(subject: SubjectSpec, profiles: &[&str], cases: u64, jobs: usize) -> Campaign {
    Campaign {
        seed: 5,
        profiles: profiles.iter().map(|p| profile(p)).collect(),
        max_ops: 24,
        cases: Some(cases),
        budget: Duration::from_secs(600),
        jobs,
        shard: Shard::ALL,
        subject,
        oracle: kvcheck::engine::oracle::Oracle::model(),
    }
}

fn head_start_ignored() -> SubjectSpec {
    "fault:head-start-ignored".parse().unwrap()
}

#[test]
fn one_bug_gives_one_signature_met_many_times() {
    let outcome = campaign(SubjectSpec::Fault(Fault::StaleRewrite), &["tiny"], 40, 2)
        .run_triage(None)
        .unwrap();
    assert!(outcome.found.is_none(), "triage mode never stops early");
    assert_eq!(outcome.tallies[0].cases, 40, "every case ran");
    let findings = outcome.triage.findings();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = findings[0];
    assert!(f.count > 1, "one signature, met {} times", f.count);
    assert_eq!(f.count, outcome.tallies[0].divergent);
    assert_eq!(
        (f.signature.kind.as_str(), f.signature.op.as_str()),
        ("values", "write")
    );
    assert_eq!(f.signature.shape, "an older write where its write");
}

#[test]
fn two_bugs_give_two_signatures() {
    // head-start-ignored writes a head range from head 0: a partial range
    // lands on the wrong heads (values), and a range as wide as the cache
    // but starting above 0 is accepted (outcome).
    let outcome = campaign(head_start_ignored(), &["multi-head"], 60, 2)
        .run_triage(None)
        .unwrap();
    let signatures: Vec<TriageSignature> = outcome
        .triage
        .findings()
        .iter()
        .map(|f| f.signature.clone())
        .collect();
    let has = |kind: &str, shape: &str| {
        signatures
            .iter()
            .any(|s| s.kind == kind && s.op == "write" && s.shape.starts_with(shape))
    };
    assert!(
        has("outcome", "err head_range (end past the last head) → "),
        "{signatures:#?}"
    );
    assert!(
        has("values", "another head's write where its write"),
        "{signatures:#?}"
    );
}

#[test]
fn the_representatives_do_not_depend_on_the_workers() {
    let run = |jobs| {
        campaign(head_start_ignored(), &["multi-head", "tiny"], 30, jobs)
            .run_triage(None)
            .unwrap()
            .triage
    };
    let (one, three) = (run(1), run(3));
    let key = |t: &kvcheck::engine::triage::Triage| {
        t.findings()
            .iter()
            .map(|f| {
                (
                    f.signature.clone(),
                    f.count,
                    f.key,
                    f.divergence.trace.ops.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&one), key(&three));
}

#[test]
fn explore_keeps_going_and_skips_states_past_a_divergence() {
    let config = Config {
        heads: 2,
        ..Config::dense(2)
    };
    let report = Explorer::new(&config, head_start_ignored())
        .depth(2)
        .keep_going(true)
        .run()
        .expect("triage mode reports findings, not an error");
    assert_eq!(report.depth_completed, 2, "the search went to its depth");
    assert!(report.triage.len() >= 2, "{:#?}", report.triage.findings());
    // The first representative is the shortest counterexample plain
    // exploration reports.
    let plain = Explorer::new(&config, head_start_ignored())
        .depth(2)
        .assert_discovery();
    let first = report.triage.findings()[0];
    assert_eq!(first.divergence.trace.ops, plain.trace.ops);
    let single = Explorer::new(&config, SubjectSpec::Fault(Fault::StaleRewrite))
        .depth(3)
        .keep_going(true)
        .run()
        .unwrap();
    assert_eq!(single.triage.len(), 1, "{:#?}", single.triage.findings());
    assert!(single.triage.total() > 1);
}

#[test]
fn settle_minimizes_each_finding_keeping_its_signature() {
    let outcome = campaign(head_start_ignored(), &["multi-head"], 30, 2)
        .run_triage(None)
        .unwrap();
    let dir = scratch("triage-settle");
    let subject = head_start_ignored();
    let mut lines = 0;
    let model = kvcheck::engine::oracle::Oracle::model();
    let findings = settle(&outcome.triage, &subject, &model, &dir, 500, |_| lines += 1);
    assert_eq!(lines, findings.len());
    assert_eq!(findings.len(), outcome.triage.len());
    for f in &findings {
        let small = f.minimized_ops.expect("every finding minimizes");
        assert!(small <= f.ops, "{f:?}");
        let path = f.minimized_trace.as_ref().expect("saved");
        let trace = kvcheck::check::trace::Trace::load(std::path::Path::new(path)).unwrap();
        let d = kvcheck::engine::minimize::run_subject(&trace.config, &trace.ops, &subject)
            .expect("the minimized trace still diverges");
        assert_eq!(TriageSignature::of(&d), f.signature, "{path}");
    }
}

fn finding(shape: &str, count: u64, key: u64) -> FindingReport {
    FindingReport {
        signature: TriageSignature {
            kind: "outcome".into(),
            variant: "dense".into(),
            op: "write".into(),
            shape: shape.into(),
        },
        count,
        key,
        first: format!("case {key}"),
        summary: String::new(),
        ops: 3,
        minimized_ops: Some(1),
        trace: None,
        minimized_trace: None,
    }
}

#[test]
fn merged_findings_add_counts_and_keep_the_earliest_representative() {
    let mut a = vec![finding("x", 2, 7), finding("y", 1, 3)];
    merge_findings(&mut a, vec![finding("x", 5, 4), finding("z", 1, 9)]);
    let got: Vec<(&str, u64, u64)> = a
        .iter()
        .map(|f| (f.signature.shape.as_str(), f.count, f.key))
        .collect();
    assert_eq!(got, vec![("y", 1, 3), ("x", 7, 4), ("z", 1, 9)]);
}

#[test]
fn cli_shards_merge_to_the_unsharded_findings() {
    let dir = scratch("triage-cli");
    let common = [
        "run",
        "--subject",
        "fault:head-start-ignored",
        "--profile",
        "multi-head",
        "--seed",
        "9",
        "--cases",
        "24",
        "--jobs",
        "2",
        "--keep-going",
        "--max-tests",
        "200",
    ];
    let report = |args: &[&str], json: &str| {
        let out = dir.join(json.replace(".json", ""));
        let mut all: Vec<&str> = common.to_vec();
        all.extend(args);
        let json_path = path(&dir, json);
        let out_dir = out.to_str().unwrap().to_string();
        all.extend(["--json", &json_path, "--out", &out_dir]);
        let (code, stdout, stderr) = kvcheck(&all);
        assert_eq!(code, 1, "{stdout}\n{stderr}");
        assert!(stdout.contains("distinct findings in"), "{stdout}");
        assert!(stderr.contains("new finding #1:"), "{stderr}");
        match Report::load(std::path::Path::new(&json_path)).unwrap() {
            Report::Run(r) => r,
            other => panic!("a run report, not {}", other.command()),
        }
    };
    let whole = report(&[], "whole.json");
    let one = report(&["--shard", "1/2"], "one.json");
    let two = report(&["--shard", "2/2"], "two.json");
    assert!(whole.findings.len() >= 2, "{:#?}", whole.findings);
    let (code, stdout, _) = kvcheck(&[
        "merge",
        &path(&dir, "one.json"),
        &path(&dir, "two.json"),
        "--json",
        &path(&dir, "merged.json"),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("distinct findings in"), "{stdout}");
    let Report::Run(merged) = Report::load(&dir.join("merged.json")).unwrap() else {
        panic!("a run report")
    };
    let sig = |r: &kvcheck::report::RunReport| {
        r.findings
            .iter()
            .map(|f| (f.signature.clone(), f.count, f.key, f.ops))
            .collect::<Vec<_>>()
    };
    assert_eq!(sig(&merged), sig(&whole));
    assert!(one.findings.len() + two.findings.len() >= merged.findings.len());
}

#[test]
fn from_fuzz_triages_a_corpus_directory() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dense_lockstep");
    let out = scratch("triage-from-fuzz");
    let (code, stdout, stderr) = kvcheck(&[
        "from-fuzz",
        "dense_lockstep",
        corpus.to_str().unwrap(),
        "--keep-going",
        "--subject",
        "fault:refuse-overlap",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 distinct findings in"), "{stdout}");
    assert!(stdout.contains("ok → err non_sequential"), "{stdout}");
    // The correct cache agrees on the whole corpus.
    let (code, stdout, stderr) = kvcheck(&[
        "from-fuzz",
        "dense_lockstep",
        corpus.to_str().unwrap(),
        "--keep-going",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("0 distinct findings in 0 divergences"),
        "{stdout}"
    );
}
