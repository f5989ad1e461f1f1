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

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `python -m unittest discover -s DIR` in the repository root and
/// fails with its output unless every test passed.
fn unittest(python: &Path, dir: &str) {
    let output = Command::new(python)
        .args(["-m", "unittest", "discover", "-s", dir])
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
}
