//! `kvcheck power` at scale: `--jobs` changes nothing but the seconds,
//! `--shard K/N` reports merge to the unsharded table, and bad arguments
//! are typed input errors.

use std::path::Path;

use kvcheck::report::{PowerReport, Report};

use crate::cli_support::{kvcheck, path, scratch};

fn power_report(file: &str) -> PowerReport {
    match Report::load(Path::new(file)).unwrap() {
        Report::Power(report) => report,
        other => panic!("{file}: a {} report", other.command()),
    }
}

/// The report without what depends on the machine: wall time, seconds per
/// cell and the shards it came from.
fn counts(mut report: PowerReport) -> PowerReport {
    report.elapsed_s = 0.0;
    report.shards.clear();
    for cell in report.rows.iter_mut().flat_map(|r| &mut r.cells).flatten() {
        cell.seconds = 0.0;
    }
    report
}

/// Two ring faults and the ring's control row, explored: three rows, so
/// shard 1/2 holds rows 0 and 2 and shard 2/2 row 1.
const TABLE: [&str; 11] = [
    "power",
    "--engine",
    "explore",
    "--cache",
    "ring",
    "--fault",
    "roll-one-short",
    "--fault",
    "pin-duplicated-in-view",
    "--time",
    "120",
];

#[test]
fn power_shards_merge_to_the_unsharded_table_for_any_jobs() {
    let dir = scratch("power-shards");
    let run = |extra: &[&str]| {
        let mut args = TABLE.to_vec();
        args.extend(extra);
        let (code, out, err) = kvcheck(&args);
        assert_eq!(code, 0, "{args:?}\n{out}{err}");
        out
    };
    let (one, two) = (path(&dir, "jobs-1.json"), path(&dir, "jobs-2.json"));
    let whole_out = run(&["--jobs", "1", "--json", &one]);
    run(&["--jobs", "2", "--json", &two]);
    let whole = counts(power_report(&one));
    assert_eq!(counts(power_report(&two)), whole);
    assert_eq!(
        whole.table,
        [
            "roll-one-short",
            "pin-duplicated-in-view",
            "control:cache:ring"
        ]
    );
    assert_eq!(whole.rows.len(), 3);
    assert!(whole.rows[..2].iter().all(|r| !r.control && r.caught()));
    assert!(whole.rows[2].control && !whole.rows[2].caught());
    assert!(whole.escaped().is_empty() && whole.false_positives().is_empty());

    let (first, second) = (path(&dir, "1.json"), path(&dir, "2.json"));
    run(&["--shard", "1/2", "--jobs", "2", "--json", &first]);
    run(&["--shard", "2/2", "--jobs", "1", "--json", &second]);
    let indices =
        |file: &str| -> Vec<usize> { power_report(file).rows.iter().map(|r| r.index).collect() };
    assert_eq!(indices(&first), [0, 2]);
    assert_eq!(indices(&second), [1]);
    let merged = path(&dir, "merged.json");
    let (code, merged_out, err) = kvcheck(&["merge", &second, &first, "--json", &merged]);
    assert_eq!(code, 0, "{merged_out}{err}");
    assert_eq!(counts(power_report(&merged)), whole);
    let kill_rate = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("| **kill rate**"))
            .map(str::to_string)
    };
    assert_eq!(kill_rate(&merged_out), kill_rate(&whole_out));
    assert_eq!(
        kill_rate(&whole_out).as_deref(),
        Some("| **kill rate** | 2/2 (100 %) |")
    );
    // One shard alone is a partial table, not a pass.
    let (code, out, _) = kvcheck(&["merge", &first]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("shards 2/2 are absent"), "{out}");
}

#[test]
fn merge_refuses_power_reports_of_different_tables_and_flags_false_positives() {
    let dir = scratch("power-merge-errors");
    let report = |extra: &[&str], name: &str| {
        let file = path(&dir, name);
        let mut args = TABLE.to_vec();
        args.extend(extra);
        args.extend(["--json", &file]);
        let (code, out, err) = kvcheck(&args);
        assert_eq!(code, 0, "{out}{err}");
        file
    };
    let a = report(&["--shard", "1/2"], "a.json");
    let b = report(&["--shard", "2/2", "--seed", "2"], "b.json");
    let (code, _, err) = kvcheck(&["merge", &a, &b]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("power reports of different campaigns"),
        "{err}"
    );
    let c = report(&["--shard", "2/2", "--no-control"], "c.json");
    let (code, _, err) = kvcheck(&["merge", &a, &c]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("different tables"), "{err}");
    let (code, _, err) = kvcheck(&["merge", &a, &a]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("appears twice"), "{err}");
    let run = path(&dir, "run.json");
    let (code, out, err) = kvcheck(&[
        "run",
        "--seed",
        "1",
        "--cases",
        "1",
        "--profile",
        "tiny",
        "--shard",
        "2/2",
        "--json",
        &run,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = kvcheck(&["merge", &a, &run]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a power report and a run report"), "{err}");

    // A divergence on the control row is a false positive: the table
    // fails even though every fault was caught.
    let mut lying = power_report(&a);
    let control = lying.rows.iter_mut().find(|r| r.control).unwrap();
    let cell = control.cells[0].as_mut().unwrap();
    cell.caught = true;
    cell.note = "a divergence on the correct cache".into();
    let lying_file = path(&dir, "lying.json");
    Report::Power(lying).save(Path::new(&lying_file)).unwrap();
    let whole = report(&["--shard", "2/2"], "whole-2.json");
    let (code, out, err) = kvcheck(&["merge", &lying_file, &whole]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("FALSE POSITIVE"), "{out}");
    assert!(
        err.contains("an engine diverged on a correct cache: control:cache:ring"),
        "{err}"
    );
}

#[test]
fn power_arguments_are_typed_input_errors() {
    let explore = ["--engine", "explore", "--fault", "gap-write-accepted"];
    for (args, words) in [
        (&["--shard", "0/2"][..], "K must be between 1 and 2"),
        (&["--shard", "3/2"], "K must be between 1 and 2"),
        (&["--shard", "1/0"], "zero shards"),
        (&["--shard", "two"], "not K/N"),
        (&["--jobs", "0"], "positive number of workers"),
        (&["--cache", "gpu"], "unknown cache \"gpu\""),
        (&["--time", "0"], "--time must be a positive number"),
    ] {
        let mut all = vec!["power"];
        all.extend(explore);
        all.extend(args);
        let (code, out, err) = kvcheck(&all);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    for (args, words) in [
        (
            &["--engine", "explore", "--fault", "no-such-bug"][..],
            "unknown fault \"no-such-bug\"",
        ),
        (
            &["--engine", "magic", "--fault", "gap-write-accepted"],
            "unknown engine \"magic\"",
        ),
        (
            &[
                "--engine",
                "explore",
                "--cache",
                "ring",
                "--fault",
                "int4-nibbles-swapped",
            ],
            "has no packed variant",
        ),
    ] {
        let mut all = vec!["power"];
        all.extend(args);
        let (code, out, err) = kvcheck(&all);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

#[test]
fn power_json_on_standard_output_is_the_report_alone() {
    let (code, out, err) = kvcheck(&[
        "power",
        "--engine",
        "explore",
        "--fault",
        "gap-write-accepted",
        "--no-control",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let Report::Power(report) = serde_json::from_str(&out).expect("only JSON on stdout") else {
        panic!("a power report")
    };
    assert_eq!(report.cache, "shipped");
    assert_eq!(report.rows.len(), 1);
    assert!(report.rows[0].caught());
    // A list of engines gives those columns, in that order, once each.
    let (code, out, err) = kvcheck(&[
        "power",
        "--engine",
        "explore,suites,explore",
        "--fault",
        "gap-write-accepted",
        "--no-control",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let Report::Power(report) = serde_json::from_str(&out).unwrap() else {
        panic!("a power report")
    };
    assert_eq!(report.engines, ["explore", "suites"]);
    assert!(report.rows[0]
        .cells
        .iter()
        .all(|c| c.as_ref().unwrap().caught));
}
