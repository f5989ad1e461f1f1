//! The Python subjects of `adapters/`, checked from `cargo test`.
//!
//! - `adapters/tests`: the standard-library reference subject of
//!   kvcheck-subject/1 and its planted faults, replayed over every trace in
//!   `tests/vectors` and `tests/regressions` (needs only `python3`).
//! - `adapters/sglang/tests`: the sglang adapter against sglang's real
//!   caches, and the findings saved in `tests/external/sglang/` (see
//!   `docs/sglang.md`). Opt-in: it runs only where
//!   `adapters/sglang/setup.sh` has built its environment (the marker
//!   `adapters/sglang/.sglang/<version>/READY`), and says how to enable it
//!   otherwise. `SGLANG_VERSION` picks the release (default 0.5.23).
//! - `mlx_lm`: mlx-lm's caches through `adapters/mlx-lm/subject.py`, opt-in
//!   behind `adapters/mlx-lm/setup.sh` (see `docs/mlx-lm.md`).
//! - `transformers`, `vllm_omni`: the same for the transformers and
//!   vllm-omni adapters (`adapters/transformers/`, `adapters/vllm-omni/`)
//!   and their traces in `tests/external/transformers/` and
//!   `tests/external/vllm-omni/`.

mod mlx_lm;
mod transformers;
mod vllm_omni;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the environment whose setup marker is `marker` holds the
/// release (not a patched library or a checkout, which `setup.sh` builds
/// for a finding's verified-fix run and records in the marker): the saved
/// findings are the release's, so a fixed library is skipped, with why.
fn holds_the_release(name: &str, marker: &Path) -> bool {
    let text = std::fs::read_to_string(marker).unwrap_or_default();
    let patched = text.contains(" + patch ") || text.contains("checkout ");
    if patched {
        eprintln!(
            "skipped: the {name} environment holds a patched library or a checkout \
             (its marker: {}); the saved findings are the release's: \
             rebuild it with `adapters/{name}/setup.sh` (no *_PATCH or *_SRC), \
             or build the patched one in another VENV",
            text.lines().collect::<Vec<_>>().join("; ")
        );
    }
    !patched
}

/// Runs `python -m unittest discover -s DIR` in the repository root, with
/// the package in `python/` importable (as `.ci/run` runs them), and fails
/// with its output unless every test passed.
fn unittest(python: &Path, dir: &str) {
    let package = root().join("python");
    let path = match std::env::var_os("PYTHONPATH") {
        Some(old) => {
            let mut paths = vec![package];
            paths.extend(std::env::split_paths(&old));
            std::env::join_paths(paths).expect("PYTHONPATH entries join")
        }
        None => package.into_os_string(),
    };
    let output = Command::new(python)
        .args(["-m", "unittest", "discover", "-s", dir])
        .env("PYTHONPATH", path)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{dir}: unittest failed ({})\n{report}",
        output.status
    );
    // The summary line ("Ran N tests ... OK") is the evidence that it ran.
    let summary: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("Ran ") || l.starts_with("OK"))
        .collect();
    assert!(!summary.is_empty(), "{dir}: no unittest summary\n{report}");
    eprintln!("{dir}: {}", summary.join(" "));
}

#[test]
fn reference_subject_and_its_faults() {
    unittest(Path::new("python3"), "adapters/tests");
}

#[test]
fn sglang_adapter_and_saved_findings() {
    let version = std::env::var("SGLANG_VERSION").unwrap_or_else(|_| "0.5.23".to_string());
    let python: PathBuf = root().join("adapters/sglang/.venv/bin/python");
    let marker = root().join(format!("adapters/sglang/.sglang/{version}/READY"));
    if !(python.exists() && marker.exists()) {
        eprintln!(
            "skipped: the sglang {version} environment is absent; \
             run `SGLANG_VERSION={version} adapters/sglang/setup.sh` to enable this test"
        );
        return;
    }
    unittest(&python, "adapters/sglang/tests");
    saved_findings_still_diverge(&python, &version);
}

/// Every trace of `tests/external/sglang/findings.json`, replayed by
/// kvcheck's own driver on the unmasked sglang subject, still diverges at
/// the step and in the kind recorded there (and with the recorded exception
/// message), as docs/sglang.md reports.
fn saved_findings_still_diverge(python: &Path, version: &str) {
    let command = format!(
        "exec:{} {} --version {version}",
        python.display(),
        root().join("adapters/sglang/subject.py").display()
    );
    saved_traces_of_command("sglang", "tests/external/sglang", &command);
}

/// [`saved_traces_still_diverge`] on the `exec:` subject `command`, with
/// each entry's optional `args` appended and its `exact_kinds` setting;
/// `{script}` in `command` is the entry's `script` (default `subject.py`),
/// for an adapter with more than one subject.
pub(crate) fn saved_traces_of_command(library: &str, dir: &str, command: &str) {
    saved_traces_still_diverge(library, dir, |entry| {
        let exact = entry["exact_kinds"].as_bool().unwrap_or(false);
        let args = entry["args"].as_str().unwrap_or("");
        let script = entry["script"].as_str().unwrap_or("subject.py");
        let command = command.replace("{script}", script);
        kvcheck::subject::SubjectSpec::parse(format!("{command} {args}").trim_end())
            .expect("exec subject")
            .with_exec_options(Some(std::time::Duration::from_secs(120)), exact)
    });
}

/// Replays every trace listed in `DIR/findings.json` (entries with `file`,
/// `step`, `kind` and optionally `message`) on the subject `subject` builds
/// for its entry, and fails unless each still diverges at the recorded step,
/// in the recorded kind (saying `message` when one is recorded). An entry of
/// kind `outside` is a boundary the adapter declares: the subject must
/// answer outside at the recorded step instead.
pub(crate) fn saved_traces_still_diverge(
    library: &str,
    dir: &str,
    subject: impl Fn(&serde_json::Value) -> kvcheck::subject::SubjectSpec,
) {
    let dir = root().join(dir);
    let text = std::fs::read_to_string(dir.join("findings.json")).expect("findings.json");
    let findings: serde_json::Value = serde_json::from_str(&text).expect("findings.json is JSON");
    let findings = findings.as_array().expect("findings.json is an array");
    assert!(!findings.is_empty(), "no saved {library} traces");
    for entry in findings {
        let file = entry["file"].as_str().expect("file");
        let trace =
            kvcheck::check::trace::Trace::load(&dir.join(file)).expect("a saved trace loads");
        let report = kvcheck::engine::replay::replay(&trace, None, Some(subject(entry)), None);
        if entry["kind"].as_str() == Some("outside") {
            // A boundary the adapter now declares: the subject must answer
            // outside at the recorded step (never serve it, never diverge).
            let cut = report
                .outside
                .as_ref()
                .unwrap_or_else(|| panic!("{file}: {library} no longer answers outside"));
            assert!(
                report.divergence.is_none(),
                "{file}: diverged before the cut"
            );
            assert_eq!(
                (cut.step as u64, cut.answered),
                (entry["step"].as_u64().expect("step"), true),
                "{file}: the outside answer moved: {}",
                cut.reason
            );
            continue;
        }
        let divergence = report
            .divergence
            .unwrap_or_else(|| panic!("{file}: {library} no longer diverges"));
        assert_eq!(
            (divergence.step as u64, divergence.kind.name()),
            (
                entry["step"].as_u64().expect("step"),
                entry["kind"].as_str().expect("kind")
            ),
            "{file}: the divergence moved: {}",
            divergence.summary()
        );
        if let Some(message) = entry.get("message").and_then(|m| m.as_str()) {
            assert!(
                divergence.actual.contains(message),
                "{file}: {:?} does not say {message:?}",
                divergence.actual
            );
        }
    }
    eprintln!("{} saved {library} traces still diverge", findings.len());
}

#[test]
fn a_patched_or_checkout_environment_is_not_taken_for_the_release() {
    let dir = std::env::temp_dir().join(format!("kvcheck-marker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("KVCHECK_READY");
    for (text, release) in [
        ("source: release 5.25.0\ntorch 2.15.0\n", true),
        ("mlx-lm 0.32.2\nmlx 0.32.4\n", true),
        ("source: release 5.25.0 + patch 0123abcd fix.diff\n", false),
        (
            "mlx-lm 0.32.2\nmlx 0.32.4\nsource: release 0.32.2 + patch 0123abcd fix.diff\n",
            false,
        ),
        ("source: checkout /src/transformers 1234abcd\n", false),
        (
            "mlx-lm checkout /src/mlx-lm unversioned\nmlx 0.32.4\n",
            false,
        ),
    ] {
        std::fs::write(&marker, text).unwrap();
        assert_eq!(
            holds_the_release("transformers", &marker),
            release,
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
