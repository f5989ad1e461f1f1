//! One test per behaviour of each op (docs/contract.md §13–§15), with the
//! counts worked out by hand in the comments.

use super::*;

fn pool(blocks: usize, block_size: usize) -> PrefixConfig {
    PrefixConfig::new(blocks, block_size)
}

#[test]
fn start_on_an_empty_cache_hits_nothing_and_allocates_every_block() {
    let effect = last_ok(&pool(4, 2), &[start(0, &[1, 2, 3])]);
    assert_eq!(effect.hit, Some(0));
    assert_eq!(counts(&effect), (2, 0, 2));
}

#[test]
fn a_hit_is_the_longest_stored_prefix_in_whole_blocks() {
    let config = pool(8, 2);
    let mut ops = cached_prompt(0, &[1, 2, 3, 4, 5, 6]).to_vec();
    // [1 2] and [1 2 3 4] are stored, [1 2 3 4 9 9] is not: hit 4, and
    // blocks_for(7) − 2 = 2 new blocks; [1 .. 6] stays cached.
    ops.push(start(1, &[1, 2, 3, 4, 9, 9, 9]));
    let effect = last_ok(&config, &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(4), (4, 1, 3)));
    // A prompt that shares only part of a block reuses the full blocks
    // before it: [1 2] is shared with request 1, one new block.
    ops.push(start(2, &[1, 2, 3]));
    let effect = last_ok(&config, &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(2), (5, 1, 2)));
}

#[test]
fn leave_one_recomputes_the_last_block_of_a_fully_cached_prompt() {
    let config = pool(8, 2);
    let mut ops = cached_prompt(0, &[1, 2, 3, 4]).to_vec();
    ops.push(start(1, &[1, 2, 3, 4]));
    let effect = last_ok(&config, &ops);
    // The cap is 3 tokens, so only [1 2] is reused; [1 2 3 4] stays cached.
    assert_eq!((effect.hit, counts(&effect)), (Some(2), (2, 1, 5)));
    // Computing the last block seals it onto the cached [1 2 3 4]: the
    // request's own copy is freed, the cached block is in use again.
    ops.push(compute(1, 2));
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 0, 6));
}

#[test]
fn whole_hits_cover_the_whole_prompt() {
    let config = PrefixConfig {
        hit: HitRule::Whole,
        ..pool(8, 2)
    };
    let mut ops = cached_prompt(0, &[1, 2, 3, 4]).to_vec();
    ops.push(start(1, &[1, 2, 3, 4]));
    let effect = last_ok(&config, &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(4), (2, 0, 6)));
    ops.push(read(1));
    assert_eq!(last_ok(&config, &ops).read, Some(4));
}

#[test]
fn a_hit_reuses_the_blocks_a_running_request_holds() {
    let ops = [
        start(0, &[1, 2, 3, 4, 5]),
        compute(0, 5),
        start(1, &[1, 2, 3, 4, 7]),
    ];
    let effect = last_ok(&pool(4, 2), &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(4), (4, 0, 0)));
}

#[test]
fn one_prefix_computed_twice_is_merged_into_one_block() {
    let config = pool(4, 2);
    let mut ops = vec![start(0, &[1, 2, 3]), start(1, &[1, 2, 3]), compute(0, 3)];
    assert_eq!(counts(&last_ok(&config, &ops)), (4, 0, 0));
    // Request 1 seals [1 2] too: it takes request 0's block, its own is freed.
    ops.push(compute(1, 3));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
}

#[test]
fn an_allocation_evicts_the_oldest_cached_blocks_longest_first() {
    let config = pool(3, 1);
    let mut ops = cached_prompt(0, &[1, 2, 3]).to_vec();
    ops.push(start(1, &[1, 5]));
    let (model, outcomes) = run(&config, &ops);
    // [1] is the hit; the one new block evicts [1 2 3], the longest of
    // the prefixes op 2 released.
    assert_eq!(
        outcomes[3],
        PrefixOutcome::Ok(PrefixEffect {
            hit: Some(1),
            ..PrefixEffect::counts(model.counts())
        })
    );
    assert_eq!(counts(&PrefixEffect::counts(model.counts())), (2, 1, 0));
    assert!(model.is_stored(&[1, 2]));
    assert!(!model.is_stored(&[1, 2, 3]));
}

#[test]
fn compute_of_nothing_changes_nothing() {
    let config = pool(4, 2);
    let ops = [start(0, &[1, 2, 3]), compute(0, 0)];
    let (model, _) = run(&config, &ops);
    assert_eq!(model.request(0).map(Request::computed), Some(0));
    assert_eq!(model, run(&config, &ops[..1]).0);
}

#[test]
fn extend_allocates_only_the_blocks_its_tokens_need() {
    let config = pool(4, 2);
    let mut ops = vec![start(0, &[1, 2, 3]), compute(0, 3), extend(0, &[4])];
    // Token 4 lands in the partial block request 0 holds alone: no copy.
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 0, 2));
    ops.push(extend(0, &[5]));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
    ops.push(extend(0, &[]));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
    let (model, _) = run(&config, &ops);
    let r = model.request(0).unwrap();
    assert_eq!((r.tokens(), r.computed()), (&[1, 2, 3, 4, 5][..], 3));
}

#[test]
fn fork_shares_every_block_and_extend_copies_a_shared_partial_block() {
    let config = pool(4, 2);
    let mut ops = vec![start(0, &[1, 2, 3]), compute(0, 3), fork(0, 1)];
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 0, 2));
    // Request 1 writes into the partial block it shares: it gets a copy.
    ops.push(extend(1, &[9]));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
    // Request 0 now holds its partial block alone: no copy.
    ops.push(extend(0, &[8]));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
    ops.extend([compute(0, 1), compute(1, 1)]);
    let (model, outcomes) = run(&config, &ops);
    assert!(outcomes.iter().all(|o| o.error_kind().is_none()));
    assert_eq!(counts(&PrefixEffect::counts(model.counts())), (3, 0, 1));
    for (request, tokens) in [(0, [1, 2, 3, 8]), (1, [1, 2, 3, 9])] {
        let rows = model.expected_rows(request).unwrap();
        assert_eq!(check_rows(&config, &tokens, 0, &rows), Ok(()));
    }
}

#[test]
fn rollback_releases_whole_blocks_and_keeps_a_cut_sealed_block_until_extend_copies_it() {
    let config = pool(5, 2);
    let mut ops = vec![start(0, &[1, 2, 3, 4, 5, 6]), compute(0, 6), rollback(0, 3)];
    // [1 .. 6] is released to the cache; [1 2 3 4] stays held, cut.
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 1, 2));
    let (model, _) = run(&config, &ops);
    let r = model.request(0).unwrap();
    assert_eq!((r.tokens(), r.computed()), (&[1, 2, 3][..], 3));
    // Extending into the sealed block copies it; the sealed one is cached.
    ops.push(extend(0, &[7]));
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 2, 1));
    ops.push(compute(0, 1));
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 2, 1));
    // The released blocks still serve hits: [1 2] held, [1 2 3 4] and
    // [1 .. 6] cached, and one new block for the seventh token.
    ops.push(start(1, &[1, 2, 3, 4, 5, 6, 0]));
    let effect = last_ok(&config, &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(6), (5, 0, 0)));
}

#[test]
fn rollback_may_drop_uncomputed_tokens_and_every_token() {
    let config = pool(4, 2);
    let mut ops = vec![start(0, &[1, 2, 3]), compute(0, 1), rollback(0, 2)];
    assert_eq!(counts(&last_ok(&config, &ops)), (1, 0, 3));
    ops.push(rollback(0, 1));
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 0, 4));
    let (model, _) = run(&config, &ops);
    assert_eq!(model.request(0).map(Request::tokens), Some(&[][..]));
}

#[test]
fn finish_caches_full_computed_blocks_and_frees_the_rest() {
    let config = pool(4, 2);
    let ops = [start(0, &[1, 2, 3, 4, 5]), compute(0, 4), finish(0)];
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 2, 2));
    // A full block with an uncomputed position is not sealed: freed.
    let ops = [start(0, &[1, 2, 3, 4]), compute(0, 3), finish(0)];
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 1, 3));
}

#[test]
fn preempt_keeps_the_request_and_resume_hits_its_cached_blocks() {
    let config = pool(4, 2);
    let mut ops = vec![
        start(0, &[1, 2, 3, 4, 5]),
        compute(0, 5),
        extend(0, &[6]),
        preempt(0),
    ];
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 2, 2));
    let (model, _) = run(&config, &ops);
    let r = model.request(0).unwrap();
    assert!(r.is_preempted());
    assert_eq!((r.tokens(), r.computed()), (&[1, 2, 3, 4, 5, 6][..], 0));
    ops.push(resume(0));
    let effect = last_ok(&config, &ops);
    assert_eq!((effect.hit, counts(&effect)), (Some(4), (3, 0, 1)));
    ops.push(compute(0, 2));
    assert_eq!(counts(&last_ok(&config, &ops)), (3, 0, 1));
    // A preempted request can also be finished: it holds nothing.
    let ops = [start(0, &[1]), preempt(0), finish(0)];
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 0, 4));
}

#[test]
fn read_returns_the_payload_of_the_computed_positions() {
    let config = PrefixConfig {
        layers: 2,
        row_width: 3,
        ..pool(4, 2)
    };
    let (model, outcomes) = run(&config, &[start(0, &[5, 6, 7]), compute(0, 2), read(0)]);
    assert!(matches!(&outcomes[2], PrefixOutcome::Ok(e) if e.read == Some(2)));
    let rows = model.expected_rows(0).unwrap();
    assert_eq!(rows.len(), 2 * 2 * 3);
    assert_eq!(rows, payload_rows(&config, &[5, 6]));
}

#[test]
fn evict_takes_the_least_recently_released_blocks_longest_first() {
    let config = pool(6, 1);
    let mut ops = cached_prompt(0, &[1, 2]).to_vec();
    ops.extend(cached_prompt(1, &[3, 4]));
    let (model, _) = run(&config, &ops);
    let order: Vec<&[Token]> = vec![&[1, 2], &[1], &[3, 4], &[3]];
    assert_eq!(model.eviction_order(), order);
    ops.push(evict(1));
    let (model, _) = run(&config, &ops);
    assert_eq!(model.eviction_order(), order[1..].to_vec());
    ops.push(evict(2));
    let (model, outcomes) = run(&config, &ops);
    assert_eq!(model.eviction_order(), order[3..].to_vec());
    assert!(matches!(outcomes.last(), Some(PrefixOutcome::Ok(e)) if counts(e) == (0, 1, 5)));
}

#[test]
fn a_hit_makes_a_block_recently_used() {
    let config = pool(6, 1);
    let mut ops = cached_prompt(0, &[1, 2]).to_vec();
    ops.extend(cached_prompt(1, &[3, 4]));
    // Request 2 reuses [1] (its cap is one token) and releases it at op 7.
    ops.extend([start(2, &[1, 9]), finish(2)]);
    let (model, _) = run(&config, &ops);
    let order: Vec<&[Token]> = vec![&[1, 2], &[3, 4], &[3], &[1]];
    assert_eq!(model.eviction_order(), order);
}

#[test]
fn clear_evicts_every_cached_block_and_keeps_the_ones_in_use() {
    let config = pool(6, 1);
    let mut ops = cached_prompt(0, &[1, 2]).to_vec();
    ops.extend([start(1, &[7, 8]), compute(1, 2), PrefixOp::Clear]);
    assert_eq!(counts(&last_ok(&config, &ops)), (2, 0, 4));
    ops.extend([finish(1), PrefixOp::Clear]);
    assert_eq!(counts(&last_ok(&config, &ops)), (0, 0, 6));
}

#[test]
fn ops_display_in_their_compact_form() {
    let shown: Vec<String> = [
        start(0, &[1, 2, 3]),
        start(1, &(0..10).collect::<Vec<_>>()),
        compute(0, 3),
        fork(0, 1),
        evict(2),
        PrefixOp::Clear,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        shown,
        [
            "start r0 [1 2 3]",
            "start r1 [0 1 2 3 4 5 6 7 … (10 tokens)]",
            "compute r0 3",
            "fork r0 r1",
            "evict 2",
            "clear"
        ]
    );
}
