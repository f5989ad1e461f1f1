//! Checked ops per second of the lockstep driver on tiny configurations.
//!
//! Each iteration draws op sequences from the `tiny` profile and runs them
//! through the model and the dense cache with every check on (outcomes,
//! views bit for bit, probes after refusals, coverage labels). The target
//! is 50 000 checked ops/s; the summary prints the measured rate and its
//! ratio to the target.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kvcheck::engine::case::{draw_and_run, CaseOutcome};
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::strategy::profile;
use kvcheck::subject::SubjectSpec;
use proptest::test_runner::{Config, RngSeed, TestRunner};

const TARGET_OPS_PER_SECOND: f64 = 50_000.0;
const OPS_PER_CASE: usize = 48;

fn runner() -> TestRunner {
    TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(1),
        ..Config::default()
    })
}

/// One case of the profile `name`, on the shipped caches against the model.
fn case(name: &str, runner: &mut TestRunner) -> CaseOutcome {
    let profile = profile(name).expect("a built-in profile");
    draw_and_run(
        profile,
        runner,
        OPS_PER_CASE,
        &SubjectSpec::Cache,
        &Oracle::model(),
    )
    .expect("cases generate")
}

fn driver(c: &mut Criterion) {
    let mut group = c.benchmark_group("driver");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let mut tiny = runner();
    group.bench_function("tiny_case", |b| b.iter(|| case("tiny", &mut tiny)));
    let mut packed = runner();
    group.bench_function("packed_case", |b| b.iter(|| case("packed", &mut packed)));
    group.finish();

    // Cases have random lengths, so the rate comes from counting the ops
    // actually checked over wall time, not from criterion's per-case time.
    let mut runner = runner();
    let (mut ops, started) = (0usize, Instant::now());
    while started.elapsed() < Duration::from_secs(3) {
        ops += case("tiny", &mut runner).ops_checked;
    }
    let rate = ops as f64 / started.elapsed().as_secs_f64();
    println!(
        "\ndriver on tiny configs: {rate:.0} checked ops/s = {:.2}x the {TARGET_OPS_PER_SECOND:.0} ops/s target",
        rate / TARGET_OPS_PER_SECOND
    );
}

criterion_group!(benches, driver);
criterion_main!(benches);
