//! Faults of the paged prefix cache ([`PagedCache`]): three mistakes a
//! real block manager makes, each a switch inside the shipped cache (the
//! bookkeeping they break is private to it, so no wrapper could plant
//! them), and [`FaultyPagedCache`], the cache with one of them on.
//!
//! Each is caught by the lockstep check of `tests/caches/paged.rs` (the
//! same effect or error as `PrefixModel`, the same counts, every running
//! request reading back its own prefix's payload), without the cache's
//! own audit: a faulty implementation has none to offer.

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
}

impl PrefixFault {
    /// Every fault of the paged prefix cache.
    pub const ALL: [PrefixFault; 3] = [
        PrefixFault::TrustWeakHash,
        PrefixFault::SkipCopyOnWrite,
        PrefixFault::HitStaysEvictable,
    ];

    /// The name used on command lines (`fault:NAME`).
    pub fn name(self) -> &'static str {
        match self {
            PrefixFault::TrustWeakHash => "trust-weak-hash",
            PrefixFault::SkipCopyOnWrite => "skip-copy-on-write",
            PrefixFault::HitStaysEvictable => "hit-stays-evictable",
        }
    }

    /// One line saying what a real implementation gets wrong.
    pub fn doc(self) -> &'static str {
        match self {
            PrefixFault::TrustWeakHash => "the prefix index trusts a weak hash of a block's tokens without comparing them: [1 2] hits [2 1]",
            PrefixFault::SkipCopyOnWrite => "extend writes into a sealed or shared partial block instead of copying it first",
            PrefixFault::HitStaysEvictable => "a hit leaves the cached block in the LRU: an allocation can evict and overwrite a block in use",
        }
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
