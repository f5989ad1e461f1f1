//! Where a report sends its reader: the replay command spelled for where
//! kvcheck runs (cargo's in a checkout of the workspace, the installed
//! `kvcheck` anywhere else), the folder traces go to (never a `target/`
//! that cargo did not make), and one trace per divergence: `replay`
//! writes no copy, a run and a triage keep the minimized trace only.

use std::path::{Path, PathBuf};
use std::process::Command;

use kvcheck::report::Report;

/// Runs the binary in `cwd`, without the variables that would change what
/// it prints or where it writes: exit status, stdout, stderr.
fn kvcheck_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvcheck"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_BACKTRACE")
        .env_remove("KVCHECK_JOBS")
        .env_remove("KVCHECK_MAX_TESTS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A fresh folder under the system's temporary folder, outside any
/// checkout of the workspace.
fn outside(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvcheck-reproduce-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let checkout = dir
        .ancestors()
        .any(|d| d.join("crates/kvcheck/Cargo.toml").is_file());
    assert!(!checkout, "{} lies in a checkout", dir.display());
    dir
}

/// The trace files directly in `dir` (none when it does not exist).
fn traces(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".kvtrace.json"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// The last `reproduce:` line's command.
fn reproduce(stdout: &str) -> String {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("reproduce: "))
        .unwrap_or_else(|| panic!("no reproduce line:\n{stdout}"))
        .to_string()
}

/// A run that stops on its first divergence (the tiny profile on a cache
/// that keeps stale rows), writing its JSON report to `json`.
fn stopped_run(cwd: &Path, json: &str) -> (String, String) {
    let (code, stdout, stderr) = kvcheck_in(
        cwd,
        &[
            "run",
            "--subject",
            "fault:stale-rewrite",
            "--profile",
            "tiny",
            "--seed",
            "3",
            "--cases",
            "200",
            "--jobs",
            "1",
            "--json",
            json,
        ],
    );
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn outside_a_checkout_the_report_prints_the_installed_command_and_no_target_is_made() {
    let dir = outside("installed");
    let (stdout, _) = stopped_run(&dir, "report.json");
    assert!(!dir.join("target").exists(), "a target folder was made");
    assert!(!stdout.contains("cargo run"), "{stdout}");
    let saved = traces(&dir.join("kvcheck-failures"));
    assert_eq!(saved.len(), 1, "one trace, the minimized one: {saved:?}");
    let name = saved[0].file_name().unwrap().to_str().unwrap();
    let command = reproduce(&stdout);
    assert_eq!(
        command,
        format!("kvcheck replay kvcheck-failures/{name} --subject fault:stale-rewrite")
    );
    // The JSON report carries the same divergence: what `kvcheck.check`
    // reads instead of the printed text.
    let Report::Run(report) = Report::load(&dir.join("report.json")).unwrap() else {
        panic!("a run report")
    };
    let found = report
        .divergence
        .expect("the divergence that stopped the run");
    assert_eq!(
        found.trace.as_deref(),
        Some(format!("kvcheck-failures/{name}").as_str())
    );
    assert_eq!(found.reproduce.as_deref(), Some(command.as_str()));
    assert!(
        found.report.contains("──── kvcheck: values divergence"),
        "{}",
        found.report
    );
    assert!(found.report.contains(&command), "{}", found.report);
    assert!(
        found.minimized_ops.is_some_and(|m| m <= found.ops),
        "{found:?}"
    );
    assert_eq!(report.divergences, vec![format!("kvcheck-failures/{name}")]);
    assert_eq!(report.min_judged, 100);
    // The command works as printed, with the installed binary for `kvcheck`,
    // and the replay leaves the folder as it was.
    let words = shell_words::split(&command).unwrap();
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let (code, replayed, stderr) = kvcheck_in(&dir, &args);
    assert_eq!(code, 1, "{replayed}{stderr}");
    assert!(replayed.contains("values divergence at step"), "{replayed}");
    assert_eq!(reproduce(&replayed), command, "{replayed}");
    assert_eq!(
        traces(&dir.join("kvcheck-failures")),
        saved,
        "replay wrote a copy"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn in_a_checkout_the_report_prints_cargo_and_traces_go_to_its_target() {
    let root = outside("checkout");
    std::fs::create_dir_all(root.join("crates/kvcheck")).unwrap();
    std::fs::write(root.join("Cargo.toml"), "[workspace]\n").unwrap();
    std::fs::write(root.join("crates/kvcheck/Cargo.toml"), "[package]\n").unwrap();
    let below = root.join("examples/cache");
    std::fs::create_dir_all(&below).unwrap();
    let (stdout, _) = stopped_run(&below, "report.json");
    let saved = traces(&root.join("target/kvcheck-failures"));
    assert_eq!(saved.len(), 1, "{saved:?}\n{stdout}");
    let name = saved[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(
        reproduce(&stdout),
        format!(
            "cargo run --release -p kvcheck -- replay ../../target/kvcheck-failures/{name} --subject fault:stale-rewrite"
        )
    );
    assert!(!below.join("target").exists() && !below.join("kvcheck-failures").exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn replay_writes_nothing_and_names_the_file_it_replayed() {
    let dir = outside("replay");
    let vector = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/append_roll_rewrite.kvtrace.json")
        .canonicalize()
        .unwrap();
    let file = vector.to_str().unwrap();
    let (code, stdout, _) = kvcheck_in(&dir, &["replay", file, "--subject", "fault:stale-rewrite"]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(
        reproduce(&stdout),
        format!(
            "kvcheck replay {} --subject fault:stale-rewrite",
            shell_words::quote(file)
        )
    );
    let made: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(made.is_empty(), "replay wrote {made:?}");
    // Asked for, it saves the failing prefix, once, and names that.
    let (code, stdout, _) = kvcheck_in(
        &dir,
        &[
            "replay",
            file,
            "--subject",
            "fault:stale-rewrite",
            "--out",
            "kept",
        ],
    );
    assert_eq!(code, 1);
    let kept = traces(&dir.join("kept"));
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        reproduce(&stdout).starts_with("kvcheck replay kept/"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keep_going_leaves_one_trace_per_finding() {
    let dir = outside("triage");
    let (code, stdout, stderr) = kvcheck_in(
        &dir,
        &[
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
            "--json",
            "report.json",
        ],
    );
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let Report::Run(report) = Report::load(&dir.join("report.json")).unwrap() else {
        panic!("a run report")
    };
    let n = report.findings.len();
    assert!(n >= 2, "{:#?}", report.findings);
    let saved = traces(&dir.join("kvcheck-failures"));
    assert_eq!(saved.len(), n, "one trace per finding: {saved:?}");
    for f in &report.findings {
        let minimized = f.minimized_trace.as_ref().expect("minimized and saved");
        assert!(dir.join(minimized).is_file(), "{minimized}");
        assert_eq!(f.trace, None, "the trace as met is not kept: {f:?}");
    }
    let (code, replayed, _) = kvcheck_in(
        &dir,
        &[
            "replay",
            "kvcheck-failures",
            "-q",
            "--subject",
            "fault:head-start-ignored",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        replayed.contains(&format!("0 passed, {n} failed")),
        "{replayed}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
