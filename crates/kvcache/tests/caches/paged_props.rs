//! `PagedCache` and `PrefixModel` on random op sequences, in lockstep
//! (`paged::Lockstep`): after every op the same effect or the same error,
//! the same counts, the cache's own audit, the same eviction order, and
//! every running request reading back its own prefix's payload.
//!
//! The alphabet is small so that prefixes are shared: prompts are a prefix
//! of one story plus a short tail of three tokens, four request ids, and
//! every op of the family, fork, rollback, preempt / resume, evict and
//! clear included. `PROPTEST_CASES` overrides the number of sequences
//! (default 256).

use candle_core::{DType, Device};
use kvcache::PagedCache;
use kvmodel::prefix::{HitRule, PrefixConfig, PrefixOp, Token};
use proptest::prelude::*;

use super::paged::Lockstep;

pub fn configs() -> impl Strategy<Value = PrefixConfig> {
    (
        2usize..=12,
        1usize..=3,
        1usize..=2,
        1usize..=3,
        any::<bool>(),
        0u64..4,
    )
        .prop_map(
            |(blocks, block_size, layers, row_width, whole, seed)| PrefixConfig {
                blocks,
                block_size,
                layers,
                row_width,
                hit: if whole {
                    HitRule::Whole
                } else {
                    HitRule::LeaveOne
                },
                seed,
                window: None,
            },
        )
}

/// A prefix of one shared story and a short tail of its own.
fn prompts(max_tail: usize) -> impl Strategy<Value = Vec<Token>> {
    const STORY: [Token; 8] = [0, 1, 2, 0, 2, 1, 1, 0];
    (
        0..=STORY.len(),
        proptest::collection::vec(0u32..3, 0..max_tail),
    )
        .prop_map(|(shared, tail)| STORY[..shared].iter().copied().chain(tail).collect())
}

fn ops() -> impl Strategy<Value = PrefixOp> {
    let request = 0u32..4;
    prop_oneof![
        4 => (request.clone(), prompts(3)).prop_map(|(request, tokens)| PrefixOp::Start { request, tokens }),
        5 => (request.clone(), -1i64..8).prop_map(|(request, count)| PrefixOp::Compute { request, count }),
        3 => (request.clone(), proptest::collection::vec(0u32..3, 0..4)).prop_map(|(request, tokens)| PrefixOp::Extend { request, tokens }),
        3 => (request.clone(), request.clone()).prop_map(|(request, into)| PrefixOp::Fork { request, into }),
        2 => (request.clone(), -1i64..4).prop_map(|(request, count)| PrefixOp::Rollback { request, count }),
        2 => request.clone().prop_map(|request| PrefixOp::Finish { request }),
        2 => request.clone().prop_map(|request| PrefixOp::Preempt { request }),
        2 => request.clone().prop_map(|request| PrefixOp::Resume { request }),
        2 => request.prop_map(|request| PrefixOp::Read { request }),
        1 => (-1i64..4).prop_map(|blocks| PrefixOp::Evict { blocks }),
        1 => Just(PrefixOp::Clear),
    ]
}

/// Up to `max` ops after a prologue that starts requests 0, 1 and 2 and
/// computes some of each prompt (and leaves id 3 for starts and forks), so
/// that most ops meet a request and sealed blocks exist from the start.
pub fn sequences(max: usize) -> impl Strategy<Value = Vec<PrefixOp>> {
    (
        proptest::collection::vec((prompts(3), 0i64..12), 3),
        proptest::collection::vec(ops(), 0..max),
    )
        .prop_map(|(prompts, ops)| {
            let prologue = prompts
                .into_iter()
                .zip(0..)
                .flat_map(|((tokens, count), request)| {
                    let count = count.min(tokens.len() as i64);
                    [
                        PrefixOp::Start { request, tokens },
                        PrefixOp::Compute { request, count },
                    ]
                });
            prologue.chain(ops).collect()
        })
}

/// Runs `ops` in lockstep on a cache of `dtype`, op `i` under `index(i)`,
/// comparing the eviction order after every op too; then finishes every
/// request and clears: every block must be free (P2, no leak).
fn check(
    config: &PrefixConfig,
    dtype: DType,
    ops: &[PrefixOp],
    index: impl Fn(usize) -> u64,
) -> Result<(), TestCaseError> {
    let cache = PagedCache::with_dtype(config, &Device::Cpu, dtype).unwrap();
    let mut lockstep = Lockstep::new(cache);
    let ids: Vec<u32> = (0..4).collect();
    let teardown = ids
        .iter()
        .map(|&request| PrefixOp::Finish { request })
        .chain([PrefixOp::Clear]);
    for (i, op) in ops.iter().cloned().chain(teardown).enumerate() {
        let outcome = lockstep.step(index(i), &op).map_err(TestCaseError::fail)?;
        if i >= ops.len() && !matches!(op, PrefixOp::Finish { .. }) {
            prop_assert!(outcome.error_kind().is_none());
        }
        let model: Vec<Vec<Token>> = lockstep
            .model
            .eviction_order()
            .into_iter()
            .map(<[Token]>::to_vec)
            .collect();
        prop_assert_eq!(lockstep.cache.eviction_order(), model, "after {}", op);
    }
    let counts = kvcache::PrefixCache::counts(&lockstep.cache);
    prop_assert_eq!(counts.free, config.blocks as u64, "a leak: {}", counts);
    Ok(())
}

proptest! {
    #[test]
    fn the_paged_cache_keeps_the_model_s_outcomes_counts_and_rows(
        config in configs(),
        ops in sequences(40),
    ) {
        check(&config, DType::F32, &ops, |i| i as u64)?;
    }

    #[test]
    fn the_paged_cache_agrees_when_op_indices_repeat_and_in_bf16(
        config in configs(),
        ops in sequences(30),
    ) {
        // Three ops share each index: releases tie on their last use and
        // the eviction order falls back to lengths and tokens (§14).
        check(&config, DType::BF16, &ops, |i| (i / 3) as u64)?;
    }
}

/// What the random sequences reach, so that a change to the strategies
/// cannot quietly stop exercising an op: every op succeeds somewhere,
/// every error kind an op can return is met, hits happen, and allocations
/// evict cached blocks.
#[test]
fn the_random_sequences_reach_every_op_error_hit_and_eviction() {
    use std::collections::BTreeMap;

    use kvmodel::prefix::{PrefixErrorKind, PrefixOutcome};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Default::default(), rng);
    let (mut succeeded, mut refused) = (BTreeMap::new(), BTreeMap::new());
    let (mut hits, mut evicting_allocations) = (0, 0);
    for _ in 0..256 {
        let (config, ops) = (configs(), sequences(40))
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let cache = PagedCache::new(&config, &Device::Cpu).unwrap();
        let mut lockstep = Lockstep::new(cache);
        for (i, op) in ops.iter().enumerate() {
            let cached: Vec<Vec<Token>> = lockstep
                .model
                .eviction_order()
                .into_iter()
                .map(<[Token]>::to_vec)
                .collect();
            match lockstep.step(i as u64, op).unwrap() {
                PrefixOutcome::Ok(effect) => {
                    *succeeded.entry(op.name()).or_insert(0) += 1;
                    hits += usize::from(effect.hit.unwrap_or(0) > 0);
                    let allocating = matches!(
                        op,
                        PrefixOp::Start { .. } | PrefixOp::Extend { .. } | PrefixOp::Resume { .. }
                    );
                    let evicted = cached.iter().any(|p| !lockstep.model.is_stored(p));
                    evicting_allocations += usize::from(allocating && evicted);
                }
                PrefixOutcome::Err(kind) => *refused.entry(kind).or_insert(0) += 1,
            }
        }
    }
    println!("succeeded {succeeded:?}\nrefused {refused:?}\nhits {hits}, evicting allocations {evicting_allocations}");
    assert_eq!(succeeded.len(), 11, "{succeeded:?}");
    for kind in PrefixErrorKind::OP_KINDS {
        assert!(refused.contains_key(&kind), "{kind} never met: {refused:?}");
    }
    assert!(hits > 100 && evicting_allocations >= 5);
}
