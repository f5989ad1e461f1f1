//! The reference model of a prefix cache: docs/contract.md Part II read
//! literally.
//!
//! Requests are token lists; a full computed block is named by the token
//! prefix it ends (its *sealed* prefix), and the cache is a map from such
//! prefixes to the op that last released them. The only block identity
//! besides prefixes is a tag for a block not yet sealed, since two forks
//! can share one. Counts are derived from these sets on every call; there
//! is no pool, no free list, no hash table and no reference count to get
//! wrong. Every op works on a clone and commits only when every check has
//! passed, so a refused op changes nothing by construction.

use std::collections::{BTreeMap, BTreeSet};

use crate::prefix::config::PrefixConfig;
use crate::prefix::error::PrefixError;
use crate::prefix::op::{PrefixOp, RequestId, Token};
use crate::prefix::outcome::{BlockCounts, PrefixEffect};
use crate::prefix::payload::payload_rows;

/// One block a request holds (docs/contract.md §12).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Holding {
    /// The one block that holds this prefix's KV: full, computed, never
    /// written again, shared by every request whose tokens start with it.
    Sealed(Vec<Token>),
    /// A block not sealed (partial, or not fully computed), named by a tag
    /// that only `fork` shares.
    Private(u64),
}

/// A request as the model keeps it (docs/contract.md §12).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    tokens: Vec<Token>,
    computed: usize,
    /// One holding per block of `tokens` while running; none while
    /// preempted.
    blocks: Vec<Holding>,
    preempted: bool,
}

impl Request {
    /// The request's tokens: its prompt and everything extended since,
    /// less what was rolled back.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// How many leading tokens have their KV computed (0 while preempted).
    pub fn computed(&self) -> usize {
        self.computed
    }

    /// Whether the request is preempted (holds no block, awaits `resume`).
    pub fn is_preempted(&self) -> bool {
        self.preempted
    }
}

/// The reference model of one prefix cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PrefixModel {
    config: PrefixConfig,
    requests: BTreeMap<RequestId, Request>,
    /// Sealed prefixes no running request holds, with the index of the op
    /// that released them last (docs/contract.md §14).
    cached: BTreeMap<Vec<Token>, u64>,
    /// The tag of the next private block.
    next_tag: u64,
}

impl PrefixModel {
    /// A model of an empty pool: every block free. Refuses a configuration
    /// that breaks docs/contract.md §11 with `invalid_config` naming the
    /// field.
    pub fn new(config: &PrefixConfig) -> Result<PrefixModel, PrefixError> {
        config.validate()?;
        Ok(PrefixModel {
            config: config.clone(),
            requests: BTreeMap::new(),
            cached: BTreeMap::new(),
            next_tag: 0,
        })
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &PrefixConfig {
        &self.config
    }

    /// The request with this id, running or preempted.
    pub fn request(&self, request: RequestId) -> Option<&Request> {
        self.requests.get(&request)
    }

    /// Every request, running or preempted, by ascending id.
    pub fn requests(&self) -> impl Iterator<Item = (RequestId, &Request)> + '_ {
        self.requests.iter().map(|(&id, request)| (id, request))
    }

    fn running(&self) -> impl Iterator<Item = &Request> + '_ {
        self.requests.values().filter(|r| !r.preempted)
    }

    /// The sealed prefixes running requests hold (the in-use ones).
    fn held_sealed(&self) -> BTreeSet<&[Token]> {
        self.running()
            .flat_map(|r| &r.blocks)
            .filter_map(|h| match h {
                Holding::Sealed(prefix) => Some(prefix.as_slice()),
                Holding::Private(_) => None,
            })
            .collect()
    }

    /// The state with what no future outcome can tell apart renamed away:
    /// cached prefixes' last uses replaced by their ranks (the order §14
    /// evicts in is all that matters of them) and private block tags
    /// numbered by first appearance. Two models whose canonical forms are
    /// equal answer every op sequence alike: what an explorer deduplicates
    /// states by.
    pub fn canonical(&self) -> PrefixModel {
        let mut uses: Vec<u64> = self.cached.values().copied().collect();
        uses.sort_unstable();
        uses.dedup();
        let rank = |at: &u64| uses.binary_search(at).unwrap_or_default() as u64;
        let mut tags = BTreeMap::new();
        let requests = self
            .requests
            .iter()
            .map(|(&id, r)| {
                let blocks = r
                    .blocks
                    .iter()
                    .map(|h| match h {
                        Holding::Private(tag) => {
                            let next = tags.len() as u64;
                            Holding::Private(*tags.entry(*tag).or_insert(next))
                        }
                        sealed => sealed.clone(),
                    })
                    .collect();
                (
                    id,
                    Request {
                        blocks,
                        ..r.clone()
                    },
                )
            })
            .collect();
        PrefixModel {
            config: self.config.clone(),
            requests,
            cached: self
                .cached
                .iter()
                .map(|(p, at)| (p.clone(), rank(at)))
                .collect(),
            next_tag: tags.len() as u64,
        }
    }

    /// docs/contract.md §12: blocks in use are the distinct holdings of
    /// running requests; cached blocks the released sealed prefixes; free
    /// blocks the rest of `N`.
    pub fn counts(&self) -> BlockCounts {
        let holdings: BTreeSet<&Holding> = self.running().flat_map(|r| &r.blocks).collect();
        let (in_use, cached) = (holdings.len() as u64, self.cached.len() as u64);
        BlockCounts {
            in_use,
            cached,
            // Never saturates: every allocation checks room first (a
            // property test holds the model to it).
            free: (self.config.blocks as u64).saturating_sub(in_use + cached),
        }
    }

    /// The cached prefixes (released, evictable), in the order `evict`
    /// takes them (docs/contract.md §14): least recently released first,
    /// and among those released by the same op the longest first.
    pub fn eviction_order(&self) -> Vec<&[Token]> {
        let mut order: Vec<(&Vec<Token>, u64)> =
            self.cached.iter().map(|(p, &at)| (p, at)).collect();
        order.sort_by(|(a, at_a), (b, at_b)| {
            at_a.cmp(at_b).then(b.len().cmp(&a.len())).then(a.cmp(b))
        });
        order.into_iter().map(|(p, _)| p.as_slice()).collect()
    }

    /// Whether a block holds the KV of `prefix`: a running request holds it
    /// sealed, or it is cached.
    pub fn is_stored(&self, prefix: &[Token]) -> bool {
        self.cached.contains_key(prefix) || self.held_sealed().contains(prefix)
    }

    /// docs/contract.md §13: the longest block-aligned prefix of `tokens`
    /// whose every block is stored, in tokens, regardless of the hit rule.
    pub fn longest_stored_prefix(&self, tokens: &[Token]) -> usize {
        self.stored_prefix_up_to(tokens, tokens.len())
    }

    /// docs/contract.md §13: the hit `start` answers for `tokens` now: the
    /// longest stored prefix within the hit rule's cap.
    pub fn hit_for(&self, tokens: &[Token]) -> usize {
        self.stored_prefix_up_to(tokens, self.config.hit.cap(tokens.len()))
    }

    fn stored_prefix_up_to(&self, tokens: &[Token], cap: usize) -> usize {
        let held = self.held_sealed();
        let stored = |p: &[Token]| self.cached.contains_key(p) || held.contains(p);
        let b = self.config.block_size;
        let mut hit = 0;
        while hit + b <= cap.min(tokens.len()) && stored(&tokens[..hit + b]) {
            hit += b;
        }
        hit
    }

    /// The rows a `read` of `request` must return (docs/contract.md §16):
    /// the payload of its computed tokens, `[layer][position][dim]`, a
    /// windowed layer's from the window's start (§19). `None` for a request
    /// that does not exist or is preempted.
    pub fn expected_rows(&self, request: RequestId) -> Option<Vec<f32>> {
        let r = self.requests.get(&request).filter(|r| !r.preempted)?;
        let all = payload_rows(&self.config, &r.tokens[..r.computed]);
        let start = self.config.window_start(r.computed);
        Some(self.config.window_rows(&all, r.computed, start))
    }

    /// Where a read of `request` starts on a windowed layer
    /// (docs/contract.md §19; 0 without a window). `None` for a request
    /// that does not exist or is preempted.
    pub fn window_start(&self, request: RequestId) -> Option<usize> {
        let r = self.requests.get(&request).filter(|r| !r.preempted)?;
        Some(self.config.window_start(r.computed))
    }

    /// Applies `op`, which has index `index` in its trace (the time stamp
    /// of the blocks it releases, docs/contract.md §14). On error the model
    /// is unchanged.
    pub fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixError> {
        let mut next = self.clone();
        let (hit, read) = match op {
            PrefixOp::Start { request, tokens } => (Some(next.start(*request, tokens)?), None),
            PrefixOp::Compute { request, count } => {
                next.compute(*request, *count)?;
                (None, None)
            }
            PrefixOp::Extend { request, tokens } => {
                next.extend(index, *request, tokens)?;
                (None, None)
            }
            PrefixOp::Fork { request, into } => {
                next.fork(*request, *into)?;
                (None, None)
            }
            PrefixOp::Rollback { request, count } => {
                next.rollback(index, *request, *count)?;
                (None, None)
            }
            PrefixOp::Finish { request } => {
                next.finish(index, *request)?;
                (None, None)
            }
            PrefixOp::Preempt { request } => {
                next.preempt(index, *request)?;
                (None, None)
            }
            PrefixOp::Resume { request } => (Some(next.resume(*request)?), None),
            PrefixOp::Read { request } => (None, Some(next.read(*request)?)),
            PrefixOp::Evict { blocks } => {
                next.evict(*blocks)?;
                (None, None)
            }
            PrefixOp::Clear => {
                next.evict_oldest(next.cached.len());
                (None, None)
            }
        };
        *self = next;
        Ok(PrefixEffect {
            hit: hit.map(|h| h as u64),
            read: read.map(|r| r as u64),
            ..PrefixEffect::counts(self.counts())
        })
    }

    /// The running request `request`, or `unknown_request` / `preempted`.
    fn live(&self, op: &'static str, request: RequestId) -> Result<&Request, PrefixError> {
        match self.requests.get(&request) {
            None => Err(PrefixError::UnknownRequest { op, request }),
            Some(r) if r.preempted => Err(PrefixError::Preempted { op, request }),
            Some(r) => Ok(r),
        }
    }

    fn live_mut(&mut self, request: RequestId) -> &mut Request {
        self.requests
            .get_mut(&request)
            .expect("checked by `live` before any change")
    }

    /// Allocates `needed` new private blocks for `request`: free blocks
    /// first, then cached ones in eviction order (docs/contract.md §14), or
    /// `no_room`. The caller holds its hit before it asks, so a hit is
    /// never evicted to make room for the request that reuses it.
    fn allocate(
        &mut self,
        op: &'static str,
        request: RequestId,
        needed: usize,
    ) -> Result<Vec<Holding>, PrefixError> {
        let counts = self.counts();
        let (free, cached) = (counts.free as usize, counts.cached as usize);
        if needed > free + cached {
            return Err(PrefixError::NoRoom {
                op,
                request,
                needed,
                free,
                cached,
            });
        }
        self.evict_oldest(needed.saturating_sub(free));
        let first = self.next_tag;
        self.next_tag += needed as u64;
        Ok((first..self.next_tag).map(Holding::Private).collect())
    }

    /// Drops a holding some request gave up: a sealed prefix no running
    /// request holds any more is cached, stamped `index`; a private block
    /// no one holds is free (it is simply no longer counted).
    fn release(&mut self, index: u64, holding: Holding) {
        if let Holding::Sealed(prefix) = holding {
            if !self.held_sealed().contains(prefix.as_slice()) {
                self.cached.insert(prefix, index);
            }
        }
    }

    fn evict_oldest(&mut self, blocks: usize) {
        let victims: Vec<Vec<Token>> = self
            .eviction_order()
            .into_iter()
            .take(blocks)
            .map(<[Token]>::to_vec)
            .collect();
        for prefix in victims {
            self.cached.remove(&prefix);
        }
    }
}

mod ops;

#[cfg(test)]
mod audit;
