//! The cost of relation checking against the model check, per op, measured
//! in one run on the same cases.
//!
//! 30 cases of every profile are drawn once (fixed seed, at most 40 ops)
//! and checked, round after round, against the model (`Oracle::model()`: the
//! lockstep driver, each op once on the model and once on the shipped
//! cache, every view compared bit for bit) and against the subject itself
//! (`Oracle::relations(None)`: the original run and every instance of
//! M1–M10, each view read back as bytes and compared pair by pair). Rounds
//! alternate so that load from other processes hits both alike.
//!
//! The cases are drawn as `--oracle self` draws them (shaped into the
//! relations' domains, `engine/relation/domain.rs`), and both oracles
//! check the same cases.
//!
//! Printed: seconds per op sent to the cache under each oracle, and their
//! ratio; seconds per *judged* op (the model judges every op it checks,
//! a relation every op of the transformed runs it compares) and their
//! ratio, the goal being at most 2×; and the ratio per trace, which also
//! counts that the relations send each trace's ops to the cache once per
//! transformed run. `KVCHECK_BENCH_SECONDS` (default 4) is the time per
//! oracle. Run without `RUST_BACKTRACE`.

use std::time::{Duration, Instant};

use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::oracle::Work;
use kvcheck::engine::relation::domain;
use kvcheck::engine::strategy::{Case, PROFILES};
use kvcheck::settings::Settings;
use kvcheck::subject::SubjectSpec;
use kvcheck::{Config, Op};
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

const CASES_PER_PROFILE: usize = 30;
const MAX_OPS: usize = 40;

fn cases() -> Vec<(Config, Vec<Op>)> {
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(3),
        ..ProptestConfig::default()
    });
    let subject = SubjectSpec::Cache;
    let capabilities =
        std::sync::Arc::new(subject.capabilities().expect("in-process capabilities"));
    let mut cases = Vec::new();
    for profile in PROFILES {
        for _ in 0..CASES_PER_PROFILE {
            let Case { config, ops } =
                domain::draw(profile, &capabilities, &mut runner, MAX_OPS).expect("profiles draw");
            cases.push((config, ops));
        }
    }
    cases
}

/// One pass over every case: seconds, work, traces.
fn pass(oracle: &Oracle, cases: &[(Config, Vec<Op>)]) -> (Duration, Work) {
    let mut work = Work::default();
    let started = Instant::now();
    for (config, ops) in cases {
        let found = oracle
            .check_counted(config, ops, &SubjectSpec::Cache, &mut work)
            .expect("the shipped caches run every profile");
        assert!(found.is_none(), "the shipped cache diverged");
    }
    (started.elapsed(), work)
}

fn main() {
    let seconds: f64 = std::env::var("KVCHECK_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4.0);
    let cases = cases();
    // The knobs, read once here: `KVCHECK_RELATION_INSTANCES` sets the
    // transformed runs per relation.
    let settings = Settings::from_env().unwrap_or_else(|e| panic!("{e}"));
    let oracles = [
        Oracle::model(),
        Oracle::relations(None).with_settings(&settings),
    ];
    let mut spent = [Duration::ZERO; 2];
    let mut work: [Work; 2] = Default::default();
    let mut passes = [0usize; 2];
    while spent.iter().any(|s| s.as_secs_f64() < seconds) {
        for (i, oracle) in oracles.iter().enumerate() {
            let (time, w) = pass(oracle, &cases);
            spent[i] += time;
            work[i].runs += w.runs;
            work[i].ops += w.ops;
            work[i].judged.merge(&w.judged);
            passes[i] += 1;
        }
    }
    let per_op = |i: usize| spent[i].as_secs_f64() / work[i].ops as f64;
    let per_trace = |i: usize| spent[i].as_secs_f64() / (passes[i] * cases.len()) as f64;
    for (i, name) in ["model", "self"].iter().enumerate() {
        println!(
            "{name:<6} {} passes over {} traces: {:.2} s, {} runs, {} ops sent to the cache, {:.2} µs per op, {:.0} µs per trace",
            passes[i],
            cases.len(),
            spent[i].as_secs_f64(),
            work[i].runs,
            work[i].ops,
            per_op(i) * 1e6,
            per_trace(i) * 1e6
        );
    }
    // The model judges every op it sends; the relations every op of the
    // transformed runs they compare.
    let judged = [work[0].ops as f64, work[1].judged.total_ops() as f64];
    let per_judged = |i: usize| spent[i].as_secs_f64() / judged[i];
    println!(
        "relations cost {:.2}x the model check per op sent ({:.1} runs per trace: {:.2}x per trace)",
        per_op(1) / per_op(0),
        work[1].runs as f64 / (passes[1] * cases.len()) as f64,
        per_trace(1) / per_trace(0)
    );
    println!(
        "per judged op: model {:.2} µs, self {:.2} µs ({:.0} ops judged by the relations per pass): {:.2}x",
        per_judged(0) * 1e6,
        per_judged(1) * 1e6,
        judged[1] / passes[1] as f64,
        per_judged(1) / per_judged(0)
    );
}
