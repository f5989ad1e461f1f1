//! docs/contract.md invariants of the reference model on random op sequences: after
//! any op `|R| ≤ C`, protected positions are never evicted, views are
//! ascending without duplicates, and a refused op changes nothing.

use kvcheck::engine::strategy::{ops, RefState, PROFILES};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

fn check_sequence(
    mut state: RefState,
    runner: &mut TestRunner,
    steps: usize,
) -> Result<(), TestCaseError> {
    for _ in 0..steps {
        let op = ops(&state)
            .new_tree(runner)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .current();
        let before = state.model.clone();
        let protected_before = before.protected();
        let index = state.steps;
        let result = state.model.clone().apply(index, &op);
        state.apply(&op);
        let model = &state.model;
        prop_assert!(
            model.resident_len() <= model.capacity(),
            "|R| > C after {op}"
        );
        match result {
            Err(e) => prop_assert_eq!(&before, model, "refused {} ({}) changed the model", op, e),
            Ok(effect) => {
                if let Some(visible) = &effect.visible {
                    prop_assert!(
                        visible.windows(2).all(|w| w[0] < w[1]),
                        "view not ascending: {visible:?}"
                    );
                    for p in visible {
                        prop_assert!(model.writers(*p).is_some(), "view shows non-resident {p}");
                    }
                    for p in model.protected() {
                        prop_assert!(visible.contains(&p), "protected {p} not visible after {op}");
                    }
                }
                let dropped_by_op = matches!(
                    op,
                    kvmodel::Op::Rewind { .. } | kvmodel::Op::Reset | kvmodel::Op::Pin { .. }
                );
                if !dropped_by_op {
                    for p in protected_before {
                        prop_assert!(model.writers(p).is_some(), "protected {p} evicted by {op}");
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn model_invariants_hold_on_every_profile() {
    let config = ProptestConfig {
        rng_seed: RngSeed::Fixed(7),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    for profile in PROFILES {
        let configs = (profile.configs)();
        for case in 0..48 {
            let config = configs
                .new_tree(&mut runner)
                .expect("config strategies never reject")
                .current();
            if let Err(e) = check_sequence(RefState::new(&config), &mut runner, 60) {
                panic!(
                    "profile {} case {case}, config {config:?}: {e}",
                    profile.name
                );
            }
        }
    }
}
