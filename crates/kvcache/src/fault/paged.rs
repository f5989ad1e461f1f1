//! Faults of the paged prefix cache ([`PagedCache`]): seven mistakes a
//! real block manager (vLLM's block pool, sglang's radix cache) makes or
//! could make, each a switch inside the shipped cache (the bookkeeping they
//! break is private to it, so no wrapper could plant them), and
//! [`FaultyPagedCache`], the cache with one of them on.
//!
//! Each is caught by the lockstep check of `tests/caches/paged.rs` (the
//! same effect or error as `PrefixModel`, the same counts, every running
//! request reading back its own prefix's payload), without the cache's
//! own audit: a faulty implementation has none to offer. Every fault gives
//! wrong answers, never a panic. One is a policy error
//! ([`PrefixFault::is_policy`]): only the exact eviction order of §14
//! tells it apart, so the invariants of §17, which allow any order, may
//! not catch it.

use candle_core::{Device, Tensor};
use kvmodel::prefix::{BlockCounts, PrefixConfig, PrefixEffect, PrefixOp, RequestId};

use crate::paged::{PagedCache, PrefixCache, PrefixCacheError};

/// One bug of a paged prefix cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrefixFault {
    /// The prefix index matches a block by a weak hash of its tokens (their
    /// sum) and trusts it without comparing the tokens: `[1 2]` finds the
    /// block of `[2 1]`, and the request reads another prefix's KV.
    TrustWeakHash,
    /// `extend` never copies on write: new tokens land in a sealed block
    /// after a rollback, or in a partial block a fork still shares.
    SkipCopyOnWrite,
    /// A hit leaves the cached block in the LRU (vLLM's "touch" forgotten):
    /// the block is in use and evictable at once, so an allocation can
    /// hand it to another request that overwrites it.
    HitStaysEvictable,
    /// `finish` and `preempt` cache every full block, computed or not (vLLM
    /// caches a block's hash when it is scheduled, before the forward pass
    /// writes it): a request finished or preempted mid-prefill leaves a
    /// cached block whose rows were never written, and a later hit reads
    /// them.
    CacheUncomputedBlock,
    /// `rollback` drops tokens but leaves the computed count (and its hash
    /// chain) where it was (a rejected speculative draft not subtracted):
    /// tokens extended later count as computed and read the stale rows of
    /// the dropped ones.
    RollbackKeepsComputed,
    /// `preempt` releases a request's blocks but leaves its block table
    /// (a `get` where a `pop` was meant), so finishing the preempted
    /// request releases them again: a double free, the free count too high
    /// and a block handed out twice.
    DoubleReleaseOnFinishAfterPreempt,
    /// Eviction takes the most recently released cached block first (the
    /// free queue popped from its tail): an inverted LRU. A policy error:
    /// every answer is still a correct one, only the order of §14 is not
    /// kept, so the model catches it and the invariants of §17 may not.
    EvictIgnoresLru,
}

impl PrefixFault {
    /// Every fault of the paged prefix cache.
    pub const ALL: [PrefixFault; 7] = [
        PrefixFault::TrustWeakHash,
        PrefixFault::SkipCopyOnWrite,
        PrefixFault::HitStaysEvictable,
        PrefixFault::CacheUncomputedBlock,
        PrefixFault::RollbackKeepsComputed,
        PrefixFault::DoubleReleaseOnFinishAfterPreempt,
        PrefixFault::EvictIgnoresLru,
    ];

    /// The name used on command lines (`fault:NAME`).
    pub fn name(self) -> &'static str {
        match self {
            PrefixFault::TrustWeakHash => "trust-weak-hash",
            PrefixFault::SkipCopyOnWrite => "skip-copy-on-write",
            PrefixFault::HitStaysEvictable => "hit-stays-evictable",
            PrefixFault::CacheUncomputedBlock => "cache-uncomputed-block",
            PrefixFault::RollbackKeepsComputed => "rollback-keeps-computed",
            PrefixFault::DoubleReleaseOnFinishAfterPreempt => {
                "double-release-on-finish-after-preempt"
            }
            PrefixFault::EvictIgnoresLru => "evict-ignores-lru",
        }
    }

    /// One line saying what a real implementation gets wrong.
    pub fn doc(self) -> &'static str {
        match self {
            PrefixFault::TrustWeakHash => "the prefix index trusts a weak hash of a block's tokens without comparing them: [1 2] hits [2 1]",
            PrefixFault::SkipCopyOnWrite => "extend writes into a sealed or shared partial block instead of copying it first",
            PrefixFault::HitStaysEvictable => "a hit leaves the cached block in the LRU: an allocation can evict and overwrite a block in use",
            PrefixFault::CacheUncomputedBlock => "finish and preempt cache a full block whose positions were not all computed: a later hit reads rows never written",
            PrefixFault::RollbackKeepsComputed => "rollback leaves the computed count as it was: tokens extended after it count as computed and read the dropped tokens' stale rows",
            PrefixFault::DoubleReleaseOnFinishAfterPreempt => "finishing a preempted request releases its blocks again: a double free, the free count too high, a block handed out twice",
            PrefixFault::EvictIgnoresLru => "eviction takes the most recently released cached block first (an inverted LRU); a policy error: the model catches it, the invariants of §17 may not",
        }
    }

    /// Whether the fault is a policy error: every answer it gives is one a
    /// correct cache with another eviction policy could give, so only the
    /// model (the exact order of §14) is bound to catch it, not the
    /// invariants of §17.
    pub fn is_policy(self) -> bool {
        matches!(self, PrefixFault::EvictIgnoresLru)
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<PrefixFault> {
        PrefixFault::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for PrefixFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A [`PagedCache`] with one [`PrefixFault`]: every op behaves as the
/// shipped cache's but where the fault changes it. Its
/// [`PrefixCache::audit`] is the default (it checks nothing), so only a
/// lockstep check against the model can catch it.
pub struct FaultyPagedCache {
    inner: PagedCache,
    fault: PrefixFault,
}

impl FaultyPagedCache {
    /// The f32 paged cache for `config` on `device` with `fault` on.
    pub fn new(
        config: &PrefixConfig,
        device: &Device,
        fault: PrefixFault,
    ) -> Result<FaultyPagedCache, PrefixCacheError> {
        let mut inner = PagedCache::new(config, device)?;
        inner.plant(fault);
        Ok(FaultyPagedCache { inner, fault })
    }

    /// The fault planted.
    pub fn fault(&self) -> PrefixFault {
        self.fault
    }
}

impl PrefixCache for FaultyPagedCache {
    fn config(&self) -> &PrefixConfig {
        self.inner.config()
    }

    fn counts(&self) -> BlockCounts {
        self.inner.counts()
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixCacheError> {
        self.inner.apply(index, op)
    }

    fn read_rows(&self, request: RequestId) -> Result<Tensor, PrefixCacheError> {
        self.inner.read_rows(request)
    }
}
