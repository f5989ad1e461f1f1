//! `PagedCache` in lockstep with `kvmodel::prefix::PrefixModel`
//! (docs/contract.md Part II): the lockstep driver every prefix test here
//! uses, unit tests of copy on write, merging, the eviction order and
//! leaks, and the documented trace of docs/kvtrace.md "Prefix caches"
//! replayed on the cache. The random op sequences are in `paged_props`.

use candle_core::{DType, Device};
use kvcache::{PagedCache, PrefixCache, PrefixCacheError};
use kvmodel::prefix::{
    check_rows, HitRule, PrefixConfig, PrefixEffect, PrefixErrorKind, PrefixModel, PrefixOp,
    PrefixOutcome, PrefixTrace, RequestId, Token,
};

/// One cache and the model, driven op by op.
pub struct Lockstep<C: PrefixCache> {
    pub model: PrefixModel,
    pub cache: C,
    step: usize,
}

impl<C: PrefixCache> Lockstep<C> {
    pub fn new(cache: C) -> Lockstep<C> {
        let model = PrefixModel::new(cache.config()).expect("the cache accepted the config");
        Lockstep {
            model,
            cache,
            step: 0,
        }
    }

    /// Applies `op` under `index` to both and checks, after it: the same
    /// effect or the very same error (kind and numbers), the cache's own
    /// audit, the same counts, and that every running request of the model
    /// reads back its own prefix's payload (§16, P3 and P6), a refused op
    /// included. The divergence as a message.
    pub fn step(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixOutcome, String> {
        let step = self.step;
        self.step += 1;
        let at = |what: String| format!("step {step} ({op}, index {index}): {what}");
        let expected = self.model.apply(index, op);
        let actual = self.cache.apply(index, op);
        match (&expected, &actual) {
            (Ok(e), Ok(a)) if e == a => {}
            (Err(e), Err(PrefixCacheError::Contract(a))) if e == a => {}
            _ => {
                return Err(at(format!(
                    "expected {expected:?}, the cache says {actual:?}"
                )))
            }
        }
        self.cache.audit().map_err(|e| at(format!("audit: {e}")))?;
        if self.cache.counts() != self.model.counts() {
            return Err(at(format!(
                "counts {} but the model's are {}",
                self.cache.counts(),
                self.model.counts()
            )));
        }
        let config = self.model.config().clone();
        for (id, r) in self.model.requests() {
            let read = self.cache.read_values(id);
            if r.is_preempted() {
                if read.as_ref().err().and_then(PrefixCacheError::kind)
                    != Some(PrefixErrorKind::Preempted)
                {
                    return Err(at(format!("read of preempted r{id} answers {read:?}")));
                }
                continue;
            }
            let rows = read.map_err(|e| at(format!("read of r{id}: {e}")))?;
            check_rows(&config, &r.tokens()[..r.computed()], 0, &rows)
                .map_err(|e| at(format!("r{id}: {e}")))?;
        }
        Ok(expected.into())
    }

    /// [`Lockstep::step`] over `ops`, op `i` under `index(i)`.
    pub fn run(
        &mut self,
        ops: &[PrefixOp],
        index: impl Fn(usize) -> u64,
    ) -> Result<Vec<PrefixOutcome>, String> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| self.step(index(i), op))
            .collect()
    }
}

/// `ops` in lockstep on a fresh CPU cache, op `i` under index `i`; panics
/// with the divergence.
pub fn assert_lockstep(config: &PrefixConfig, ops: &[PrefixOp]) -> Lockstep<PagedCache> {
    let cache = PagedCache::new(config, &Device::Cpu).expect("valid config");
    let mut lockstep = Lockstep::new(cache);
    if let Err(divergence) = lockstep.run(ops, |i| i as u64) {
        panic!("{divergence}");
    }
    lockstep
}

pub fn start(request: RequestId, tokens: &[Token]) -> PrefixOp {
    PrefixOp::Start {
        request,
        tokens: tokens.to_vec(),
    }
}

pub fn compute(request: RequestId, count: i64) -> PrefixOp {
    PrefixOp::Compute { request, count }
}

pub fn extend(request: RequestId, tokens: &[Token]) -> PrefixOp {
    PrefixOp::Extend {
        request,
        tokens: tokens.to_vec(),
    }
}

fn pool(blocks: usize, block_size: usize) -> PrefixConfig {
    PrefixConfig {
        layers: 2,
        row_width: 3,
        ..PrefixConfig::new(blocks, block_size)
    }
}

fn effect(outcome: &PrefixOutcome) -> &PrefixEffect {
    match outcome {
        PrefixOutcome::Ok(effect) => effect,
        PrefixOutcome::Err(kind) => panic!("refused: {kind}"),
    }
}

#[test]
fn extend_after_a_fork_copies_the_shared_partial_block() {
    let config = pool(4, 2);
    let ops = [
        start(0, &[1, 2, 3]),
        compute(0, 3),
        PrefixOp::Fork {
            request: 0,
            into: 1,
        },
    ];
    let mut lockstep = assert_lockstep(&config, &ops);
    let shared = lockstep.cache.block_table(1).unwrap().to_vec();
    assert_eq!(shared, lockstep.cache.block_table(0).unwrap());
    lockstep
        .run(&[extend(1, &[4]), compute(1, 1)], |i| 3 + i as u64)
        .unwrap();
    let (t0, t1) = (
        lockstep.cache.block_table(0).unwrap(),
        lockstep.cache.block_table(1).unwrap(),
    );
    assert_eq!(t0[0], t1[0], "the sealed block [1 2] stays shared");
    assert_ne!(t0[1], t1[1], "request 1 writes into its own copy");
    assert_eq!(t0[1], shared[1], "request 0 keeps the original");
}

#[test]
fn extend_after_a_rollback_into_a_sealed_block_copies_it_and_caches_the_original() {
    let config = pool(4, 2);
    let ops = [
        start(0, &[1, 2, 3, 4]),
        compute(0, 4),
        PrefixOp::Rollback {
            request: 0,
            count: 1,
        },
    ];
    let mut lockstep = assert_lockstep(&config, &ops);
    let sealed = lockstep.cache.block_table(0).unwrap()[1];
    let outcomes = lockstep
        .run(
            &[
                extend(0, &[9]),
                compute(0, 1),
                start(1, &[1, 2, 3, 4, 5]),
                compute(1, 1),
            ],
            |i| 3 + i as u64,
        )
        .unwrap();
    assert_ne!(lockstep.cache.block_table(0).unwrap()[1], sealed);
    assert_eq!(effect(&outcomes[2]).hit, Some(4), "[1 2 3 4] stayed cached");
    assert_eq!(lockstep.cache.block_table(1).unwrap()[1], sealed);
}

#[test]
fn a_prefix_computed_twice_at_once_is_merged_into_one_block() {
    let config = pool(6, 2);
    let ops = [
        start(0, &[1, 2, 3, 4, 5]),
        start(1, &[1, 2, 3, 4, 6]),
        compute(0, 5),
        compute(1, 5),
    ];
    let lockstep = assert_lockstep(&config, &ops);
    let (t0, t1) = (
        lockstep.cache.block_table(0).unwrap(),
        lockstep.cache.block_table(1).unwrap(),
    );
    assert_eq!(t0[..2], t1[..2], "one block per prefix");
    assert_ne!(t0[2], t1[2]);
    let counts = lockstep.cache.counts();
    assert_eq!((counts.in_use, counts.cached, counts.free), (4, 0, 2));
}

#[test]
fn blocks_with_the_same_tokens_under_different_prefixes_are_never_confused() {
    // [3 4] is the second block of both prompts, but after other first
    // blocks: the index names a block by its parent, so no hit.
    let config = pool(4, 2);
    let ops = [
        start(0, &[1, 2, 3, 4, 0]),
        compute(0, 5),
        PrefixOp::Finish { request: 0 },
        start(1, &[5, 6, 3, 4, 0]),
        compute(1, 5),
        PrefixOp::Read { request: 1 },
    ];
    let lockstep = assert_lockstep(&config, &ops);
    assert_eq!(lockstep.model.hit_for(&[5, 6, 3, 4, 0]), 4);
}

#[test]
fn eviction_follows_the_contract_order_even_when_indices_repeat() {
    let config = pool(8, 1);
    let ops = [
        start(0, &[1, 2, 3]),
        compute(0, 3),
        start(1, &[4, 5]),
        compute(1, 2),
        start(2, &[1, 7]),
        compute(2, 2),
        PrefixOp::Finish { request: 2 },
        PrefixOp::Finish { request: 1 },
        PrefixOp::Finish { request: 0 },
    ];
    // Index 0 for every op: every release ties on last use, and the
    // blocks of one length are ordered by their tokens.
    for index in [|i: usize| i as u64, |_| 0] {
        let cache = PagedCache::new(&config, &Device::Cpu).unwrap();
        let mut lockstep = Lockstep::new(cache);
        lockstep.run(&ops, index).unwrap();
        let model: Vec<Vec<Token>> = lockstep
            .model
            .eviction_order()
            .into_iter()
            .map(<[Token]>::to_vec)
            .collect();
        assert_eq!(lockstep.cache.eviction_order(), model);
        for k in 1..=3 {
            lockstep.step(9, &PrefixOp::Evict { blocks: k }).unwrap();
            assert_eq!(
                lockstep.cache.eviction_order().len(),
                lockstep.model.eviction_order().len()
            );
        }
    }
}

#[test]
fn an_allocation_evicts_least_recently_released_blocks_longest_first() {
    let config = pool(4, 1);
    let ops = [
        start(0, &[1, 2]),
        compute(0, 2),
        PrefixOp::Finish { request: 0 },
        start(1, &[3, 4]),
        compute(1, 2),
        PrefixOp::Finish { request: 1 },
    ];
    let mut lockstep = assert_lockstep(&config, &ops);
    let order: Vec<Vec<Token>> = vec![vec![1, 2], vec![1], vec![3, 4], vec![3]];
    assert_eq!(lockstep.cache.eviction_order(), order);
    // Needs 3 blocks, none free: evicts [1 2], then [1], then [3 4]; [3]
    // stays, and is the next start's hit.
    let outcomes = lockstep
        .run(&[start(2, &[5, 6, 7]), start(3, &[3, 9])], |i| 6 + i as u64)
        .unwrap();
    // The refused start changed nothing: its hit [3] is still cached.
    assert_eq!(lockstep.cache.eviction_order(), vec![vec![3]]);
    assert_eq!(effect(&outcomes[0]).hit, Some(0));
    assert_eq!(outcomes[1], PrefixOutcome::Err(PrefixErrorKind::NoRoom));
}

#[test]
fn finishing_everything_and_clearing_leaves_every_block_free() {
    let config = pool(5, 2);
    let ops = [
        start(0, &[1, 2, 3, 4, 5]),
        compute(0, 4),
        PrefixOp::Fork {
            request: 0,
            into: 1,
        },
        compute(0, 1),
        PrefixOp::Fork {
            request: 0,
            into: 1,
        },
        extend(1, &[6, 7]),
        compute(1, 2),
        PrefixOp::Preempt { request: 0 },
        PrefixOp::Resume { request: 0 },
        PrefixOp::Finish { request: 0 },
        PrefixOp::Finish { request: 1 },
        PrefixOp::Clear,
    ];
    let lockstep = assert_lockstep(&config, &ops);
    let counts = lockstep.cache.counts();
    assert_eq!((counts.in_use, counts.cached, counts.free), (0, 0, 5));
}

#[test]
fn reads_are_bit_exact_in_every_pool_dtype() {
    let config = PrefixConfig {
        hit: HitRule::Whole,
        seed: 3,
        ..pool(6, 3)
    };
    let ops = [
        start(0, &[1, 2, 3, 4, 5, 6, 7]),
        compute(0, 7),
        PrefixOp::Finish { request: 0 },
        start(1, &[1, 2, 3, 4, 5, 6, 8]),
        compute(1, 1),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let cache = PagedCache::with_dtype(&config, &Device::Cpu, dtype).unwrap();
        let mut lockstep = Lockstep::new(cache);
        lockstep.run(&ops, |i| i as u64).unwrap();
        let rows = lockstep.cache.read_rows(1).unwrap();
        assert_eq!((rows.dims3().unwrap(), rows.dtype()), ((2, 7, 3), dtype));
    }
    let refused = PagedCache::with_dtype(&config, &Device::Cpu, DType::U8).unwrap_err();
    assert!(
        refused.to_string().starts_with("invalid_config: dtype"),
        "{refused}"
    );
}

#[test]
fn every_refusal_is_the_model_s_error_and_nothing_panics() {
    let config = pool(3, 2);
    let ops = [
        start(0, &[1, 2, 3]),
        compute(0, i64::MAX),
        compute(0, i64::MIN),
        PrefixOp::Rollback {
            request: 0,
            count: i64::MAX,
        },
        PrefixOp::Evict { blocks: i64::MAX },
        PrefixOp::Evict { blocks: -1 },
        start(1, &vec![7; 1000]),
        start(0, &[1]),
        start(2, &[]),
        PrefixOp::Resume { request: 0 },
        PrefixOp::Fork {
            request: 0,
            into: 0,
        },
        PrefixOp::Fork {
            request: 0,
            into: 1,
        },
        PrefixOp::Read { request: u32::MAX },
        PrefixOp::Finish { request: u32::MAX },
        PrefixOp::Preempt { request: 0 },
        compute(0, 1),
        extend(0, &[1]),
        PrefixOp::Resume { request: 0 },
        PrefixOp::Resume { request: 0 },
        extend(0, &vec![1; 100]),
    ];
    let lockstep = assert_lockstep(&config, &ops);
    let invalid = PagedCache::new(&PrefixConfig::new(0, 1), &Device::Cpu).unwrap_err();
    assert_eq!(invalid.kind(), Some(PrefixErrorKind::InvalidConfig));
    drop(lockstep);
}

const KVTRACE_MD: &str = include_str!("../../../../docs/kvtrace.md");

/// Every ```json block of docs/kvtrace.md's "Prefix caches" section.
fn documented_traces() -> Vec<PrefixTrace> {
    let section = KVTRACE_MD
        .split_once("\n## Prefix caches\n")
        .expect("docs/kvtrace.md has a Prefix caches section")
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split("```json\n")
        .skip(1)
        .map(|block| {
            let json = block.split_once("\n```").expect("the block is closed").0;
            serde_json::from_str(json).expect("a prefix trace")
        })
        .collect()
}

#[test]
fn the_documented_traces_replay_on_the_cache_with_their_outcomes() {
    let traces = documented_traces();
    assert!(!traces.is_empty());
    for trace in traces {
        let expect = trace.expect.clone().expect("the example has outcomes");
        for dtype in [DType::F32, DType::BF16] {
            let cache = PagedCache::with_dtype(&trace.config, &Device::Cpu, dtype).unwrap();
            let mut lockstep = Lockstep::new(cache);
            let outcomes = lockstep
                .run(&trace.ops, |i| i as u64)
                .unwrap_or_else(|divergence| panic!("{divergence}"));
            assert_eq!(outcomes, expect);
        }
    }
}
