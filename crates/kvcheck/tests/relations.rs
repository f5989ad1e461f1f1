//! The relations of SPEC.md §9 on the reference model and the shipped
//! caches, and the relation failures of the zoo.

use kvcheck::machine::CASE_DRAWS;
use kvcheck::relation::{check, Relation, Work};
use kvcheck::strategy::PROFILES;
use kvcheck::subject::SubjectSpec;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

/// Cases per profile (`KVCHECK_CASES` overrides, as for the suites).
fn cases() -> usize {
    std::env::var("KVCHECK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Every relation holds on `subject` over random traces of every profile:
/// for the reference model this is the proof that the preconditions are
/// complete.
fn relations_hold(subject: &SubjectSpec, seed: u64) {
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let mut work = Work::default();
    let mut applied = std::collections::BTreeMap::<Relation, usize>::new();
    for (profile, draw) in PROFILES.iter().zip(CASE_DRAWS) {
        for case in 0..cases() {
            let (config, ops) = draw(&mut runner, 30, subject).expect("every profile draws");
            for relation in Relation::ALL {
                let before = work.runs;
                let found = check(&config, &ops, subject, &[relation], 4, &mut work)
                    .expect("the subject runs every drawn trace");
                if let Some(d) = found {
                    panic!(
                        "{relation} fails on {} (profile {}, case {case}):\n{d}\n{}",
                        subject.name(&config),
                        profile.name,
                        d.trace
                    );
                }
                *applied.entry(relation).or_default() += work.runs - before - 1;
            }
        }
    }
    // Every relation was applied somewhere: a precondition that never
    // holds on the profiles would prove nothing.
    for relation in Relation::ALL {
        assert!(
            applied.get(&relation).copied().unwrap_or(0) > 0,
            "{relation} never applied: {applied:?}"
        );
    }
}

#[test]
fn every_relation_holds_on_the_reference_model() {
    relations_hold(&SubjectSpec::Reference, 11);
}

#[test]
fn every_relation_holds_on_the_shipped_caches() {
    relations_hold(&SubjectSpec::Cache, 12);
}

/// Append-only traces of every profile's configurations (packed ones
/// without quantization): where M7's precondition holds on every case.
fn append_only() -> impl proptest::strategy::Strategy<Value = (kvcheck::Config, Vec<kvcheck::Op>)> {
    use kvcheck::{Op, Quant, Write};
    use proptest::prelude::*;
    let configs: Vec<_> = PROFILES.iter().map(|p| (p.configs)()).collect();
    (
        proptest::strategy::Union::new(configs),
        prop::collection::vec((1i64..=7, 0u8..10), 1..14),
    )
        .prop_map(|(mut config, chunks)| {
            if let Some(packed) = config.packed.as_mut() {
                packed.quant = Quant::None;
            }
            // Only the appends the model accepts: M7 needs every write to
            // succeed.
            let mut model = kvcheck::Model::new(&config).expect("profiles draw valid configs");
            let mut ops = Vec::new();
            for (len, roll) in chunks {
                let op = if roll == 0 {
                    Op::Reset
                } else {
                    Op::Write(Write::new(model.global_end() as i64, len))
                };
                if model.clone().apply(ops.len() as u64, &op).is_ok() {
                    model
                        .apply(ops.len() as u64, &op)
                        .expect("accepted on the clone");
                    ops.push(op);
                }
            }
            (config, ops)
        })
}

proptest::proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// M7 on traces built for it: the appends that the model accepts are
    /// split in every way the instances pick, on the model and the caches.
    #[test]
    fn chunking_holds_on_append_only_traces((config, ops) in append_only()) {
        for subject in [SubjectSpec::Reference, SubjectSpec::Cache] {
            let mut work = Work::default();
            let found = check(&config, &ops, &subject, &[Relation::ChunkingInvariant], 8, &mut work)
                .expect("every subject runs append-only traces");
            let splittable = ops.iter().any(|op| matches!(op, kvcheck::Op::Write(w) if w.len >= 2));
            proptest::prop_assert!(!splittable || work.runs > 1, "M7 did not apply to {:?}", ops);
            proptest::prop_assert!(found.is_none(), "{}", found.map(|d| format!("{d}\n{}", d.trace)).unwrap_or_default());
        }
    }
}
