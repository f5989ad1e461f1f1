//! Running the `kvcheck` binary from the CLI tests: its exit status and
//! output, and scratch folders under the target directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `kvcheck ARGS` without `RUST_BACKTRACE` (every refused op would pay
/// for a captured backtrace) and without `KVCHECK_JOBS` (the tests choose
/// their worker counts): exit status, stdout, stderr.
pub fn kvcheck(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvcheck"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("KVCHECK_JOBS")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A folder of this name under the target's tmp directory, created.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dir/name` as a string argument.
pub fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// Whether `python3` is missing, saying so: the tests of `exec:` subjects
/// written in Python skip then.
pub fn python_missing() -> bool {
    let missing = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err();
    if missing {
        eprintln!("skipped: python3 is not on PATH; install it to run the exec-subject tests");
    }
    missing
}
