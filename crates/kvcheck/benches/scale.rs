//! Checked ops/s of `run` and states/s of `explore` at 1 worker and at
//! every core, measured in one process, and their ratio.
//!
//! The same work is done at each worker count (a fixed number of cases; a
//! fixed depth and grid), so the ratio is a speed-up of wall time. The
//! target is 1.7× on 2 cores; a loaded machine lowers it, so the load
//! average is printed beside it.

use std::time::{Duration, Instant};

use kvcheck::explore::{grid, Alphabet, Explorer};
use kvcheck::scale::{available_cores, default_jobs, Campaign, Shard};
use kvcheck::strategy::PROFILES;
use kvcheck::subject::SubjectSpec;
use kvcheck::Config;
use rayon::prelude::*;

const TARGET_RATIO: f64 = 1.7;

fn campaign(jobs: usize, cases: u64) -> Campaign {
    Campaign {
        seed: 7,
        profiles: (0..PROFILES.len()).collect(),
        max_ops: 64,
        cases: Some(cases),
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
fn run_rate(jobs: usize, cases: u64) -> f64 {
    let outcome = campaign(jobs, cases)
        .run(None)
        .expect("the shipped caches run");
    assert!(outcome.found.is_none(), "the shipped caches diverged");
    outcome.total_ops() as f64 / outcome.elapsed.as_secs_f64()
}

/// States generated per second of wall time by one exploration (capacity
/// 4, sink 1, full alphabet) on `jobs` threads.
fn explore_rate(jobs: usize, depth: usize) -> f64 {
    let config = Config {
        sink: 1,
        ..Config::dense(4)
    };
    let started = Instant::now();
    let report = Explorer::new(&config, SubjectSpec::Cache)
        .depth(depth)
        .jobs(jobs)
        .assert_no_discovery();
    report.states as f64 / started.elapsed().as_secs_f64()
}

/// States per second of a small grid (capacity 1..=3, small alphabet)
/// with its configs on a pool of `jobs` threads, as `explore --grid` runs.
fn grid_rate(jobs: usize, depth: usize) -> f64 {
    let configs = grid::configs(3, None);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .expect("a thread pool");
    let started = Instant::now();
    let states: u64 = pool.install(|| {
        configs
            .par_iter()
            .map(|c| {
                Explorer::new(c, SubjectSpec::Cache)
                    .depth(depth)
                    .alphabet(Alphabet::Small)
                    .jobs(0)
                    .assert_no_discovery()
                    .states
            })
            .sum()
    });
    states as f64 / started.elapsed().as_secs_f64()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    // `cargo test --benches` runs this with `--test`-like flags: one quick
    // pass keeps it honest without the cost of a measurement.
    let quick = std::env::args().any(|a| a == "--test");
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
    let cases = if quick {
        3
    } else {
        env_or("KVCHECK_BENCH_CASES", 150)
    };
    let (mut run_one, mut run_all) = (0f64, 0f64);
    for _ in 0..rounds {
        run_one = run_one.max(run_rate(1, cases));
        run_all = run_all.max(run_rate(all, cases));
    }
    report("run", "checked ops/s", run_one, run_all);
    let depth = if quick { 2 } else { 4 };
    let (mut explore_one, mut explore_all) = (0f64, 0f64);
    for _ in 0..rounds {
        explore_one = explore_one.max(explore_rate(1, depth));
        explore_all = explore_all.max(explore_rate(all, depth));
    }
    report("explore", "states/s", explore_one, explore_all);
    let depth = if quick { 1 } else { 2 };
    let (mut grid_one, mut grid_all) = (0f64, 0f64);
    for _ in 0..rounds {
        grid_one = grid_one.max(grid_rate(1, depth));
        grid_all = grid_all.max(grid_rate(all, depth));
    }
    report("grid", "states/s", grid_one, grid_all);
    println!("load average after: {}", load_average());
}

fn report(what: &str, unit: &str, one: f64, all: f64) {
    let ratio = all / one;
    println!(
        "{what:<8} {unit:<14} 1 worker {one:>10.0}   all {all:>10.0}   ratio {ratio:.2}× (target {TARGET_RATIO}× on 2 cores)"
    );
}
