//! `kvcheck power`: the zoo of realistic bugs against every engine.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use kvcache::fault::CacheFault;
use kvcheck::machine::SuiteSettings;
use kvcheck::power::{self, Catch, Engine, EXPLORE_DEPTH};
use kvcheck::subject::SubjectSpec;

use super::{EXIT_INPUT, EXIT_MISMATCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `suites`, `run`, `explore`, `fuzz` or `all`.
    #[arg(long, default_value = "all")]
    engine: String,
    /// Seconds each engine may spend on one fault (run, explore, fuzz).
    #[arg(long, default_value_t = 10.0)]
    time: f64,
    /// Only this fault (repeatable); default: the whole zoo.
    #[arg(long)]
    fault: Vec<String>,
    /// Seed of the `run` campaign and of libFuzzer.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Row {
    fault: &'static str,
    doc: &'static str,
    engines: Vec<(&'static str, Option<Catch>)>,
}

pub fn run(args: Args) -> ExitCode {
    let engines: Vec<Engine> = match args.engine.as_str() {
        "all" => Engine::ALL.to_vec(),
        name => {
            match Engine::parse(name) {
                Some(engine) => vec![engine],
                None => {
                    eprintln!("error: unknown engine {name:?}: expected suites, run, explore, fuzz or all");
                    return ExitCode::from(EXIT_INPUT);
                }
            }
        }
    };
    if !(args.time.is_finite() && args.time > 0.0) {
        eprintln!(
            "error: --time must be a positive number of seconds, got {}",
            args.time
        );
        return ExitCode::from(EXIT_INPUT);
    }
    let mut faults = Vec::new();
    for name in &args.fault {
        match CacheFault::from_name(name) {
            Some(fault) => faults.push(fault),
            None => {
                eprintln!(
                    "error: unknown fault {name:?}: expected one of {}",
                    CacheFault::ALL.map(CacheFault::name).join(", ")
                );
                return ExitCode::from(EXIT_INPUT);
            }
        }
    }
    if faults.is_empty() {
        faults = CacheFault::ALL.to_vec();
    }
    let budget = Duration::from_secs_f64(args.time);
    let fuzz = if engines.contains(&Engine::Fuzz) {
        match Fuzzer::prepare() {
            Ok(fuzzer) => Some(fuzzer),
            Err(why) => {
                eprintln!("power: fuzz column skipped: {why}");
                None
            }
        }
    } else {
        None
    };
    let bar = ProgressBar::new((faults.len() * engines.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let settings = SuiteSettings {
        cases: 256,
        max_ops: 40,
        seed: None,
        subject: SubjectSpec::Cache,
    };
    let mut rows = Vec::new();
    for &fault in &faults {
        let mut row = Row {
            fault: fault.name(),
            doc: fault.doc(),
            engines: Vec::new(),
        };
        for &engine in &engines {
            bar.set_message(format!("{} × {}", fault.name(), engine.name()));
            let catch = match engine {
                Engine::Suites => Some(power::suites(fault, &settings)),
                Engine::Run => Some(power::run(fault, args.seed, budget, 40)),
                Engine::Explore => Some(power::explore(fault, EXPLORE_DEPTH, budget)),
                Engine::Fuzz => fuzz.as_ref().map(|f| f.run(fault, args.seed, budget)),
            };
            row.engines.push((engine.name(), catch));
            bar.inc(1);
        }
        rows.push(row);
    }
    bar.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        print_table(&rows, &engines);
    }
    let escaped: Vec<&str> = rows
        .iter()
        .filter(|r| {
            !r.engines
                .iter()
                .any(|(_, c)| c.as_ref().is_some_and(|c| c.caught))
        })
        .map(|r| r.fault)
        .collect();
    if escaped.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("power: escaped every engine: {}", escaped.join(", "));
        ExitCode::from(EXIT_MISMATCH)
    }
}

fn cell(engine: Engine, catch: &Option<Catch>) -> String {
    match catch {
        None => "skipped".to_string(),
        Some(c) if !c.caught => format!("MISSED ({} {}, {:.1}s)", c.work, engine.unit(), c.seconds),
        Some(c) => {
            let minimized = c
                .minimized_ops
                .map_or_else(|| "-".to_string(), |n| n.to_string());
            format!(
                "yes {} {} {:.2}s min {}",
                c.work,
                engine.unit(),
                c.seconds,
                minimized
            )
        }
    }
}

fn print_table(rows: &[Row], engines: &[Engine]) {
    print!("| fault |");
    for e in engines {
        print!(" {} |", e.name());
    }
    println!();
    print!("|---|");
    for _ in engines {
        print!("---|");
    }
    println!();
    for row in rows {
        print!("| {} |", row.fault);
        for (engine, (_, catch)) in engines.iter().zip(&row.engines) {
            print!(" {} |", cell(*engine, catch));
        }
        println!();
    }
    print!("| **kill rate** |");
    for (i, _) in engines.iter().enumerate() {
        let ran: Vec<&Catch> = rows
            .iter()
            .filter_map(|r| r.engines[i].1.as_ref())
            .collect();
        if ran.is_empty() {
            print!(" skipped |");
        } else {
            let caught = ran.iter().filter(|c| c.caught).count();
            print!(
                " {caught}/{} ({:.0} %) |",
                ran.len(),
                100.0 * caught as f64 / ran.len() as f64
            );
        }
    }
    println!();
    println!();
    println!("cells: caught, work until the first catch, seconds, ops of the minimized counterexample (suites: shrunk by proptest, not counted)");
}

/// The `fault_lockstep` cargo-fuzz target, built once.
struct Fuzzer {
    toolchain: Vec<String>,
    bootstrap: bool,
    root: PathBuf,
}

const FUZZ_FLAGS: [&str; 4] = ["--sanitizer", "none", "--release", "--debug-assertions"];

impl Fuzzer {
    /// Finds cargo-fuzz and a toolchain that can build the target, and builds it.
    fn prepare() -> Result<Fuzzer, String> {
        let root = PathBuf::from(".");
        if !root.join("fuzz/fuzz_targets/fault_lockstep.rs").exists() {
            return Err(
                "run from the repository root (fuzz/fuzz_targets/fault_lockstep.rs not found)"
                    .into(),
            );
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
            return Err("cargo-fuzz is not installed (cargo install cargo-fuzz --locked)".into());
        }
        eprintln!("power: building fault_lockstep (cargo fuzz build)");
        let out = fuzzer
            .cargo()
            .args(["fuzz", "build"])
            .args(FUZZ_FLAGS)
            .arg("fault_lockstep")
            .output()
            .map_err(|e| format!("cannot run cargo fuzz build: {e}"))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            return Err(format!(
                "cargo fuzz build failed:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
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

    /// Fuzzes `fault` from an empty corpus for at most `budget`.
    fn run(&self, fault: CacheFault, seed: u64, budget: Duration) -> Catch {
        let started = Instant::now();
        let scratch = std::env::temp_dir().join(format!(
            "kvcheck-power-{}-{}",
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
                        let minimized_ops = minimized(fault, &path);
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
fn minimized(fault: CacheFault, path: &Path) -> Option<usize> {
    let data = std::fs::read(path).ok()?;
    let trace = kvcheck::fuzzcase::fault_case(fault, &data).to_trace();
    kvcheck::minimize::minimize(&trace, SubjectSpec::CacheFault(fault), 400)
        .ok()
        .map(|m| m.trace.ops.len())
}
