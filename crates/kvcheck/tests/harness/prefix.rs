//! The prefix-cache family in kvcheck's engines (docs/kvtrace.md "Prefix
//! caches"): `replay` and `minimize` of prefix traces on the CLI, and the
//! library's lockstep and minimizer against the faults of the paged cache.

use candle_core::Device;
use kvcache::fault::{FaultyPagedCache, PrefixFault};
use kvcache::PagedCache;
use kvcheck::engine::prefix::{self, minimize::minimize, PrefixDivergenceKind};
use kvmodel::prefix::{PrefixConfig, PrefixOp, PrefixTrace};

use crate::cli_support::{kvcheck, path, scratch};

const KVTRACE_MD: &str = include_str!("../../../../docs/kvtrace.md");

/// The first ```json block of docs/kvtrace.md's "Prefix caches" section.
fn documented_example() -> String {
    let section = KVTRACE_MD
        .split_once("\n## Prefix caches\n")
        .expect("docs/kvtrace.md has a Prefix caches section")
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    let block = section.split("```json\n").nth(1).expect("a json block");
    block
        .split_once("\n```")
        .expect("the block is closed")
        .0
        .to_string()
}

/// The documented example with the expected hit of step 7 made wrong.
fn wrong_expect() -> String {
    let mut trace: serde_json::Value = serde_json::from_str(&documented_example()).unwrap();
    trace["expect"][7]["ok"]["hit"] = 2.into();
    trace.to_string()
}

fn write(dir: &str, name: &str, text: &str) -> String {
    let dir = scratch(dir);
    std::fs::write(dir.join(name), text).unwrap();
    path(&dir, name)
}

#[test]
fn the_documented_prefix_example_replays_on_the_paged_cache() {
    let file = write(
        "prefix-replay",
        "example.kvtrace.json",
        &documented_example(),
    );
    let (code, stdout, stderr) = kvcheck(&["replay", &file]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("PASS ") && stdout.contains("model + paged, 25 ops"),
        "{stdout}"
    );
    let (code, stdout, _) = kvcheck(&["replay", &file, "--model-only", "--quiet"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn a_wrong_prefix_expectation_fails_naming_the_step() {
    let file = write("prefix-replay", "wrong.kvtrace.json", &wrong_expect());
    for extra in [None, Some("--model-only")] {
        let mut args = vec!["replay", file.as_str()];
        args.extend(extra);
        let (code, stdout, _) = kvcheck(&args);
        assert_eq!(code, 1, "{stdout}");
        assert!(
            stdout.contains("expect divergence at step 7 (start r2 [1 2 3 4 5 6])"),
            "{stdout}"
        );
        assert!(stdout.contains("expected: ok hit 2 in_use 4"), "{stdout}");
        assert!(stdout.contains("actual:   ok hit 4 in_use 4"), "{stdout}");
        assert!(stdout.contains("reproduce: "), "{stdout}");
    }
    let (code, stdout, _) = kvcheck(&["replay", &file, "--json"]);
    assert_eq!(code, 1);
    let results: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(results[0]["divergence"]["step"], 7);
    assert_eq!(results[0]["divergence"]["kind"], "expect");
}

#[test]
fn a_malformed_prefix_trace_is_an_input_error_naming_the_problem() {
    let mut trace: serde_json::Value = serde_json::from_str(&documented_example()).unwrap();
    trace["ops"][1] = serde_json::json!({"compute": {"request": 0, "cnt": 5}});
    let cases = [
        (
            trace.to_string(),
            "malformed prefix trace: unknown field `cnt`",
        ),
        (
            documented_example().replace("\"blocks\": 4", "\"blocks\": -1"),
            "malformed prefix trace: invalid_config: blocks",
        ),
        (
            documented_example().replace("kvtrace/1", "kvtrace/9"),
            "invalid prefix trace: format is \"kvtrace/9\"",
        ),
    ];
    for (i, (text, message)) in cases.into_iter().enumerate() {
        let file = write("prefix-malformed", &format!("bad{i}.kvtrace.json"), &text);
        let (code, stdout, stderr) = kvcheck(&["replay", &file]);
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(stdout.contains(message), "{message}: {stdout}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let (code, _, stderr) = kvcheck(&["minimize", &file]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(message), "{message}: {stderr}");
    }
}

#[test]
fn another_subject_skips_a_prefix_trace() {
    let file = write("prefix-replay", "skip.kvtrace.json", &documented_example());
    let (code, stdout, _) = kvcheck(&["replay", &file, "--subject", "reference"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("SKIP ") && stdout.contains("1 skipped"),
        "{stdout}"
    );
}

#[test]
fn minimize_shrinks_a_wrong_prefix_expectation_to_the_op_that_shows_it() {
    let dir = scratch("prefix-minimize");
    let file = write("prefix-minimize", "wrong.kvtrace.json", &wrong_expect());
    let out = path(&dir, "small.kvtrace.json");
    let (code, _, stderr) = kvcheck(&["minimize", &file, "-o", &out]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("before: 25 ops"), "{stderr}");
    let small = prefix::load(std::path::Path::new(&out)).expect("a prefix trace");
    assert!(small.ops.len() < 25, "{small:?}");
    assert!(matches!(small.ops.last(), Some(PrefixOp::Start { .. })));
    let (code, stdout, _) = kvcheck(&["replay", &out]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("expect divergence at step"), "{stdout}");
    // A trace that passes has nothing to minimize.
    let good = write(
        "prefix-minimize",
        "good.kvtrace.json",
        &documented_example(),
    );
    let (code, _, stderr) = kvcheck(&["minimize", &good]);
    assert_eq!(code, 2);
    assert!(stderr.contains("does not fail"), "{stderr}");
}

fn start(request: u32, tokens: &[u32]) -> PrefixOp {
    PrefixOp::Start {
        request,
        tokens: tokens.to_vec(),
    }
}

fn compute(request: u32, count: i64) -> PrefixOp {
    PrefixOp::Compute { request, count }
}

/// A long sequence that shows `fault` near its end, padded with ops of
/// other requests (tokens 8 and 9).
fn noisy_showcase(fault: PrefixFault) -> Vec<PrefixOp> {
    let noise = |r: u32| {
        vec![
            start(r, &[9, 8, 9]),
            compute(r, 3),
            PrefixOp::Read { request: r },
            PrefixOp::Finish { request: r },
        ]
    };
    let tail = match fault {
        PrefixFault::TrustWeakHash => vec![PrefixOp::Finish { request: 0 }, start(1, &[2, 1, 3])],
        PrefixFault::SkipCopyOnWrite => vec![
            PrefixOp::Fork {
                request: 0,
                into: 1,
            },
            PrefixOp::Extend {
                request: 1,
                tokens: vec![4],
            },
        ],
        PrefixFault::HitStaysEvictable => {
            vec![PrefixOp::Finish { request: 0 }, start(1, &[1, 2, 3])]
        }
        PrefixFault::CacheUncomputedBlock => {
            vec![start(1, &[4, 5, 6]), PrefixOp::Finish { request: 1 }]
        }
        PrefixFault::RollbackKeepsComputed => vec![PrefixOp::Read { request: 0 }],
        PrefixFault::DoubleReleaseOnFinishAfterPreempt => vec![
            PrefixOp::Preempt { request: 0 },
            PrefixOp::Finish { request: 0 },
        ],
        PrefixFault::EvictIgnoresLru => vec![
            PrefixOp::Finish { request: 0 },
            PrefixOp::Evict { blocks: 1 },
            start(1, &[1, 2, 3]),
        ],
    };
    let mut ops = noise(10);
    ops.extend([start(0, &[1, 2, 3, 4, 5]), compute(0, 5)]);
    ops.extend(noise(11));
    ops.push(PrefixOp::Rollback {
        request: 0,
        count: 2,
    });
    ops.extend(noise(12));
    ops.extend(tail);
    ops.extend([compute(1, 1), PrefixOp::Read { request: 1 }]);
    ops.extend(noise(13));
    ops
}

#[test]
fn every_paged_fault_is_caught_and_minimized_below_its_noise() {
    let config = PrefixConfig {
        layers: 2,
        row_width: 3,
        ..PrefixConfig::new(8, 2)
    };
    for fault in PrefixFault::ALL {
        let trace = PrefixTrace::new(config.clone(), noisy_showcase(fault));
        let clean = prefix::replay_on_paged(&trace).unwrap();
        assert!(
            clean.passed(),
            "{fault}: the shipped cache diverged: {clean:?}"
        );
        let faulty = FaultyPagedCache::new(&config, &Device::Cpu, fault).unwrap();
        let found = prefix::replay(&trace, faulty).unwrap();
        let found = found
            .divergence
            .unwrap_or_else(|| panic!("{fault} was not caught"));
        assert_ne!(found.kind, PrefixDivergenceKind::Expect);
        let make = |c: &PrefixConfig| FaultyPagedCache::new(c, &Device::Cpu, fault);
        let small = minimize(&trace, &make, 2000).unwrap();
        assert!(small.divergence.same_failure(&found), "{fault}: {small:?}");
        assert!(
            small.after <= 6 && small.after < trace.ops.len(),
            "{fault}: {:?}",
            small.trace.ops
        );
        // 1-minimal: no single op can go.
        for i in 0..small.trace.ops.len() {
            let mut fewer = small.trace.clone();
            fewer.ops.remove(i);
            let faulty = FaultyPagedCache::new(&config, &Device::Cpu, fault).unwrap();
            let kept = prefix::replay(&fewer, faulty).unwrap().divergence;
            assert!(
                !kept.is_some_and(|d| d.same_failure(&found)),
                "{fault}: op {i} of {:?} can go",
                small.trace.ops
            );
        }
        // Without expect in, none out; on the shipped cache it passes.
        assert!(small.trace.expect.is_none());
        let cache = PagedCache::new(&config, &Device::Cpu).unwrap();
        assert!(prefix::replay(&small.trace, cache).unwrap().passed());
        println!(
            "{fault}: {} -> {} ops in {} tests: {:?}",
            small.before, small.after, small.tests_run, small.trace.ops
        );
    }
}
