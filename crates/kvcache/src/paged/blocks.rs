//! The bookkeeping of the block pool: reference counts, the prefix index,
//! the free list and the LRU of cached blocks (docs/contract.md §12, §14).
//!
//! No tensor is touched here: this file decides *which* block holds what,
//! `pool.rs` moves the bytes.
//!
//! # The prefix index
//!
//! A sealed block is named by its parent block (the stored block of the
//! prefix one block shorter, none for the first block) and its own `B`
//! tokens. The index is therefore a tree of blocks: the roots and every
//! block's children are hash maps keyed by the child's `B` tokens. A hash
//! map compares keys for equality after hashing, so two token blocks whose
//! hashes collide are never confused, and since the parent is named by its
//! identity rather than by a hash of its prefix, a lookup walk from the
//! root compares every token of the prompt, once. Nothing is trusted to a
//! hash alone.
//!
//! A parent's identity is stable while a child names it: the stored
//! prefixes are closed under prefixes (§14), so a parent is never evicted
//! (and its block reused) while a child is stored. [`Blocks::audit`]
//! checks that after every op in the tests.
//!
//! # The LRU
//!
//! Cached blocks (sealed, referenced by no running request) sit in an
//! ordered set keyed by `(last use, longest first, block)`: the order of
//! §14 up to its last tie-break, two prefixes of the same length released
//! under the same op index. No op releases two such blocks (one request's
//! blocks have distinct lengths), so the tie only arises when a caller
//! reuses an op index; [`Blocks::victims`] then compares the two prefixes'
//! tokens, as the model does.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use kvmodel::prefix::{BlockCounts, Token};

/// A block's index in the pool: block `b` holds slots `[b·B, (b+1)·B)`.
pub(crate) type BlockId = u32;

/// The prefix a sealed block ends, as the index names it.
#[derive(Clone, Debug)]
pub(crate) struct Seal {
    /// The block of the prefix one block shorter; `None` for a first block.
    pub parent: Option<BlockId>,
    /// The block's own `B` tokens.
    pub tokens: Box<[Token]>,
    /// Blocks in the prefix: the prefix has `depth · B` tokens.
    pub depth: u32,
}

/// One block of the pool.
#[derive(Clone, Debug, Default)]
pub(crate) struct Block {
    /// Block-table entries of running requests that name this block.
    pub refs: u32,
    /// The prefix it holds once sealed; `None` while private or free.
    pub seal: Option<Seal>,
    /// The op index that last made it unreferenced (§14), while cached.
    pub last_use: u64,
    /// Sealed blocks whose parent this block is, by their own tokens.
    children: HashMap<Box<[Token]>, BlockId>,
}

/// Where every block of the pool stands. Each block is exactly one of:
/// referenced (`refs > 0`, in use), cached (sealed, `refs == 0`, in
/// `lru`), free (in `free`).
#[derive(Clone, Debug)]
pub(crate) struct Blocks {
    blocks: Vec<Block>,
    /// First blocks of stored prefixes, by their tokens.
    roots: HashMap<Box<[Token]>, BlockId>,
    /// Free blocks; allocation pops from the end.
    free: Vec<BlockId>,
    /// Cached blocks in eviction order (see the module docs).
    lru: BTreeSet<(u64, Reverse<u32>, BlockId)>,
    /// Blocks with `refs > 0`.
    in_use: usize,
    /// A planted bug (feature `faults` only; see `crate::fault`).
    #[cfg(feature = "faults")]
    pub fault: Option<crate::fault::PrefixFault>,
}

impl Blocks {
    /// `n` free blocks; the first allocations take the lowest ids.
    pub fn new(n: usize) -> Blocks {
        Blocks {
            blocks: vec![Block::default(); n],
            roots: HashMap::new(),
            free: (0..n as BlockId).rev().collect(),
            lru: BTreeSet::new(),
            in_use: 0,
            #[cfg(feature = "faults")]
            fault: None,
        }
    }

    /// The accounting of §12, kept incrementally.
    pub fn counts(&self) -> BlockCounts {
        BlockCounts {
            in_use: self.in_use as u64,
            cached: self.lru.len() as u64,
            free: self.free.len() as u64,
        }
    }

    pub fn free_len(&self) -> usize {
        self.free.len()
    }

    pub fn cached_len(&self) -> usize {
        self.lru.len()
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }

    pub fn is_sealed(&self, id: BlockId) -> bool {
        self.block(id).seal.is_some()
    }

    /// Whether a block is cached: sealed and referenced by no one.
    pub fn is_cached(&self, id: BlockId) -> bool {
        let block = self.block(id);
        block.refs == 0 && block.seal.is_some()
    }

    fn children(&self, parent: Option<BlockId>) -> &HashMap<Box<[Token]>, BlockId> {
        match parent {
            None => &self.roots,
            Some(p) => &self.blocks[p as usize].children,
        }
    }

    fn children_mut(&mut self, parent: Option<BlockId>) -> &mut HashMap<Box<[Token]>, BlockId> {
        match parent {
            None => &mut self.roots,
            Some(p) => &mut self.blocks[p as usize].children,
        }
    }

    /// The stored block of the prefix `parent`'s prefix + `tokens`, if any.
    pub fn lookup(&self, parent: Option<BlockId>, tokens: &[Token]) -> Option<BlockId> {
        #[cfg(feature = "faults")]
        if self.fault == Some(crate::fault::PrefixFault::TrustWeakHash) {
            let weak = |t: &[Token]| t.iter().map(|&x| u64::from(x)).sum::<u64>();
            return self
                .children(parent)
                .iter()
                .filter(|(other, _)| weak(other) == weak(tokens))
                .map(|(_, &id)| id)
                .min();
        }
        self.children(parent).get(tokens).copied()
    }

    fn lru_key(&self, id: BlockId) -> (u64, Reverse<u32>, BlockId) {
        let block = self.block(id);
        let depth = block.seal.as_ref().map_or(0, |s| s.depth);
        (block.last_use, Reverse(depth), id)
    }

    /// One more reference to a stored block (a hit, a merge, a fork): a
    /// cached block leaves the LRU and is in use again.
    pub fn acquire(&mut self, id: BlockId) {
        if self.block(id).refs == 0 {
            #[cfg(feature = "faults")]
            let touch = self.fault != Some(crate::fault::PrefixFault::HitStaysEvictable);
            #[cfg(not(feature = "faults"))]
            let touch = true;
            if touch {
                let key = self.lru_key(id);
                self.lru.remove(&key);
            }
            self.in_use += 1;
        }
        self.blocks[id as usize].refs += 1;
    }

    /// One reference fewer (§15 "Release"): a sealed block no one
    /// references is cached with last use `index`, any other is free.
    pub fn release(&mut self, id: BlockId, index: u64) {
        let block = &mut self.blocks[id as usize];
        // Saturating: only a planted fault (`crate::fault`) can release an
        // unreferenced block, and it must not panic either.
        block.refs = block.refs.saturating_sub(1);
        if block.refs > 0 {
            return;
        }
        self.in_use = self.in_use.saturating_sub(1);
        if block.seal.is_some() {
            block.last_use = index;
            let key = self.lru_key(id);
            self.lru.insert(key);
        } else {
            self.free.push(id);
        }
    }

    /// Seals a private block as the one block of its prefix (§12). The
    /// caller has looked the prefix up and found it not stored.
    pub fn seal(&mut self, id: BlockId, parent: Option<BlockId>, tokens: &[Token], depth: u32) {
        let tokens: Box<[Token]> = tokens.into();
        self.children_mut(parent).insert(tokens.clone(), id);
        self.blocks[id as usize].seal = Some(Seal {
            parent,
            tokens,
            depth,
        });
    }

    /// The blocks `allocate(needed)` will return, in order, without
    /// changing anything: free blocks first (from the end of the list),
    /// then cached ones in eviction order. The caller has checked that
    /// `needed ≤ free + cached`.
    pub fn peek_allocation(&self, needed: usize) -> Vec<BlockId> {
        let from_free = needed.min(self.free.len());
        let mut ids: Vec<BlockId> = self.free.iter().rev().take(from_free).copied().collect();
        ids.extend(self.victims(needed - from_free));
        ids
    }

    /// Takes `needed` blocks, referenced once each: free blocks first, then
    /// cached blocks evicted in the order of §14 (§15 "Allocation").
    pub fn allocate(&mut self, needed: usize) -> Vec<BlockId> {
        let from_free = needed.min(self.free.len());
        let mut ids: Vec<BlockId> = self.free.split_off(self.free.len() - from_free);
        ids.reverse();
        for victim in self.victims(needed - from_free) {
            self.unstore(victim);
            ids.push(victim);
        }
        for &id in &ids {
            self.blocks[id as usize].refs = 1;
        }
        self.in_use += ids.len();
        ids
    }

    /// Evicts the first `k` cached blocks in eviction order; they are free.
    pub fn evict(&mut self, k: usize) {
        for victim in self.victims(k) {
            self.unstore(victim);
            self.free.push(victim);
        }
    }

    /// Drops a cached block from the LRU and the index: it holds nothing.
    fn unstore(&mut self, id: BlockId) {
        let key = self.lru_key(id);
        self.lru.remove(&key);
        if let Some(seal) = self.blocks[id as usize].seal.take() {
            let siblings = self.children_mut(seal.parent);
            // Only a planted fault (`crate::fault`) evicts a parent before
            // its children: the orphans' entry may since name another block.
            #[cfg(feature = "faults")]
            let indexed = siblings.get(&seal.tokens) == Some(&id);
            #[cfg(not(feature = "faults"))]
            let indexed = true;
            if indexed {
                siblings.remove(&seal.tokens);
            }
        }
        // The stored children of a block evicted under a planted fault are
        // orphans, unreachable as vLLM's orphaned hashes are, rather than
        // found under the prefix the block holds next.
        #[cfg(feature = "faults")]
        self.blocks[id as usize].children.clear();
    }

    /// The first `k` cached blocks in the order of §14: least recently
    /// released, longest first, then the smaller token sequence.
    pub fn victims(&self, k: usize) -> Vec<BlockId> {
        #[cfg(feature = "faults")]
        if self.fault == Some(crate::fault::PrefixFault::EvictIgnoresLru) {
            // The LRU read from its tail: most recently released first.
            return self.take_victims(self.lru.iter().rev(), k);
        }
        self.take_victims(self.lru.iter(), k)
    }

    /// The first `k` blocks of `entries`, LRU entries in the order to evict.
    fn take_victims<'a>(
        &self,
        entries: impl Iterator<Item = &'a (u64, Reverse<u32>, BlockId)>,
        k: usize,
    ) -> Vec<BlockId> {
        let mut victims = Vec::with_capacity(k);
        let mut entries = entries.peekable();
        while victims.len() < k {
            let Some(&(at, depth, first)) = entries.next() else {
                break;
            };
            // A run of equal (last use, length): only when a caller reused
            // an op index. Order it by tokens, as the model does.
            let mut run = vec![first];
            while let Some(&&(a, d, id)) = entries.peek() {
                if (a, d) != (at, depth) {
                    break;
                }
                run.push(id);
                entries.next();
            }
            if run.len() > 1 {
                run.sort_by_cached_key(|&id| self.prefix(id));
            }
            victims.extend(run.into_iter().take(k - victims.len()));
        }
        victims
    }

    /// The whole prefix a sealed block ends, walking its parents.
    pub fn prefix(&self, id: BlockId) -> Vec<Token> {
        // A prefix has `depth` blocks: the walk stops there even when a
        // planted fault (`crate::fault`) has looped the parents.
        let depth = self.block(id).seal.as_ref().map_or(0, |s| s.depth);
        let mut chain = Vec::with_capacity(depth as usize);
        let mut at = Some(id);
        while let Some(block) = at.and_then(|id| self.block(id).seal.as_ref()) {
            if chain.len() == depth as usize {
                break;
            }
            chain.push(&block.tokens);
            at = block.parent;
        }
        chain
            .into_iter()
            .rev()
            .flat_map(|t| t.iter().copied())
            .collect()
    }

    /// The bookkeeping's own invariants against the references the
    /// requests' block tables hold (`refs[b]` for block `b`): a
    /// description of the first one broken.
    pub fn audit(&self, refs: &[u32]) -> Result<(), String> {
        let (mut in_use, mut cached, mut free) = (0, 0, 0);
        for (id, block) in self.blocks.iter().enumerate() {
            let id = id as BlockId;
            if block.refs != refs[id as usize] {
                return Err(format!(
                    "block {id} counts {} references, the block tables hold {}",
                    block.refs, refs[id as usize]
                ));
            }
            let in_lru = self.lru.contains(&self.lru_key(id));
            let in_free = self.free.contains(&id);
            match (block.refs > 0, &block.seal) {
                (true, _) if in_lru || in_free => {
                    return Err(format!(
                        "block {id} is referenced but listed cached or free"
                    ))
                }
                (true, _) => in_use += 1,
                (false, Some(_)) if !in_lru || in_free => {
                    return Err(format!("sealed block {id} is unreferenced but not cached"))
                }
                (false, Some(_)) => cached += 1,
                (false, None) if !in_free || in_lru => {
                    return Err(format!("block {id} holds nothing but is not free"))
                }
                (false, None) => free += 1,
            }
            if let Some(seal) = &block.seal {
                if self.lookup(seal.parent, &seal.tokens) != Some(id) {
                    return Err(format!("sealed block {id} is not indexed under its prefix"));
                }
                if let Some(parent) = seal.parent {
                    let parent_depth = self.block(parent).seal.as_ref().map(|s| s.depth);
                    if parent_depth != Some(seal.depth - 1) {
                        return Err(format!(
                            "sealed block {id} names a parent that is not stored one block shorter"
                        ));
                    }
                }
            } else if !block.children.is_empty() {
                return Err(format!("unsealed block {id} has indexed children"));
            }
        }
        let entries = std::iter::once((None, &self.roots)).chain(
            self.blocks
                .iter()
                .enumerate()
                .map(|(id, b)| (Some(id as BlockId), &b.children)),
        );
        for (parent, map) in entries {
            for (tokens, &child) in map {
                let seal = self.block(child).seal.as_ref();
                if seal.map(|s| (s.parent, &s.tokens)) != Some((parent, tokens)) {
                    return Err(format!(
                        "the index names block {child}, which holds another prefix"
                    ));
                }
            }
        }
        if (in_use, cached, free) != (self.in_use, self.lru.len(), self.free.len()) {
            return Err(format!(
                "counted in_use {in_use} cached {cached} free {free}, kept {}",
                self.counts()
            ));
        }
        Ok(())
    }
}
