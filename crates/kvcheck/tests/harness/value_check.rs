//! The driver's two view comparisons, `ValueCheck::InPlace` (the default:
//! segments read where the cache keeps them) and
//! `ValueCheck::Materialized` (segments concatenated into fresh tensors and
//! converted to f32 vectors), reach the same verdict on the same runs: the
//! same step, kind, words and wrong rows, over the shipped caches, the
//! naive reference with its faults and the zoo of buggy caches.

use candle_core::Device;
use kvcache::fault::CacheFault;
use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::lockstep::{Lockstep, ValueCheck};
use kvcheck::engine::fuzzcase::FuzzCase;
use kvcheck::subject::{Fault, SubjectSpec};
use kvcheck::Variant;

/// Fixed pseudo-random fuzz inputs (splitmix64), 13 config bytes and up
/// to 48 ops.
fn inputs(count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| {
            let ops = 1 + (next() % 48) as usize;
            (0..13 + 4 * ops).map(|_| next() as u8).collect()
        })
        .collect()
}

/// The verdict of one run in words: `None` when clean.
fn verdict(
    case: &FuzzCase,
    subject: &SubjectSpec,
    check: ValueCheck,
) -> Option<(DivergenceKind, String)> {
    let mut run = Lockstep::open(&case.config, subject, &Device::Cpu).expect("fuzz configs open");
    run.set_value_check(check);
    run.run(&case.ops).err().map(|d| {
        // A cache's own backend error carries a backtrace when
        // RUST_BACKTRACE is set, and the two paths call it from different
        // frames: compare the message, not the frames.
        let first = |s: &str| s.lines().next().unwrap_or_default().to_string();
        let words = format!(
            "{} {:?} {:?} {:?}",
            d.step,
            first(&d.expected),
            first(&d.actual),
            d.rows
        );
        (d.kind, words)
    })
}

fn subjects() -> Vec<(SubjectSpec, Vec<Variant>)> {
    let both = vec![Variant::Dense, Variant::Packed];
    let mut subjects = vec![
        (SubjectSpec::Cache, both.clone()),
        (SubjectSpec::Ring, vec![Variant::Dense]),
        (SubjectSpec::CachePath(kvcache::Path::Generic), both.clone()),
        (SubjectSpec::Reference, both.clone()),
    ];
    subjects.extend(Fault::ALL.map(|f| (SubjectSpec::Fault(f), both.clone())));
    subjects.extend(CacheFault::ALL.map(|f| (SubjectSpec::CacheFault(f), vec![f.variant()])));
    subjects
}

#[test]
fn in_place_and_materialized_comparisons_agree() {
    let cases = inputs(24, 11);
    let (mut values, mut clean) = (0, 0);
    for (subject, variants) in subjects() {
        let capabilities = subject.capabilities().expect("in-process subjects");
        for variant in variants {
            for bytes in &cases {
                let case = FuzzCase::decode_for(variant, bytes, 48, &capabilities);
                let in_place = verdict(&case, &subject, ValueCheck::InPlace);
                let materialized = verdict(&case, &subject, ValueCheck::Materialized);
                assert_eq!(
                    in_place, materialized,
                    "{subject} on {variant:?}: the comparisons disagree on {bytes:?}"
                );
                match in_place {
                    Some((DivergenceKind::Values | DivergenceKind::Probe, _)) => values += 1,
                    None => clean += 1,
                    Some(_) => {}
                }
            }
        }
    }
    // Both verdicts occur, so agreeing is not agreeing on nothing.
    assert!(values > 0, "no run found wrong values");
    assert!(clean > 0, "no run was clean");
}
