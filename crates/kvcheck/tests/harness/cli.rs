//! The `kvcheck` binary: replay and expect on real files, and no input can
//! make it panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli_support::{kvcheck, scratch};

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

#[test]
fn replay_of_the_vectors_passes() {
    let (code, stdout, _) = kvcheck(&["replay", vectors().to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("21 passed, 0 failed"), "{stdout}");
}

#[test]
fn replay_prints_the_step_table_with_ranges() {
    let file = vectors().join("append_roll_rewrite.kvtrace.json");
    let (code, stdout, _) = kvcheck(&["replay", file.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("write 8+4"), "{stdout}");
    assert!(stdout.contains("ok G=12 visible 0..2 6..12"), "{stdout}");
}

#[test]
fn a_wrong_expect_fails_naming_the_step() {
    let dir = scratch("wrong_expect");
    let text = std::fs::read_to_string(vectors().join("gap_write.kvtrace.json")).unwrap();
    let broken = text.replacen("non_sequential", "evicted", 1);
    let file = dir.join("broken.kvtrace.json");
    std::fs::write(&file, broken).unwrap();
    let (code, stdout, _) = kvcheck(&["replay", file.to_str().unwrap(), "--model-only"]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains(
            "step 1 (write 6+2): expect says err evicted, the model gives err non_sequential"
        ),
        "{stdout}"
    );
}

#[test]
fn a_divergence_names_the_step_and_the_replay_command() {
    let dir = scratch("divergence");
    let file = vectors().join("append_roll_rewrite.kvtrace.json");
    let (code, stdout, _) = kvcheck(&[
        "replay",
        file.to_str().unwrap(),
        "--subject",
        "fault:stale-rewrite",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("values divergence at step 3 (write 8+4)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("holds op 2 at position 8 head 0, expected op 3 at position 8 head 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reproduce: cargo run --release -p kvcheck -- replay"),
        "{stdout}"
    );
    let saved: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(saved.len(), 1);
}

#[test]
fn json_output_parses() {
    let file = vectors().join("evict.kvtrace.json");
    let (code, stdout, _) = kvcheck(&["replay", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value[0]["passed"], true);
    assert_eq!(
        value[0]["steps"][3]["outcome"],
        serde_json::json!({"err": "evict_too_many"})
    );
}

#[test]
fn expect_fills_expect_equal_to_the_vectors() {
    for entry in std::fs::read_dir(vectors()).unwrap() {
        let path = entry.unwrap().path();
        let (code, stdout, stderr) = kvcheck(&["expect", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{stderr}");
        let ours: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let theirs: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(ours["expect"], theirs["expect"], "{}", path.display());
    }
}

#[test]
fn garbage_never_panics() {
    let dir = scratch("garbage");
    let mut seed = 0x1234_5678_u64;
    let valid = std::fs::read(vectors().join("pin_shot_sink.kvtrace.json")).unwrap();
    for i in 0..40 {
        let mut bytes = valid.clone();
        for _ in 0..(i % 7 + 1) {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (seed >> 33) as usize % bytes.len();
            bytes[at] = (seed >> 20) as u8;
        }
        if i % 5 == 0 {
            bytes.truncate((seed >> 40) as usize % bytes.len());
        }
        let file = dir.join(format!("g{i}.kvtrace.json"));
        std::fs::write(&file, &bytes).unwrap();
        for args in [
            vec!["replay", file.to_str().unwrap(), "-q"],
            vec!["expect", file.to_str().unwrap()],
        ] {
            let (code, stdout, stderr) = kvcheck(&args);
            assert!(
                matches!(code, 0..=2),
                "exit {code} for {args:?}\n{stdout}\n{stderr}"
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    let (code, _, stderr) = kvcheck(&["replay", "/nonexistent/file.kvtrace.json"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("/nonexistent/file.kvtrace.json"),
        "{stderr}"
    );
    let (code, _, _) = kvcheck(&["replay", "x", "--subject", "fault:nope"]);
    assert_eq!(code, 2);
}

#[test]
fn explain_html_writes_the_page_of_the_docs_example() {
    let dir = scratch("explain_html");
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/explain-example.kvtrace.json");
    let page = dir.join("explain.html");
    let (code, stdout, stderr) = kvcheck(&[
        "explain",
        example.to_str().unwrap(),
        "--subject",
        "fault:stale-rewrite",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("values divergence at step 7"), "{stdout}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("id=\"divergence\""), "{html}");
    assert_eq!(html.matches("<tr class=\"step").count(), 8, "{html}");
}

#[test]
fn an_explore_discovery_says_how_much_it_searched() {
    let out = scratch("explore_discovery");
    let (code, stdout, stderr) = kvcheck(&[
        "explore",
        "--depth",
        "3",
        "--subject",
        "fault:stale-rewrite",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    // Breadth first over C=4 S=1: the root and four one-op states are
    // expanded whole before the one whose child is the counterexample.
    assert!(
        stdout.contains("discovery: shortest counterexample (2 ops), after 5 nodes expanded in "),
        "{stdout}"
    );
}

/// `exec:` with the Python reference subject (needs `python3`).
fn python_subject(options: &str) -> Option<String> {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not on PATH; install it to run the exec-subject CLI tests");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(options);
    Some(format!("exec:python3 {}", script.display()))
}

#[test]
fn every_engine_takes_an_exec_subject_with_its_options() {
    let Some(subject) = python_subject("../../adapters/reference_subject.py") else {
        return;
    };
    let vectors = vectors();
    let (code, stdout, stderr) = kvcheck(&[
        "replay",
        vectors.to_str().unwrap(),
        "--quiet",
        "--subject",
        &subject,
        "--subject-timeout",
        "5",
        "--exact-kinds",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("21 passed, 0 failed"), "{stdout}");
    assert!(
        stderr.contains("timeout 5s; error kinds compared exactly"),
        "{stderr}"
    );
    let (code, stdout, stderr) = kvcheck(&[
        "explore",
        "--depth",
        "2",
        "--capacity",
        "2",
        "--sink",
        "1",
        "--no-sometimes",
        "--subject",
        &subject,
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("refusals compared as refused"), "{stderr}");
    // A planted fault: found by run, minimized, explained.
    let faulty = format!("{subject} --fault stale-rewrite");
    let out = scratch("exec_run");
    let (code, stdout, _) = kvcheck(&[
        "run",
        "--profile",
        "tiny",
        "--time",
        "20",
        "--cases",
        "50",
        "--seed",
        "1",
        "--subject",
        &faulty,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let saved = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let small = out.join("small.kvtrace.json");
    let (code, _, stderr) = kvcheck(&[
        "minimize",
        saved.to_str().unwrap(),
        "-o",
        small.to_str().unwrap(),
        "--subject",
        &faulty,
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("kept:   values at step 1"), "{stderr}");
    let (code, stdout, _) = kvcheck(&["explain", small.to_str().unwrap(), "--subject", &faulty]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("values divergence"), "{stdout}");
    assert!(
        stdout.contains("slots   (not reported by the subject)"),
        "{stdout}"
    );
    let corpus = scratch("exec_save");
    let (code, stdout, _) = kvcheck(&[
        "save",
        saved.to_str().unwrap(),
        "--name",
        "stale",
        "--dir",
        corpus.to_str().unwrap(),
        "--subject",
        &faulty,
    ]);
    assert_eq!(code, 0, "{stdout}");
    let stored = kvcheck::check::trace::Trace::load(&corpus.join("stale.kvtrace.json")).unwrap();
    assert_eq!(stored.ops.len(), 2, "minimized before saving: {stdout}");
    // A grid keeps only the configs the subject can express.
    let narrow = python_subject("tests/subjects/misbehaving_subject.py").unwrap();
    let narrow = format!("{narrow} --caps dense-writes-only");
    let (code, stdout, stderr) = kvcheck(&[
        "explore",
        "--grid",
        "--depth",
        "1",
        "--small-alphabet",
        "--max-capacity",
        "2",
        "--no-sometimes",
        "--subject",
        &narrow,
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("skipped 44 of 50 grid configs: unsupported by the subject"),
        "{stderr}"
    );
    // A bad timeout is refused up front.
    let (code, _, stderr) = kvcheck(&[
        "replay",
        vectors.to_str().unwrap(),
        "--subject-timeout",
        "-1",
    ]);
    assert_eq!(code, 2, "{stderr}");
}

/// Every printed replay command runs as printed, once per subject kind that
/// can diverge (a fault of the reference cache, a zoo fault on the shipped
/// cache, on the generic path and on the ring, an `exec:` process): the
/// subject a report names parses back, and replaying reproduces the
/// divergence.
#[test]
fn every_printed_replay_command_reproduces_its_divergence() {
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../adapters/reference_subject.py");
    let exec = format!("exec:python3 {} --fault stale-rewrite", adapter.display());
    let subjects = [
        "fault:stale-rewrite",
        "fault:roll-one-short",
        "fault:roll-one-short@generic",
        "fault:roll-one-short@ring",
        exec.as_str(),
    ];
    for (i, subject) in subjects.iter().enumerate() {
        let dir = scratch(&format!("printed_command_{i}"));
        let (code, stdout, _) = kvcheck(&[
            "replay",
            vectors().to_str().unwrap(),
            "--subject",
            subject,
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 1, "{subject}: {stdout}");
        let command = stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("reproduce: "))
            .unwrap_or_else(|| panic!("{subject}: no replay command\n{stdout}"));
        let words = shell_words::split(command).expect("the command is valid shell");
        let prefix = ["cargo", "run", "--release", "-p", "kvcheck", "--"];
        assert_eq!(words[..prefix.len()], prefix, "{command}");
        let args: Vec<&str> = words[prefix.len()..].iter().map(String::as_str).collect();
        let (code, replayed, stderr) = kvcheck(&args);
        assert_eq!(code, 1, "{command} did not reproduce:\n{replayed}{stderr}");
        assert!(
            replayed.contains("divergence at step"),
            "{command}:\n{replayed}"
        );
    }
}

/// A knob set to something it cannot hold stops every command with an
/// error naming the variable and its value; it is never taken as the
/// default.
#[test]
fn a_bad_setting_is_an_input_error_naming_the_variable() {
    for (var, value) in [
        ("KVCHECK_JOBS", "four"),
        ("KVCHECK_MAX_TESTS", "0"),
        ("KVCHECK_SUBJECT_TIMEOUT", "-3"),
        ("KVCHECK_EXACT_KINDS", "sure"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvcheck"))
            .args(["replay", vectors().to_str().unwrap(), "--quiet"])
            .env_remove("RUST_BACKTRACE")
            .env(var, value)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert!(
            stderr.contains(&format!("{var}=\"{value}\"")),
            "{var}={value}: {stderr}"
        );
    }
}

#[test]
fn a_differential_oracle_narrows_the_profiles_and_ops_to_what_both_express() {
    // The oracle takes dense writes only: profiles it cannot open are
    // skipped with its name, and the others draw only writes (an evict
    // would leave the case unjudged and stop the run).
    let Some(oracle) =
        python_subject("tests/subjects/misbehaving_subject.py --caps dense-writes-only")
    else {
        return;
    };
    let (code, stdout, stderr) = kvcheck(&[
        "run",
        "--subject",
        "reference",
        "--oracle",
        &oracle,
        "--profile",
        "tiny",
        "--profile",
        "window",
        "--cases",
        "20",
        "--seed",
        "3",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("skipped: by the oracle exec:python3")
            && stdout.contains("profile window (window below capacity"),
        "{stdout}"
    );
    assert!(stdout.contains("no divergence"), "{stdout}{stderr}");
}
