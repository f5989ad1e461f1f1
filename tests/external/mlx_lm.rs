//! mlx-lm's real caches through `adapters/mlx-lm/subject.py`, and its
//! server through `adapters/mlx-lm/server_subject.py`: the traces of
//! `tests/external/mlx-lm/` (its findings, those of the server
//! (`"script": "server_subject.py"`) and the minimized differences by
//! design of docs/mlx-lm.md) still diverge where recorded, and random
//! traces of the protocols where its contract and docs/contract.md coincide still
//! agree. Opt-in: it runs only where `adapters/mlx-lm/setup.sh` has built
//! its environment (the marker `adapters/mlx-lm/.venv/KVCHECK_READY`), and
//! says how to enable it otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kvcheck::check::trace::Trace;
use kvcheck::subject::SubjectSpec;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's interpreter, or `None` (with the message saying how to get
/// it) when the environment is absent.
fn environment() -> Option<PathBuf> {
    let python = root().join("adapters/mlx-lm/.venv/bin/python");
    let marker = root().join("adapters/mlx-lm/.venv/KVCHECK_READY");
    if python.exists() && marker.exists() {
        crate::holds_the_release("mlx-lm", &marker).then_some(python)
    } else {
        eprintln!(
            "skipped: the mlx-lm environment is absent; \
             run `adapters/mlx-lm/setup.sh` to enable this test"
        );
        None
    }
}

/// The adapter's `script` (`subject.py`, the caches; `server_subject.py`,
/// the server) as an `exec:` subject, with extra arguments.
fn subject(python: &Path, script: &str, args: &str) -> SubjectSpec {
    let command = format!(
        "exec:{} {} {args}",
        python.display(),
        root().join("adapters/mlx-lm").join(script).display()
    );
    SubjectSpec::parse(command.trim_end())
        .expect("exec subject")
        .with_exec_options(Some(Duration::from_secs(120)), false)
}

/// Every trace of `tests/external/mlx-lm/findings.json`, replayed by
/// kvcheck's own driver on the subject (with the arguments recorded there),
/// still diverges at the recorded step and in the recorded kind (or, for a
/// declared boundary, still answers outside there).
#[test]
fn mlx_lm_saved_traces_still_diverge() {
    let Some(python) = environment() else { return };
    crate::saved_traces_still_diverge("mlx-lm", "tests/external/mlx-lm", |entry| {
        subject(
            &python,
            entry["script"].as_str().unwrap_or("subject.py"),
            entry["subject_args"].as_str().unwrap_or(""),
        )
    });
}

/// `adapters/mlx-lm/protocol.py` draws 8 traces of each cache's protocol;
/// every one agrees with the model (outcomes, positions, view bytes).
#[test]
fn mlx_lm_agrees_on_its_protocols() {
    let Some(python) = environment() else { return };
    for (cache, args) in [("rotating", ""), ("kv", "--cache kv")] {
        let out = root().join("target/mlx-lm-protocol").join(cache);
        let _ = std::fs::remove_dir_all(&out);
        let status = Command::new("python3")
            .arg(root().join("adapters/mlx-lm/protocol.py"))
            .args(["--cache", cache, "--count", "8", "--seed", "7", "--out"])
            .arg(&out)
            .status()
            .expect("python3 runs protocol.py");
        assert!(status.success(), "protocol.py --cache {cache} failed");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
            .expect("protocol traces")
            .map(|e| e.expect("dir entry").path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 8, "{cache}: traces written");
        for file in &files {
            let trace = Trace::load(file).expect("a protocol trace loads");
            let report = kvcheck::engine::replay::replay(
                &trace,
                None,
                Some(subject(&python, "subject.py", args)),
                None,
            );
            assert!(
                report.passed() && report.skipped.is_none(),
                "{}: {cache} protocol trace disagrees: {:?} {:?} {:?}",
                file.display(),
                report.divergence.map(|d| d.summary()),
                report.setup_error,
                report.skipped
            );
        }
    }
}
