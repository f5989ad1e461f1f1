//! Every error kind of docs/contract.md §11 and §15, the check order where
//! several apply, and the rule that a refused op changes nothing (checked
//! by `last_err` on every case).

use super::*;

fn pool() -> PrefixConfig {
    PrefixConfig::new(4, 2)
}

/// A running request 0 with tokens [1 2 3] computed, and a preempted
/// request 1.
fn setup() -> Vec<PrefixOp> {
    vec![
        start(0, &[1, 2, 3]),
        compute(0, 3),
        start(1, &[4]),
        preempt(1),
    ]
}

fn refused(op: PrefixOp) -> PrefixErrorKind {
    let mut ops = setup();
    ops.push(op);
    last_err(&pool(), &ops)
}

#[test]
fn a_negative_count_is_an_invalid_argument_before_anything_else() {
    for op in [compute(9, -1), rollback(9, -1), evict(-1), compute(1, -1)] {
        assert_eq!(
            refused(op.clone()),
            PrefixErrorKind::InvalidArgument,
            "{op}"
        );
    }
}

#[test]
fn an_op_on_a_request_that_does_not_exist_is_unknown_request() {
    for op in [
        compute(9, 1),
        extend(9, &[1]),
        fork(9, 8),
        rollback(9, 0),
        finish(9),
        preempt(9),
        resume(9),
        read(9),
    ] {
        assert_eq!(refused(op.clone()), PrefixErrorKind::UnknownRequest, "{op}");
    }
}

#[test]
fn a_request_id_in_use_is_a_duplicate_request() {
    for op in [start(0, &[1]), start(1, &[1]), fork(0, 0), fork(0, 1)] {
        assert_eq!(
            refused(op.clone()),
            PrefixErrorKind::DuplicateRequest,
            "{op}"
        );
    }
    // The id is checked before the prompt.
    assert_eq!(refused(start(0, &[])), PrefixErrorKind::DuplicateRequest);
}

#[test]
fn a_start_without_tokens_is_an_empty_prompt() {
    assert_eq!(refused(start(2, &[])), PrefixErrorKind::EmptyPrompt);
}

#[test]
fn an_op_on_a_preempted_request_is_preempted() {
    for op in [
        compute(1, 0),
        extend(1, &[1]),
        fork(1, 2),
        rollback(1, 0),
        preempt(1),
        read(1),
    ] {
        assert_eq!(refused(op.clone()), PrefixErrorKind::Preempted, "{op}");
    }
}

#[test]
fn resume_of_a_running_request_is_not_preempted() {
    assert_eq!(refused(resume(0)), PrefixErrorKind::NotPreempted);
}

#[test]
fn an_allocation_beyond_free_and_cached_blocks_is_no_room() {
    // Request 0 holds 2 of the 4 blocks.
    assert_eq!(refused(start(2, &[7, 7, 7, 7, 7])), PrefixErrorKind::NoRoom);
    assert_eq!(
        refused(extend(0, &[5, 6, 7, 8, 9, 10])),
        PrefixErrorKind::NoRoom
    );
    let mut ops = setup();
    ops.extend([start(2, &[7, 7, 7, 7])]);
    ops.push(resume(1));
    assert_eq!(last_err(&pool(), &ops), PrefixErrorKind::NoRoom);
}

#[test]
fn no_room_never_evicts_the_hit_it_is_making_room_for() {
    let config = PrefixConfig::new(2, 1);
    let mut ops = cached_prompt(0, &[1, 2]).to_vec();
    // Hit [1 2] (the cap is 2 of 3 tokens), one more block: both cached
    // blocks are the hit itself, so nothing is evictable.
    ops.push(start(1, &[1, 2, 3]));
    assert_eq!(last_err(&config, &ops), PrefixErrorKind::NoRoom);
}

#[test]
fn compute_past_the_last_token_is_compute_past_end() {
    assert_eq!(refused(compute(0, 1)), PrefixErrorKind::ComputePastEnd);
    let ops = [start(0, &[1, 2, 3]), compute(0, 4)];
    assert_eq!(last_err(&pool(), &ops), PrefixErrorKind::ComputePastEnd);
}

#[test]
fn rollback_of_more_tokens_than_the_request_has_is_rollback_too_far() {
    assert_eq!(refused(rollback(0, 4)), PrefixErrorKind::RollbackTooFar);
}

#[test]
fn fork_of_a_request_with_uncomputed_tokens_is_not_computed() {
    let ops = [start(0, &[1, 2, 3]), compute(0, 2), fork(0, 1)];
    assert_eq!(last_err(&pool(), &ops), PrefixErrorKind::NotComputed);
    // The new id is checked before the computed count.
    let ops = [start(0, &[1, 2, 3]), start(1, &[1]), fork(0, 1)];
    assert_eq!(last_err(&pool(), &ops), PrefixErrorKind::DuplicateRequest);
}

#[test]
fn evict_of_more_blocks_than_are_cached_is_evict_too_many() {
    assert_eq!(refused(evict(1)), PrefixErrorKind::EvictTooMany);
    let mut ops = cached_prompt(0, &[1, 2, 3, 4]).to_vec();
    ops.push(evict(3));
    assert_eq!(last_err(&pool(), &ops), PrefixErrorKind::EvictTooMany);
}

#[test]
fn every_op_kind_is_reachable() {
    let cases: Vec<(PrefixErrorKind, PrefixOp)> = vec![
        (PrefixErrorKind::InvalidArgument, evict(-1)),
        (PrefixErrorKind::UnknownRequest, read(9)),
        (PrefixErrorKind::DuplicateRequest, start(0, &[1])),
        (PrefixErrorKind::EmptyPrompt, start(3, &[])),
        (PrefixErrorKind::Preempted, read(1)),
        (PrefixErrorKind::NotPreempted, resume(0)),
        (PrefixErrorKind::NoRoom, start(3, &[0; 9])),
        (PrefixErrorKind::ComputePastEnd, compute(0, 1)),
        (PrefixErrorKind::RollbackTooFar, rollback(0, 9)),
        (PrefixErrorKind::NotComputed, fork(2, 3)),
        (PrefixErrorKind::EvictTooMany, evict(1)),
    ];
    let mut ops = setup();
    ops.push(start(2, &[5]));
    for (kind, op) in &cases {
        let mut with = ops.clone();
        with.push(op.clone());
        assert_eq!(last_err(&pool(), &with), *kind, "{op}");
    }
    let seen: Vec<PrefixErrorKind> = cases.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(seen, PrefixErrorKind::OP_KINDS);
}

#[test]
fn errors_name_the_numbers_that_explain_them() {
    let mut model = PrefixModel::new(&pool()).unwrap();
    model.apply(0, &start(0, &[1, 2, 3])).unwrap();
    let error = model.apply(1, &start(1, &[0; 7])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no_room: start of request 1 needs 4 new blocks but only 2 are free and 0 cached"
    );
    let error = model.apply(2, &compute(0, 5)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "compute_past_end: compute 5 of request 0 would pass its 3 tokens (0 computed)"
    );
}

#[test]
fn a_config_that_breaks_a_rule_is_invalid_config_naming_the_field() {
    let good = PrefixConfig::new(4, 2);
    let cases = [
        (
            "blocks",
            PrefixConfig {
                blocks: 0,
                ..good.clone()
            },
        ),
        (
            "block_size",
            PrefixConfig {
                block_size: 0,
                ..good.clone()
            },
        ),
        (
            "layers",
            PrefixConfig {
                layers: 0,
                ..good.clone()
            },
        ),
        (
            "row_width",
            PrefixConfig {
                row_width: 0,
                ..good.clone()
            },
        ),
        (
            "blocks",
            PrefixConfig {
                blocks: 1 << 20,
                row_width: 1 << 12,
                ..good.clone()
            },
        ),
    ];
    for (field, config) in cases {
        let error = PrefixModel::new(&config).unwrap_err();
        assert_eq!(error.kind(), PrefixErrorKind::InvalidConfig);
        assert!(
            matches!(&error, PrefixError::InvalidConfig { field: f, .. } if *f == field),
            "{error}"
        );
    }
    // The size rule's bound itself is allowed.
    let largest = PrefixConfig {
        blocks: 1 << 20,
        row_width: 1 << 10,
        block_size: 2,
        ..good
    };
    assert!(PrefixModel::new(&largest).is_ok());
}
