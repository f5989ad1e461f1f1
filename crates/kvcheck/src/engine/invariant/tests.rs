//! Each invariant on a record it must flag (a zoo fault's run, or a
//! correct run with one thing changed) and on correct records it must not.

use kvcache::fault::CacheFault;
use kvmodel::{Config, Op, PackedPolicy, Quant, Variant, Write};

use super::{judge, Judgement};
use crate::check::record::{observe, Plan, Seen, Transcript};
use crate::check::relation::Relation;
use crate::subject::SubjectSpec;

fn w(start: i64, len: i64) -> Op {
    Op::Write(Write::new(start, len))
}

fn dense(capacity: usize, sink: usize, window: Option<usize>) -> Config {
    Config {
        sink,
        window,
        ..Config::dense(capacity)
    }
}

fn run(subject: &SubjectSpec, config: &Config, ops: &[Op]) -> (Plan, Transcript) {
    let plan = Plan::of(config, ops);
    let run = observe(subject, &plan).expect("the subject opens the config");
    (plan, run)
}

fn judged(invariant: Relation, plan: &Plan, run: &Transcript) -> Judgement {
    judge(invariant, plan, run, true)
}

/// `invariant` flags the run of `ops` on `fault` and passes the same ops
/// on the correct cache and on the reference cache; every other invariant
/// passes the correct runs too.
fn flags_fault(invariant: Relation, fault: CacheFault, config: &Config, ops: &[Op]) {
    let faulty = SubjectSpec::CacheFault(fault);
    let (plan, bad) = run(&faulty, config, ops);
    let found = judged(invariant, &plan, &bad);
    assert!(
        found.violation.is_some(),
        "{invariant} misses {} on {ops:?}: {bad:?}",
        fault.name()
    );
    for correct in [SubjectSpec::Cache, SubjectSpec::Reference] {
        let (plan, good) = run(&correct, config, ops);
        for every in Relation::INVARIANTS {
            let j = judged(every, &plan, &good);
            assert_eq!(j.violation, None, "{every} on the correct {correct:?}");
        }
        assert!(
            judged(invariant, &plan, &good).ops > 0,
            "{invariant} judged nothing"
        );
    }
}

#[test]
fn i1_flags_a_position_listed_twice() {
    let config = Config {
        global_sink: 1,
        ..dense(6, 2, None)
    };
    let ops = [w(0, 4), Op::Pin { tokens: 2 }, w(4, 2), w(6, 2)];
    flags_fault(
        Relation::NoDuplicates,
        CacheFault::PinDuplicatedInView,
        &config,
        &ops,
    );
}

#[test]
fn i2_flags_a_sink_dropped_by_the_window_or_by_eviction() {
    let ops = [w(0, 2), w(2, 4)];
    flags_fault(
        Relation::SinksStay,
        CacheFault::WindowDropsSink,
        &dense(8, 1, Some(3)),
        &ops,
    );
    let ops = [w(0, 4), Op::Evict { tokens: 1 }, w(4, 1)];
    flags_fault(
        Relation::SinksStay,
        CacheFault::EvictRemovesSink,
        &dense(6, 2, None),
        &ops,
    );
}

#[test]
fn i2_and_i3_follow_pins_and_rewinds() {
    // A pin makes [GS, S) evictable; its positions stay while it stands;
    // a rewind below the pin clears it. The correct runs pass.
    let config = Config {
        global_sink: 1,
        ..dense(6, 2, None)
    };
    let ops = [
        w(0, 4),
        Op::Pin { tokens: 2 },
        w(4, 3),
        w(7, 2),
        Op::Rewind { to: 3 },
        w(3, 3),
        Op::Pin { tokens: 0 },
        w(6, 2),
        Op::Reset,
        w(0, 1),
    ];
    for subject in [SubjectSpec::Cache, SubjectSpec::Reference] {
        let (plan, good) = run(&subject, &config, &ops);
        assert!(good.seen.iter().all(|s| !s.is_refused()), "{good:?}");
        for every in Relation::INVARIANTS {
            assert_eq!(judged(every, &plan, &good).violation, None, "{every}");
        }
        // Removing pinned position 2 from a view while the pin stands is
        // caught by I3, and sink position 0 by I2.
        let mut bad = good.clone();
        if let Seen::Ok { view: Some(v), .. } = &mut bad.seen[2] {
            v.positions.retain(|&p| p != 2 && p != 0);
        }
        assert_eq!(
            judged(Relation::PinsStay, &plan, &bad)
                .violation
                .map(|v| v.step),
            Some(2)
        );
        assert_eq!(
            judged(Relation::SinksStay, &plan, &bad)
                .violation
                .map(|v| v.step),
            Some(2)
        );
    }
}

#[test]
fn i3_flags_a_pin_lost_at_a_misaligned_roll() {
    // The pin [3, 4) lies 2 past the sink; chunks of 3 roll it away.
    let config = Config {
        global_sink: 1,
        ..dense(8, 1, None)
    };
    let ops = [w(0, 4), Op::Pin { tokens: 1 }, w(4, 3), w(7, 3), w(10, 3)];
    flags_fault(
        Relation::PinsStay,
        CacheFault::PinLostOnMisalignedRoll,
        &config,
        &ops,
    );
}

#[test]
fn i4_flags_a_window_that_counts_the_sink_twice() {
    let ops = [w(0, 2), w(2, 1), w(3, 1), w(4, 1), w(5, 1)];
    let config = dense(8, 2, Some(6));
    flags_fault(
        Relation::WindowWidth,
        CacheFault::WindowDoubleCountsSink,
        &config,
        &ops,
    );
}

#[test]
fn i4_follows_eviction_growth_and_recent_windows() {
    let recent = Op::Write(Write {
        recent_window: Some(2),
        ..Write::new(9, 1)
    });
    let ops = [
        w(0, 5),
        w(5, 3),
        Op::Evict { tokens: 2 },
        w(8, 1),
        recent,
        Op::Rewind { to: 4 },
        w(4, 3),
    ];
    let growing = Config {
        growth: true,
        ..dense(4, 1, None)
    };
    for config in [dense(6, 2, Some(5)), growing] {
        for subject in [SubjectSpec::Cache, SubjectSpec::Reference] {
            let (plan, good) = run(&subject, &config, &ops);
            let j = judged(Relation::WindowWidth, &plan, &good);
            assert_eq!(j.violation, None, "{config:?} {good:?}");
            assert!(good.seen.iter().all(|s| !s.is_refused()), "{good:?}");
            assert_eq!(j.ops, 5);
        }
    }
}

#[test]
fn i5_flags_a_rewrite_that_lands_on_the_sink() {
    let ops = [w(0, 6), w(6, 2), w(2, 1), w(8, 1)];
    flags_fault(
        Relation::Provenance,
        CacheFault::EvictedRewriteOnSink,
        &dense(6, 1, None),
        &ops,
    );
}

#[test]
fn i5_flags_a_hot_chunk_gone_cold_and_leaves_cold_rows_alone() {
    let packed = |pack_sink| Config {
        variant: Variant::Packed,
        packed: Some(PackedPolicy {
            keep_recent_chunks: 1,
            quant: Quant::Int8,
            pack_sink,
        }),
        sink: 2,
        head_dim: 4,
        ..Config::packed(16)
    };
    let ops = [w(0, 2), w(2, 2), w(4, 2), w(6, 2), w(8, 2)];
    flags_fault(
        Relation::Provenance,
        CacheFault::KeepRecentCountsCurrent,
        &packed(false),
        &ops,
    );
    flags_fault(
        Relation::Provenance,
        CacheFault::SinkChunkPacked,
        &packed(false),
        &ops,
    );
    // Cold int8 rows differ from the written bytes on the correct cache,
    // and I5 does not judge them (nor, after a rewind, chunks whose age
    // the contract leaves open), with or without pack_sink.
    let ops = [
        w(0, 2),
        w(2, 2),
        w(4, 2),
        w(6, 2),
        Op::Rewind { to: 4 },
        w(4, 3),
        w(7, 1),
    ];
    for config in [packed(false), packed(true)] {
        let (plan, good) = run(&SubjectSpec::Cache, &config, &ops);
        assert!(good.seen.iter().all(|s| !s.is_refused()), "{good:?}");
        assert_eq!(judged(Relation::Provenance, &plan, &good).violation, None);
    }
}

#[test]
fn i5_names_the_row_a_wrong_row_holds() {
    let (plan, good) = run(
        &SubjectSpec::Reference,
        &dense(4, 0, None),
        &[w(0, 2), w(2, 1)],
    );
    let mut bad = good.clone();
    if let (Seen::Ok { view: Some(a), .. }, Seen::Ok { view: Some(b), .. }) =
        (good.seen[0].clone(), &mut bad.seen[1])
    {
        // Position 0's row replaced by the one op 0 wrote for position 1.
        let row = a.k.len() / 2;
        b.k[..row].copy_from_slice(&a.k[row..]);
        b.v[..row].copy_from_slice(&a.v[row..]);
    }
    let v = judged(Relation::Provenance, &plan, &bad)
        .violation
        .expect("flagged");
    assert_eq!(v.step, 1);
    assert!(v.actual.contains("op 0 wrote for position 1"), "{v:?}");
}

#[test]
fn i6_flags_a_head_range_view_of_every_head() {
    let config = Config {
        variant: Variant::Packed,
        heads: 2,
        ..Config::packed(8)
    };
    let ops = [Op::Write(Write {
        heads: Some([0, 1]),
        ..Write::new(0, 2)
    })];
    flags_fault(
        Relation::ViewShape,
        CacheFault::PackedReturnsEveryHead,
        &config,
        &ops,
    );
}

#[test]
fn i7_and_i8_flag_a_gap_and_a_wrong_end() {
    let ops = [w(0, 2), w(4, 0), w(2, 1)];
    flags_fault(
        Relation::MustRefuse,
        CacheFault::ZeroLengthAdvances,
        &dense(6, 0, None),
        &ops,
    );
    let (plan, good) = run(&SubjectSpec::Reference, &dense(6, 0, None), &ops);
    let mut bad = good.clone();
    bad.seen[2] = Seen::Ok {
        global_end: 4,
        view: None,
    };
    assert_eq!(
        judged(Relation::GlobalEnd, &plan, &bad)
            .violation
            .map(|v| v.step),
        Some(2)
    );
    assert_eq!(judged(Relation::GlobalEnd, &plan, &good).violation, None);
}

/// Under `trim = "after_read"` every invariant passes the reference
/// cache's runs (I4 judging the width of the view before the write and
/// the chunk), and I4 flags the cache that claims after_read but trims
/// before the read: at a full cache its chunk sees `W − n` older
/// positions instead of the whole view before it.
#[test]
fn after_read_runs_pass_and_a_trim_before_the_read_breaks_i4() {
    use crate::subject::Fault;
    let after_read = |capacity, sink, window| Config {
        trim: kvmodel::Trim::AfterRead,
        ..dense(capacity, sink, window)
    };
    let ops = [
        w(0, 4),
        w(4, 2),
        w(6, 0),
        Op::write(6, 3, None, Some(2)),
        w(7, 2),
        Op::Evict { tokens: 1 },
        w(9, 1),
        Op::Reset,
        w(0, 2),
        w(2, 5),
    ];
    for config in [after_read(4, 1, None), after_read(6, 1, Some(4))] {
        let (plan, good) = run(&SubjectSpec::Reference, &config, &ops);
        for every in Relation::INVARIANTS {
            let j = judged(every, &plan, &good);
            assert_eq!(j.violation, None, "{every} on {config:?}");
        }
        assert!(judged(Relation::WindowWidth, &plan, &good).ops > 0);
        let (plan, bad) = run(&SubjectSpec::Fault(Fault::TrimBeforeRead), &config, &ops);
        let found = judged(Relation::WindowWidth, &plan, &bad);
        let violation = found.violation.expect("I4 flags a trim before the read");
        assert_eq!(violation.step, 1, "{violation:?}");
    }
}
