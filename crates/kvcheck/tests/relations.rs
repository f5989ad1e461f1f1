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
