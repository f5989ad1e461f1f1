//! Scale: `--jobs` changes nothing but speed, and shards merge to the
//! totals of one unsharded run.

use std::path::Path;

use kvcheck::engine::explore::Explorer;
use kvcheck::engine::scale::Campaign;
use kvcheck::engine::strategy::PROFILES;
use kvcheck::report::shard::Shard;
use kvcheck::report::Report;
use kvcheck::subject::{Fault, SubjectSpec};
use kvcheck::Config;

use crate::cli_support::{kvcheck, path, scratch};

/// A report with its wall times zeroed: what must not depend on sharding.
fn counts(report: Report) -> Report {
    match report {
        Report::Run(mut r) => {
            r.elapsed_s = 0.0;
            r.shards.clear();
            for p in &mut r.profiles {
                p.busy_s = 0.0;
            }
            Report::Run(r)
        }
        Report::Explore(mut r) => {
            r.elapsed_s = 0.0;
            r.shards.clear();
            Report::Explore(r)
        }
        Report::Power(mut r) => {
            r.elapsed_s = 0.0;
            r.shards.clear();
            for cell in r.rows.iter_mut().flat_map(|row| &mut row.cells).flatten() {
                cell.seconds = 0.0;
            }
            Report::Power(r)
        }
    }
}

#[test]
fn run_shards_merge_to_the_unsharded_totals() {
    let dir = scratch("scale-run-shards");
    let common = ["run", "--seed", "11", "--cases", "7", "--time", "600"];
    let mut whole = common.to_vec();
    let all = path(&dir, "all.json");
    whole.extend(["--jobs", "1", "--json", &all]);
    let (code, whole_out, err) = kvcheck(&whole);
    assert_eq!(code, 0, "{whole_out}{err}");
    let (one, two) = (path(&dir, "1.json"), path(&dir, "2.json"));
    for (shard, file, jobs) in [("1/2", &one, "2"), ("2/2", &two, "1")] {
        let mut args = common.to_vec();
        args.extend(["--shard", shard, "--jobs", jobs, "--json", file]);
        let (code, out, err) = kvcheck(&args);
        assert_eq!(code, 0, "{out}{err}");
    }
    let merged = path(&dir, "merged.json");
    let (code, merged_out, err) = kvcheck(&["merge", &one, &two, "--json", &merged]);
    assert_eq!(code, 0, "{merged_out}{err}");
    let whole = Report::load(Path::new(&all)).unwrap();
    let Report::Run(run) = &whole else {
        panic!("a run report")
    };
    // 7 cases of every profile: 4 in shard 1, 3 in shard 2.
    assert_eq!(run.profiles.len(), PROFILES.len());
    assert!(run.profiles.iter().all(|p| p.cases == 7), "{run:?}");
    assert!(run.profiles.iter().all(|p| p.ops > 0));
    let one = Report::load(Path::new(&one)).unwrap();
    let Report::Run(first) = &one else {
        panic!("a run report")
    };
    assert!(first.profiles.iter().all(|p| p.cases == 4));
    assert_eq!(
        counts(Report::load(Path::new(&merged)).unwrap()),
        counts(whole)
    );
    // The merged table prints the same totals line and coverage.
    let tail = |s: &str| {
        s.lines()
            .skip_while(|l| !l.starts_with("event coverage"))
            .filter(|l| !l.contains(" ops checked in "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(tail(&merged_out), tail(&whole_out));
    let total = |s: &str| {
        s.lines()
            .find(|l| l.contains(" ops checked in "))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
    };
    assert_eq!(total(&merged_out), total(&whole_out));
    assert!(total(&whole_out).is_some());
}

#[test]
fn merge_refuses_reports_of_different_campaigns_and_flags_absent_shards() {
    let dir = scratch("scale-merge-errors");
    let (a, b) = (path(&dir, "a.json"), path(&dir, "b.json"));
    for (seed, file) in [("1", &a), ("2", &b)] {
        let (code, out, err) = kvcheck(&[
            "run",
            "--seed",
            seed,
            "--cases",
            "1",
            "--profile",
            "tiny",
            "--shard",
            "1/2",
            "--json",
            file,
        ]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, _, err) = kvcheck(&["merge", &a, &b]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("different campaigns"), "{err}");
    let (code, _, err) = kvcheck(&["merge", &a, &a]);
    assert_eq!(code, 2);
    assert!(err.contains("appears twice"), "{err}");
    let (code, out, _) = kvcheck(&["merge", &a]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("shards 2/2 are absent"), "{out}");
    let (code, _, err) = kvcheck(&["merge", &path(&dir, "missing.json")]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.json"), "{err}");
}

#[test]
fn bad_shards_and_jobs_are_input_errors() {
    for (flag, value, words) in [
        ("--shard", "0/0", "zero shards"),
        ("--shard", "3/2", "between 1 and 2"),
        ("--shard", "x", "not K/N"),
        ("--jobs", "0", "positive number"),
    ] {
        let (code, _, err) = kvcheck(&["explore", "--depth", "1", flag, value]);
        assert_eq!(code, 2, "explore {flag} {value}: {err}");
        let (code, _, err) = kvcheck(&["run", "--seed", "1", "--cases", "1", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(words), "{flag} {value}: {err}");
    }
    let (code, _, err) = kvcheck(&["run", "--cases", "1", "--shard", "1/2"]);
    assert_eq!(code, 2);
    assert!(err.contains("needs --seed"), "{err}");
    let (code, _, err) = kvcheck(&["explore", "--depth", "1", "--shard", "1/2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--grid"), "{err}");
}

#[test]
fn explore_grid_shards_merge_to_the_unsharded_totals() {
    let dir = scratch("scale-grid-shards");
    let grid = [
        "explore",
        "--grid",
        "--depth",
        "1",
        "--max-capacity",
        "2",
        "--no-sometimes",
    ];
    let all = path(&dir, "all.json");
    let mut whole = grid.to_vec();
    whole.extend(["--jobs", "2", "--json", &all]);
    let (code, out, err) = kvcheck(&whole);
    assert_eq!(code, 0, "{out}{err}");
    let mut files = Vec::new();
    for k in 1..=3 {
        let file = path(&dir, &format!("{k}.json"));
        let shard = format!("{k}/3");
        let mut args = grid.to_vec();
        args.extend(["--shard", &shard, "--jobs", "1", "--json", &file]);
        let (code, out, err) = kvcheck(&args);
        assert_eq!(code, 0, "{out}{err}");
        files.push(file);
    }
    let merged = path(&dir, "merged.json");
    let mut args = vec!["merge", "--no-sometimes", "--json", &merged];
    args.extend(files.iter().map(String::as_str));
    let (code, out, err) = kvcheck(&args);
    assert_eq!(code, 0, "{out}{err}");
    let whole = counts(Report::load(Path::new(&all)).unwrap());
    let Report::Explore(summary) = &whole else {
        panic!("an explore report")
    };
    assert!(summary.configs.len() > 3 && summary.states() > 0);
    assert_eq!(counts(Report::load(Path::new(&merged)).unwrap()), whole);
}

#[test]
fn explore_is_the_same_for_one_and_two_jobs() {
    let config = Config {
        sink: 1,
        ..Config::dense(3)
    };
    let one = Explorer::new(&config, SubjectSpec::Cache)
        .depth(3)
        .jobs(1)
        .assert_no_discovery();
    let two = Explorer::new(&config, SubjectSpec::Cache)
        .depth(3)
        .jobs(2)
        .assert_no_discovery();
    assert!(one.states > 1000, "{one}");
    assert_eq!(
        (
            one.states,
            one.distinct_states,
            one.transitions,
            one.replayed_steps
        ),
        (
            two.states,
            two.distinct_states,
            two.transitions,
            two.replayed_steps
        )
    );
    assert_eq!(one.coverage, two.coverage);
    for fault in [Fault::StaleRewrite, Fault::ForgetSinkAfterEviction] {
        let config = Config {
            sink: 1,
            ..Config::dense(2)
        };
        let found = |jobs| {
            Explorer::new(&config, SubjectSpec::Fault(fault))
                .depth(3)
                .jobs(jobs)
                .assert_discovery()
        };
        let (a, b) = (found(1), found(2));
        assert_eq!(a.trace.ops, b.trace.ops);
        assert_eq!((a.kind, a.step), (b.kind, b.step));
    }
}

#[test]
fn run_checks_the_same_cases_for_any_number_of_workers() {
    let campaign = |jobs| Campaign {
        seed: 3,
        profiles: vec![0, 8],
        max_ops: 32,
        cases: Some(6),
        budget: std::time::Duration::from_secs(600),
        jobs,
        shard: Shard::ALL,
        subject: SubjectSpec::Cache,
        oracle: kvcheck::engine::oracle::Oracle::model(),
    };
    let one = campaign(1).run(None).unwrap();
    let three = campaign(3).run(None).unwrap();
    for (a, b) in one.tallies.iter().zip(&three.tallies) {
        assert_eq!((a.cases, a.ops, &a.coverage), (b.cases, b.ops, &b.coverage));
    }
    // The first divergence is the lowest case index, whoever found it.
    let faulty = |jobs| Campaign {
        subject: SubjectSpec::Fault(Fault::StaleRewrite),
        oracle: kvcheck::engine::oracle::Oracle::model(),
        cases: Some(40),
        ..campaign(jobs)
    };
    let a = faulty(1)
        .run(None)
        .unwrap()
        .found
        .expect("the fault is found");
    let b = faulty(2)
        .run(None)
        .unwrap()
        .found
        .expect("the fault is found");
    assert_eq!((a.profile, a.case), (b.profile, b.case));
    assert_eq!(a.divergence.trace.ops, b.divergence.trace.ops);
}

/// Suites of one profile on two subjects, failing at the same time on two
/// threads, leave two whole traces: one per subject, each replaying to its
/// own failure.
#[test]
fn parallel_failing_suites_keep_their_own_traces() {
    use kvcheck::check::trace::Trace;
    use kvcheck::engine::strategy::profile;
    use kvcheck::engine::suite::{check_profile, SuiteSettings};
    let faults = [Fault::StaleRewrite, Fault::RefuseOverlap];
    let messages: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = faults
            .iter()
            .map(|&fault| {
                s.spawn(move || {
                    let settings = SuiteSettings {
                        cases: 64,
                        max_ops: 24,
                        seed: Some(5),
                        subject: SubjectSpec::Fault(fault),
                        oracle: kvcheck::engine::oracle::Oracle::model(),
                        ..SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
                    };
                    check_profile(profile("tiny").unwrap(), &settings)
                        .expect_err("the fault is found")
                        .to_string()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let traces: Vec<String> = messages
        .iter()
        .map(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("shrunk trace: "))
                .unwrap_or_else(|| panic!("no trace in {m}"))
                .to_string()
        })
        .collect();
    assert_ne!(traces[0], traces[1]);
    for (fault, trace) in faults.iter().zip(&traces) {
        assert!(trace.contains(fault.name()), "{trace}");
        let loaded = Trace::load(Path::new(trace)).expect("a whole trace");
        let divergence = kvcheck::engine::minimize::run_subject(
            &loaded.config,
            &loaded.ops,
            &SubjectSpec::Fault(*fault),
        );
        assert!(divergence.is_some(), "{trace} does not fail on {fault:?}");
    }
}

/// A suite's failure holds the structured divergence, whichever oracle
/// judged it: shrunk by proptest against the model, minimized against the
/// relations; in both, the saved trace fails again the same way.
#[test]
fn a_failing_suite_returns_the_divergence_it_saved() {
    use kvcheck::check::trace::Trace;
    use kvcheck::engine::minimize::Signature;
    use kvcheck::engine::oracle::Oracle;
    use kvcheck::engine::strategy::profile;
    use kvcheck::engine::suite::{check_profile, SuiteError, SuiteSettings};
    let dir = scratch("suite-structured-divergence");
    let subject = SubjectSpec::Fault(Fault::StaleRewrite);
    for oracle in [Oracle::model(), Oracle::relations(None)] {
        let settings = SuiteSettings {
            cases: 64,
            max_ops: 24,
            seed: Some(5),
            subject: subject.clone(),
            oracle: oracle.clone(),
            max_tests: 400,
            failures_dir: dir.clone(),
        };
        let error =
            check_profile(profile("tiny").unwrap(), &settings).expect_err("the fault is found");
        let SuiteError::Diverged(found) = error else {
            panic!("not a divergence: {error}");
        };
        assert_eq!(found.oracle, oracle.to_string());
        assert_eq!(found.profile, "tiny");
        assert!(found.case >= 1 && found.case <= 64, "case {}", found.case);
        let saved = found.trace.as_ref().expect("the trace is saved");
        assert!(saved.starts_with(&dir), "{}", saved.display());
        let trace = Trace::load(saved).expect("a whole trace");
        assert_eq!(trace.ops.len(), found.ops, "{found}");
        let again = oracle
            .check(&trace.config, &trace.ops, &subject)
            .expect("the subject runs it")
            .expect("the saved trace fails again");
        assert_eq!(
            Signature::of(&again),
            Signature::of(&found.divergence),
            "{found}"
        );
        let text = found.to_string();
        assert!(text.contains(&format!("against oracle {oracle}")), "{text}");
        assert!(text.contains(&found.divergence.summary()), "{text}");
    }
}

#[test]
fn the_first_divergence_stops_the_run_and_is_minimized_once() {
    let dir = scratch("scale-first-divergence");
    let out = dir.to_str().unwrap();
    let mut runs = Vec::new();
    for jobs in ["1", "2"] {
        let json = path(&dir, &format!("run-{jobs}.json"));
        let (code, stdout, err) = kvcheck(&[
            "run",
            "--seed",
            "4",
            "--cases",
            "50",
            "--subject",
            "fault:stale-rewrite",
            "--jobs",
            jobs,
            "--out",
            out,
            "--json",
            &json,
        ]);
        assert_eq!(code, 1, "{stdout}{err}");
        assert_eq!(stdout.matches("minimized: ").count(), 1, "{stdout}");
        assert!(stdout.contains("1 divergences; traces:"), "{stdout}");
        let Report::Run(report) = Report::load(Path::new(&json)).unwrap() else {
            panic!("a run report")
        };
        // One trace, the minimized one, which replays the failure alone
        // (a second trace of the same divergence would replay as a second
        // failure).
        assert_eq!(report.divergences.len(), 1, "{report:?}");
        let found = report.divergence.as_ref().expect("the run's divergence");
        assert_eq!(found.trace.as_ref(), Some(&report.divergences[0]));
        assert!(found.minimized_ops.is_some(), "{found:?}");
        for trace in &report.divergences {
            let (code, replayed, _) =
                kvcheck(&["replay", trace, "--subject", "fault:stale-rewrite"]);
            assert_eq!(code, 1, "{trace}: {replayed}");
        }
        let line = stdout
            .lines()
            .find(|l| l.starts_with("first divergence: "))
            .unwrap()
            .to_string();
        runs.push(line);
    }
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn a_grid_reports_the_same_discovery_for_any_jobs() {
    let dir = scratch("scale-grid-discovery");
    let out = dir.to_str().unwrap();
    let discovery = |jobs: &str| {
        let (code, stdout, err) = kvcheck(&[
            "explore",
            "--grid",
            "--depth",
            "2",
            "--max-capacity",
            "2",
            "--subject",
            "fault:forget-sink-after-eviction",
            "--jobs",
            jobs,
            "--out",
            out,
        ]);
        assert_eq!(code, 1, "{stdout}{err}");
        assert!(
            stdout.starts_with("discovery: shortest counterexample"),
            "{stdout}"
        );
        // The effort line (nodes expanded by every worker, seconds) depends
        // on scheduling; the counterexample and its report must not.
        let (first, rest) = stdout.split_once('\n').unwrap_or((&stdout, ""));
        let first = first.split_once(", after ").map_or(first, |(head, _)| head);
        format!("{first}\n{rest}")
    };
    assert_eq!(discovery("1"), discovery("2"));
}
