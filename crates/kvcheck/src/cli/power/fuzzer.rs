//! The fuzz column of `kvcheck power`: the `fault_lockstep` cargo-fuzz
//! target, built once and run per fault.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kvcache::fault::{CacheFault, FaultBase};
use kvcheck::report::Catch;
use kvcheck::subject::SubjectSpec;

/// The `fault_lockstep` cargo-fuzz target, built once.
pub struct Fuzzer {
    toolchain: Vec<String>,
    bootstrap: bool,
    root: PathBuf,
}

/// Why the fuzz column cannot run (it is skipped with the reason).
#[derive(Debug, thiserror::Error)]
pub enum FuzzerError {
    /// The working directory is not the repository root.
    #[error("run from the repository root (fuzz/fuzz_targets/fault_lockstep.rs not found)")]
    NotAtRoot,
    /// `cargo fuzz --version` fails.
    #[error("cargo-fuzz is not installed (cargo install cargo-fuzz --locked)")]
    NoCargoFuzz,
    /// `cargo fuzz build` could not be started.
    #[error("cannot run cargo fuzz build: {0}")]
    Spawn(#[source] std::io::Error),
    /// `cargo fuzz build` failed; the last lines of its standard error.
    #[error("cargo fuzz build failed:\n{stderr_tail}")]
    BuildFailed {
        /// The last 15 lines of the build's standard error.
        stderr_tail: String,
    },
}

const FUZZ_FLAGS: [&str; 4] = ["--sanitizer", "none", "--release", "--debug-assertions"];

impl Fuzzer {
    /// Finds cargo-fuzz and a toolchain that can build the target, and builds it.
    pub fn prepare() -> Result<Fuzzer, FuzzerError> {
        let root = PathBuf::from(".");
        if !root.join("fuzz/fuzz_targets/fault_lockstep.rs").exists() {
            return Err(FuzzerError::NotAtRoot);
        }
        let nightly = Command::new("cargo")
            .args(["+nightly", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let fuzzer = Fuzzer {
            toolchain: if nightly {
                vec!["+nightly".into()]
            } else {
                Vec::new()
            },
            bootstrap: !nightly,
            root,
        };
        let found = fuzzer
            .cargo()
            .args(["fuzz", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(FuzzerError::NoCargoFuzz);
        }
        eprintln!("power: building fault_lockstep (cargo fuzz build)");
        let out = fuzzer
            .cargo()
            .args(["fuzz", "build"])
            .args(FUZZ_FLAGS)
            .arg("fault_lockstep")
            .output()
            .map_err(FuzzerError::Spawn)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            return Err(FuzzerError::BuildFailed {
                stderr_tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        Ok(fuzzer)
    }

    fn cargo(&self) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.args(&self.toolchain).current_dir(&self.root);
        cmd.env_remove("RUST_BACKTRACE");
        if self.bootstrap {
            cmd.env("RUSTC_BOOTSTRAP", "1");
        }
        cmd
    }

    /// Fuzzes `fault` injected into `base` from an empty corpus for at
    /// most `budget`. Runs of different faults may go side by side: each
    /// has its own scratch directory.
    pub fn run(&self, fault: CacheFault, base: FaultBase, seed: u64, budget: Duration) -> Catch {
        let started = Instant::now();
        let scratch = std::env::temp_dir().join(format!(
            "kvcheck-power-{}-{}-{base}",
            std::process::id(),
            fault.name()
        ));
        let _ = std::fs::remove_dir_all(&scratch);
        if let Err(e) = std::fs::create_dir_all(&scratch) {
            return escaped(
                started,
                0,
                format!("cannot create {}: {e}", scratch.display()),
            );
        }
        let out = self
            .cargo()
            .env("KVCHECK_FAULT", fault.name())
            .env("KVCHECK_FAULT_BASE", base.name())
            .args(["fuzz", "run"])
            .args(FUZZ_FLAGS)
            .arg("fault_lockstep")
            .arg(&scratch)
            .arg("--")
            .arg(format!("-max_total_time={}", budget.as_secs().max(1)))
            .arg(format!("-seed={}", seed.max(1)))
            .arg(format!("-artifact_prefix={}/", scratch.display()))
            .arg("-print_final_stats=1")
            .arg("-rss_limit_mb=2048")
            .output();
        let seconds = started.elapsed().as_secs_f64();
        let catch = match out {
            Err(e) => escaped(started, 0, format!("cannot run cargo fuzz: {e}")),
            Ok(out) => {
                let log = String::from_utf8_lossy(&out.stderr).into_owned();
                let execs = executed(&log);
                match crash_file(&scratch) {
                    Some(path) => {
                        let minimized_ops = minimized(fault, base, &path);
                        Catch {
                            caught: true,
                            work: execs,
                            seconds,
                            minimized_ops,
                            note: format!("crash after {execs} execs"),
                        }
                    }
                    None if out.status.success() => {
                        escaped(started, execs, "time budget spent".to_string())
                    }
                    None => escaped(
                        started,
                        execs,
                        format!(
                            "cargo fuzz failed without a crash: {}",
                            log.lines().last().unwrap_or("")
                        ),
                    ),
                }
            }
        };
        let _ = std::fs::remove_dir_all(&scratch);
        catch
    }
}

fn escaped(started: Instant, work: u64, note: String) -> Catch {
    Catch {
        caught: false,
        work,
        seconds: started.elapsed().as_secs_f64(),
        minimized_ops: None,
        note,
    }
}

/// Execs libFuzzer reports: the final stat, else the last `#N` status line.
fn executed(log: &str) -> u64 {
    for line in log.lines() {
        if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
            if let Ok(n) = n.trim().parse() {
                return n;
            }
        }
    }
    log.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn crash_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("crash-"))
        })
}

/// Ops of the minimized trace of a crash input, through the same decoder.
fn minimized(fault: CacheFault, base: FaultBase, path: &Path) -> Option<usize> {
    let data = std::fs::read(path).ok()?;
    let trace = kvcheck::engine::fuzzcase::fault_case_on(fault, base, &data).to_trace();
    kvcheck::engine::minimize::minimize(&trace, SubjectSpec::cache_fault(fault, base), 400)
        .ok()
        .map(|m| m.trace.ops.len())
}
