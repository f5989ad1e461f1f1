//! The minimizer keeps the failure, shrinks, and returns 1-minimal traces,
//! proved on constructed failing subjects (`Fault`s of the naive cache).

use kvcheck::check::trace::Trace;
use kvcheck::engine::minimize::{minimize, run_subject, MinimizeError, Signature};
use kvcheck::subject::{Fault, SubjectSpec};
use kvcheck::{Config, Dtype, Op, Write};

/// A proptest-style long trace: 40 pseudo-random ops of a streaming
/// pipeline (appends, denoise rewrites of the latest chunk, evicts, pins,
/// rewinds, resets) on a roomy config, from a tiny deterministic generator.
fn long_trace(seed: u64) -> Trace {
    let mut config = Config::dense(16);
    config.sink = 2;
    config.heads = 2;
    config.head_dim = 4;
    config.batch = 2;
    config.dtype = Dtype::F16;
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let (mut g, mut last) = (0i64, (0i64, 0i64));
    let mut ops = Vec::new();
    while ops.len() < 40 {
        let op = match next(11) {
            0..=4 => {
                let len = 1 + next(4) as i64;
                last = (g, len);
                g += len;
                Op::Write(Write::new(last.0, len))
            }
            5 | 6 if last.1 > 0 => Op::Write(Write {
                heads: (next(2) == 0).then_some([next(2) as i64, 1]),
                ..Write::new(last.0, last.1)
            }),
            7 => Op::Evict { tokens: 1 },
            10 if last.1 > 0 => {
                // A chunk that grows while it is denoised: overlaps G.
                last.1 += 1;
                g += 1;
                Op::Write(Write::new(last.0, last.1))
            }
            8 => Op::Pin {
                tokens: next(4) as i64,
            },
            _ => {
                let to = (next(g as u64 + 1)) as i64;
                g = to;
                last = (0, 0);
                Op::Rewind { to }
            }
        };
        ops.push(op);
    }
    Trace::new(config, ops)
}

fn assert_one_minimal(trace: &Trace, subject: SubjectSpec, signature: Signature) {
    for i in 0..trace.ops.len() {
        let mut ops = trace.ops.clone();
        ops.remove(i);
        let kept = run_subject(&trace.config, &ops, &subject).map(|d| Signature::of(&d));
        assert_ne!(
            kept,
            Some(signature),
            "removing op {i} ({}) keeps the failure: not 1-minimal",
            trace.ops[i]
        );
    }
}

#[test]
fn stale_rewrite_shrinks_to_append_and_rewrite() {
    let subject = SubjectSpec::Fault(Fault::StaleRewrite);
    let trace = long_trace(7);
    let original = run_subject(&trace.config, &trace.ops, &subject).expect("the fault shows");
    let m = minimize(&trace, subject.clone(), 2000).unwrap();
    assert_eq!(Signature::of(&m.divergence), Signature::of(&original));
    assert!(m.one_minimal);
    // A rewrite needs something to rewrite: one append, one rewrite, one
    // position, one head, one batch row, f32.
    assert_eq!(
        m.trace.ops,
        vec![Op::Write(Write::new(0, 1)), Op::Write(Write::new(0, 1))]
    );
    assert_eq!((m.trace.config.capacity, m.trace.config.heads), (1, 1));
    assert_eq!(m.trace.config.dtype, Dtype::F32);
    assert!(m.trace.expect.is_some() && m.trace.note.is_some());
}

#[test]
fn long_failing_traces_shrink_keep_the_failure_and_are_one_minimal() {
    for fault in Fault::ALL {
        let subject = SubjectSpec::Fault(fault);
        // The fault that trims before the read shows only where the
        // config asks for the other mode.
        let in_its_mode = |mut t: Trace| {
            if fault == Fault::TrimBeforeRead {
                t.config.trim = kvcheck::Trim::AfterRead;
            }
            t
        };
        let Some((trace, original)) = (0..50).map(long_trace).map(in_its_mode).find_map(|t| {
            let d = run_subject(&t.config, &t.ops, &subject)?;
            (d.step >= 10).then_some((t, d))
        }) else {
            panic!("no generated trace fails late on {fault:?}");
        };
        let m = minimize(&trace, subject.clone(), 2000).unwrap();
        assert!(m.after < m.before, "{fault:?}: {} → {}", m.before, m.after);
        assert!(m.trace.ops.len() < trace.ops.len());
        assert!(m.trace.ops.len() <= original.step);
        let again = run_subject(&m.trace.config, &m.trace.ops, &subject).expect("still fails");
        assert_eq!(Signature::of(&again), Signature::of(&original), "{fault:?}");
        assert!(m.one_minimal, "{fault:?}");
        assert_one_minimal(&m.trace, subject, Signature::of(&original));
        // The output is itself a valid trace that reloads.
        assert_eq!(Trace::from_json(&m.trace.to_json()).unwrap(), m.trace);
    }
}

#[test]
fn minimizing_twice_changes_nothing() {
    let subject = SubjectSpec::Fault(Fault::ForgetSinkAfterEviction);
    let trace = (0..50)
        .map(long_trace)
        .find(|t| run_subject(&t.config, &t.ops, &subject).is_some())
        .unwrap();
    let once = minimize(&trace, subject.clone(), 2000).unwrap();
    let twice = minimize(&once.trace, subject, 2000).unwrap();
    assert_eq!(once.trace.ops, twice.trace.ops);
    assert_eq!(once.trace.config, twice.trace.config);
}

#[test]
fn the_budget_bounds_the_tests() {
    let subject = SubjectSpec::Fault(Fault::StaleRewrite);
    let m = minimize(&long_trace(7), subject, 10).unwrap();
    assert!(m.tests_run <= 10);
    assert!(!m.one_minimal);
}

#[test]
fn a_passing_trace_is_a_clear_error() {
    let trace = long_trace(3);
    let err = minimize(&trace, SubjectSpec::Reference, 100).unwrap_err();
    assert!(matches!(err, MinimizeError::DoesNotFail { ops: 40, .. }));
    assert!(err.to_string().contains("does not fail"), "{err}");
}

fn kvcheck(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kvcheck"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

#[test]
fn cli_minimize_writes_a_smaller_failing_trace() {
    let dir = std::env::temp_dir().join(format!("kvcheck-minimize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("long.kvtrace.json");
    let output = dir.join("small.kvtrace.json");
    long_trace(7).save(&input).unwrap();
    let out = kvcheck(&[
        "minimize",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--subject",
        "fault:stale-rewrite",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("before: 40 ops"), "{stderr}");
    assert!(stderr.contains("after:  2 ops"), "{stderr}");
    let small = Trace::load(&output).unwrap();
    assert_eq!(small.ops.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cli_minimize_refuses_bad_input_with_status_2() {
    let dir = std::env::temp_dir().join(format!("kvcheck-minimize-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.kvtrace.json");
    std::fs::write(&bad, "{\"format\": \"kvtrace/1\", \"config\": {}}").unwrap();
    let out = kvcheck(&["minimize", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.kvtrace.json"));
    let passing = dir.join("ok.kvtrace.json");
    long_trace(3).save(&passing).unwrap();
    let out = kvcheck(&[
        "minimize",
        passing.to_str().unwrap(),
        "--subject",
        "reference",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not fail"));
    std::fs::remove_dir_all(&dir).unwrap();
}
