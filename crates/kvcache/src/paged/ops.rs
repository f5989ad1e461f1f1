//! The operations of docs/contract.md §15 on [`PagedCache`], one method
//! each, in the contract's order. Each runs every check of its op first,
//! then the tensor work (the only step that can fail outside the
//! contract), and only then changes the bookkeeping: a refused op changes
//! nothing.

use kvmodel::prefix::payload::{empty_prefix_hash, extend_hash, row_from_hash};
use kvmodel::prefix::{PrefixError, RequestId, Token};

use super::{PagedCache, PrefixCacheError, Request};

/// A count from an op: a negative one is `invalid_argument` naming the
/// argument (§15), before any other check.
fn non_negative(field: &'static str, value: i64) -> Result<usize, PrefixError> {
    // On a 32-bit target a count past usize is as impossible to satisfy
    // as any count past the request's tokens: saturate.
    u64::try_from(value)
        .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
        .map_err(|_| PrefixError::InvalidArgument { field, value })
}

impl PagedCache {
    /// The hash of `tokens` as a prefix (docs/contract.md §16).
    fn prefix_hash(&self, tokens: &[Token]) -> u64 {
        tokens
            .iter()
            .fold(empty_prefix_hash(self.config.seed), |h, &t| {
                extend_hash(h, t)
            })
    }

    /// docs/contract.md §15 `start`.
    pub(super) fn start(
        &mut self,
        request: RequestId,
        tokens: &[Token],
    ) -> Result<usize, PrefixCacheError> {
        if self.requests.contains_key(&request) {
            return Err(PrefixError::DuplicateRequest {
                op: "start",
                request,
            }
            .into());
        }
        if tokens.is_empty() {
            return Err(PrefixError::EmptyPrompt { request }.into());
        }
        self.admit("start", request, tokens.to_vec())
    }

    /// docs/contract.md §15 `resume`.
    pub(super) fn resume(&mut self, request: RequestId) -> Result<usize, PrefixCacheError> {
        let tokens = match self.requests.get(&request) {
            None => {
                return Err(PrefixError::UnknownRequest {
                    op: "resume",
                    request,
                }
                .into())
            }
            Some(r) if !r.preempted => return Err(PrefixError::NotPreempted { request }.into()),
            Some(r) => r.tokens.clone(),
        };
        self.admit("resume", request, tokens)
    }

    /// The hit and the allocation of `start` and `resume` (§13, §15): walk
    /// the index block by block up to the cap, reference the blocks found,
    /// allocate the rest. A hit's cached blocks are referenced before the
    /// allocation evicts, so it never evicts the hit it makes room for.
    fn admit(
        &mut self,
        op: &'static str,
        request: RequestId,
        tokens: Vec<Token>,
    ) -> Result<usize, PrefixCacheError> {
        let b = self.config.block_size;
        let cap = self.config.hit.cap(tokens.len());
        let mut hits = Vec::new();
        let mut parent = None;
        while (hits.len() + 1) * b <= cap {
            let j = hits.len();
            match self.blocks.lookup(parent, &tokens[j * b..(j + 1) * b]) {
                Some(id) => {
                    hits.push(id);
                    parent = Some(id);
                }
                None => break,
            }
        }
        let hit = hits.len() * b;
        let needed = self.config.blocks_for(tokens.len()) - hits.len();
        let hit_cached = hits.iter().filter(|&&id| self.blocks.is_cached(id)).count();
        let (free, cached) = (
            self.blocks.free_len(),
            // Never saturates unless a planted fault broke the LRU.
            self.blocks.cached_len().saturating_sub(hit_cached),
        );
        if needed > free + cached {
            return Err(PrefixError::NoRoom {
                op,
                request,
                needed,
                free,
                cached,
            }
            .into());
        }
        for &id in &hits {
            self.blocks.acquire(id);
        }
        let mut table = hits;
        table.extend(self.blocks.allocate(needed));
        let hash = self.prefix_hash(&tokens[..hit]);
        self.requests.insert(
            request,
            Request {
                tokens,
                computed: hit,
                hash,
                table,
                preempted: false,
            },
        );
        Ok(hit)
    }

    /// docs/contract.md §15 `compute`: writes the payload rows of the next
    /// `count` positions into their slots, one `slice_set` per block the
    /// positions touch, then seals (and merges) every block completed.
    pub(super) fn compute(
        &mut self,
        index: u64,
        request: RequestId,
        count: i64,
    ) -> Result<(), PrefixCacheError> {
        let k = non_negative("count", count)?;
        let r = self.live("compute", request)?;
        let (len, computed) = (r.tokens.len(), r.computed);
        // Saturating: only a planted fault (`crate::fault`) leaves more
        // computed than tokens, and it must not panic either.
        if k > len.saturating_sub(computed) {
            return Err(PrefixError::ComputePastEnd {
                request,
                count: k as u64,
                computed,
                len,
            }
            .into());
        }
        if k == 0 {
            return Ok(());
        }
        let (b, layers, width) = (
            self.config.block_size,
            self.config.layers,
            self.config.row_width,
        );
        let end = computed + k;
        let mut hash = r.hash;
        let hashes: Vec<u64> = r.tokens[computed..end]
            .iter()
            .map(|&t| {
                hash = extend_hash(hash, t);
                hash
            })
            .collect();
        let mut p = computed;
        while p < end {
            let (j, offset) = (p / b, p % b);
            let run = (b - offset).min(end - p);
            let mut values = Vec::with_capacity(layers * run * width);
            for layer in 0..layers {
                for h in &hashes[p - computed..p - computed + run] {
                    values.extend(row_from_hash(*h, layer, width));
                }
            }
            self.pool
                .write(r.table[j] as usize * b + offset, run, values)?;
            p += run;
        }
        let Some(mut r) = self.requests.remove(&request) else {
            return Ok(());
        };
        r.computed = end;
        r.hash = hash;
        for j in computed / b..end / b {
            self.seal(index, &mut r, j);
        }
        self.requests.insert(request, r);
        Ok(())
    }

    /// Seals block `j` of `r`, now full and computed (§12): if its prefix
    /// is already stored, `r` gives up its own block (free again) and
    /// references the stored one; otherwise its block becomes the one
    /// block of that prefix.
    pub(super) fn seal(&mut self, index: u64, r: &mut Request, j: usize) {
        let own = r.table[j];
        if self.blocks.is_sealed(own) {
            return;
        }
        let b = self.config.block_size;
        let parent = j.checked_sub(1).map(|p| r.table[p]);
        let tokens = &r.tokens[j * b..(j + 1) * b];
        match self.blocks.lookup(parent, tokens) {
            Some(stored) => {
                self.blocks.acquire(stored);
                r.table[j] = stored;
                self.blocks.release(own, index);
            }
            None => self.blocks.seal(own, parent, tokens, j as u32 + 1),
        }
    }

    /// docs/contract.md §15 `extend`, with its copy on write: a partial last
    /// block that is sealed or shared is copied into a fresh block before
    /// any new token lands in it.
    pub(super) fn extend(
        &mut self,
        index: u64,
        request: RequestId,
        tokens: &[Token],
    ) -> Result<(), PrefixCacheError> {
        let r = self.live("extend", request)?;
        if tokens.is_empty() {
            return Ok(());
        }
        let len = r.tokens.len();
        let last = r.table.last().copied();
        let copy = match last {
            Some(id) if len % self.config.block_size != 0 => {
                self.blocks.is_sealed(id) || self.blocks.block(id).refs > 1
            }
            _ => false,
        };
        #[cfg(feature = "faults")]
        let copy = copy && !self.planted(crate::fault::PrefixFault::SkipCopyOnWrite);
        let grown = self.config.blocks_for(len + tokens.len()) - self.config.blocks_for(len);
        let needed = grown + usize::from(copy);
        let (free, cached) = (self.blocks.free_len(), self.blocks.cached_len());
        if needed > free + cached {
            return Err(PrefixError::NoRoom {
                op: "extend",
                request,
                needed,
                free,
                cached,
            }
            .into());
        }
        if let (true, Some(old)) = (copy, last) {
            // The tensor copy goes first, into the block the allocation
            // will hand out, so that a backend failure leaves the
            // bookkeeping untouched.
            if let Some(&to) = self.blocks.peek_allocation(needed).first() {
                self.pool.copy_block(old, to)?;
            }
        }
        let mut fresh = self.blocks.allocate(needed).into_iter();
        let Some(mut r) = self.requests.remove(&request) else {
            return Ok(());
        };
        r.tokens.extend_from_slice(tokens);
        if copy {
            if let (Some(old), Some(into), Some(at)) =
                (last, fresh.next(), r.table.len().checked_sub(1))
            {
                r.table[at] = into;
                self.blocks.release(old, index);
            }
        }
        r.table.extend(fresh);
        self.requests.insert(request, r);
        Ok(())
    }

    /// docs/contract.md §15 `fork`: `into` references every block of
    /// `request`; nothing is allocated.
    pub(super) fn fork(
        &mut self,
        request: RequestId,
        into: RequestId,
    ) -> Result<(), PrefixCacheError> {
        let r = self.live("fork", request)?;
        if self.requests.contains_key(&into) {
            return Err(PrefixError::DuplicateRequest {
                op: "fork",
                request: into,
            }
            .into());
        }
        if r.computed < r.tokens.len() {
            return Err(PrefixError::NotComputed {
                request,
                computed: r.computed,
                len: r.tokens.len(),
            }
            .into());
        }
        let copy = r.clone();
        for &id in &copy.table {
            self.blocks.acquire(id);
        }
        self.requests.insert(into, copy);
        Ok(())
    }

    /// docs/contract.md §15 `rollback`: blocks past the kept tokens are
    /// released; the last kept block stays, even a sealed one, until an
    /// `extend` copies it.
    pub(super) fn rollback(
        &mut self,
        index: u64,
        request: RequestId,
        count: i64,
    ) -> Result<(), PrefixCacheError> {
        let k = non_negative("count", count)?;
        let len = self.live("rollback", request)?.tokens.len();
        if k > len {
            return Err(PrefixError::RollbackTooFar {
                request,
                count: k as u64,
                len,
            }
            .into());
        }
        let kept = len - k;
        #[cfg(feature = "faults")]
        let keep_computed = self.planted(crate::fault::PrefixFault::RollbackKeepsComputed);
        #[cfg(not(feature = "faults"))]
        let keep_computed = false;
        let Some(mut r) = self.requests.remove(&request) else {
            return Ok(());
        };
        r.tokens.truncate(kept);
        if r.computed > kept && !keep_computed {
            r.computed = kept;
            r.hash = self.prefix_hash(&r.tokens);
        }
        let dropped = r.table.split_off(self.config.blocks_for(kept));
        for id in dropped {
            self.blocks.release(id, index);
        }
        self.requests.insert(request, r);
        Ok(())
    }

    /// docs/contract.md §15 `finish`.
    pub(super) fn finish(
        &mut self,
        index: u64,
        request: RequestId,
    ) -> Result<(), PrefixCacheError> {
        let r = self
            .requests
            .remove(&request)
            .ok_or(PrefixError::UnknownRequest {
                op: "finish",
                request,
            })?;
        #[cfg(feature = "faults")]
        let mut r = r;
        #[cfg(feature = "faults")]
        self.cache_uncomputed(index, &mut r);
        for id in r.table {
            self.blocks.release(id, index);
        }
        Ok(())
    }

    /// docs/contract.md §15 `preempt`: releases every block as `finish`
    /// does and keeps the request's tokens for `resume`.
    pub(super) fn preempt(
        &mut self,
        index: u64,
        request: RequestId,
    ) -> Result<(), PrefixCacheError> {
        self.live("preempt", request)?;
        let empty = empty_prefix_hash(self.config.seed);
        #[cfg(feature = "faults")]
        let keep_table = self.planted_preempt(index, request);
        let Some(r) = self.requests.get_mut(&request) else {
            return Ok(());
        };
        let table = std::mem::take(&mut r.table);
        #[cfg(feature = "faults")]
        if keep_table {
            r.table.clone_from(&table);
        }
        r.computed = 0;
        r.hash = empty;
        r.preempted = true;
        for id in table {
            self.blocks.release(id, index);
        }
        Ok(())
    }

    /// docs/contract.md §15 `evict`.
    pub(super) fn evict(&mut self, blocks: i64) -> Result<(), PrefixCacheError> {
        let k = non_negative("blocks", blocks)?;
        let cached = self.blocks.cached_len();
        if k > cached {
            return Err(PrefixError::EvictTooMany {
                blocks: k as u64,
                cached,
            }
            .into());
        }
        self.blocks.evict(k);
        Ok(())
    }
}
