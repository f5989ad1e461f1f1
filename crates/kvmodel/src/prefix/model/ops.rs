//! The operations of docs/contract.md §15, one method each, in the order
//! the contract lists them. Each runs on the clone [`PrefixModel::apply`]
//! made and checks in the contract's order; `apply` commits the clone only
//! when the method returns `Ok`.

use super::{Holding, PrefixModel, Request};
use crate::prefix::error::{non_negative_count, PrefixError};
use crate::prefix::op::{RequestId, Token};

impl PrefixModel {
    /// docs/contract.md §15 `start`.
    pub(super) fn start(
        &mut self,
        request: RequestId,
        tokens: &[Token],
    ) -> Result<usize, PrefixError> {
        if self.requests.contains_key(&request) {
            return Err(PrefixError::DuplicateRequest {
                op: "start",
                request,
            });
        }
        if tokens.is_empty() {
            return Err(PrefixError::EmptyPrompt { request });
        }
        self.admit("start", request, tokens.to_vec())
    }

    /// docs/contract.md §15 `resume`.
    pub(super) fn resume(&mut self, request: RequestId) -> Result<usize, PrefixError> {
        let tokens = match self.requests.get(&request) {
            None => {
                return Err(PrefixError::UnknownRequest {
                    op: "resume",
                    request,
                })
            }
            Some(r) if !r.preempted => return Err(PrefixError::NotPreempted { request }),
            Some(r) => r.tokens.clone(),
        };
        self.requests.remove(&request);
        self.admit("resume", request, tokens)
    }

    /// The hit and the allocation of `start` and `resume` (§13, §15).
    fn admit(
        &mut self,
        op: &'static str,
        request: RequestId,
        tokens: Vec<Token>,
    ) -> Result<usize, PrefixError> {
        let b = self.config.block_size;
        let hit = self.hit_for(&tokens);
        let reused: Vec<Holding> = (1..=hit / b)
            .map(|k| Holding::Sealed(tokens[..k * b].to_vec()))
            .collect();
        for holding in &reused {
            if let Holding::Sealed(prefix) = holding {
                self.cached.remove(prefix);
            }
        }
        let needed = self.config.blocks_for(tokens.len()) - reused.len();
        self.requests.insert(
            request,
            Request {
                tokens,
                computed: hit,
                blocks: reused,
                preempted: false,
            },
        );
        let fresh = self.allocate(op, request, needed)?;
        self.live_mut(request).blocks.extend(fresh);
        Ok(hit)
    }

    /// docs/contract.md §15 `compute`: every block the write completes is
    /// sealed, and merged with the block that already holds its prefix.
    pub(super) fn compute(&mut self, request: RequestId, count: i64) -> Result<(), PrefixError> {
        let n = non_negative_count("count", count)?;
        let r = self.live("compute", request)?;
        let (len, computed) = (r.tokens.len(), r.computed);
        if n > (len - computed) as u64 {
            return Err(PrefixError::ComputePastEnd {
                request,
                count: n,
                computed,
                len,
            });
        }
        let b = self.config.block_size;
        let r = self.live_mut(request);
        r.computed += n as usize;
        let mut sealed = Vec::new();
        for j in 0..r.computed / b {
            if let Holding::Private(_) = r.blocks[j] {
                let prefix = r.tokens[..(j + 1) * b].to_vec();
                r.blocks[j] = Holding::Sealed(prefix.clone());
                sealed.push(prefix);
            }
        }
        // A prefix already cached is now held: the request's own copy is
        // given up (it was private, so it is free) and the cached block
        // is in use again.
        for prefix in sealed {
            self.cached.remove(&prefix);
        }
        Ok(())
    }

    /// docs/contract.md §15 `extend`.
    pub(super) fn extend(
        &mut self,
        index: u64,
        request: RequestId,
        tokens: &[Token],
    ) -> Result<(), PrefixError> {
        let r = self.live("extend", request)?;
        if tokens.is_empty() {
            return Ok(());
        }
        let len = r.tokens.len();
        let shared = |tag: u64| {
            self.running()
                .filter(|other| other.blocks.contains(&Holding::Private(tag)))
                .count()
                > 1
        };
        // Copy on write: new tokens land in a partial last block only if
        // this request alone holds it and it is not sealed.
        let copy = len % self.config.block_size != 0
            && match r.blocks.last() {
                Some(Holding::Sealed(_)) => true,
                Some(Holding::Private(tag)) => shared(*tag),
                None => false,
            };
        let grown = self.config.blocks_for(len + tokens.len()) - self.config.blocks_for(len);
        let mut fresh = self.allocate("extend", request, grown + usize::from(copy))?;
        let r = self.live_mut(request);
        r.tokens.extend_from_slice(tokens);
        if copy {
            let last = r.blocks.len() - 1;
            let old = std::mem::replace(&mut r.blocks[last], fresh.remove(0));
            r.blocks.extend(fresh);
            self.release(index, old);
        } else {
            r.blocks.extend(fresh);
        }
        Ok(())
    }

    /// docs/contract.md §15 `fork`.
    pub(super) fn fork(&mut self, request: RequestId, into: RequestId) -> Result<(), PrefixError> {
        let r = self.live("fork", request)?;
        if self.requests.contains_key(&into) {
            return Err(PrefixError::DuplicateRequest {
                op: "fork",
                request: into,
            });
        }
        if r.computed < r.tokens.len() {
            return Err(PrefixError::NotComputed {
                request,
                computed: r.computed,
                len: r.tokens.len(),
            });
        }
        let copy = r.clone();
        self.requests.insert(into, copy);
        Ok(())
    }

    /// docs/contract.md §15 `rollback`.
    pub(super) fn rollback(
        &mut self,
        index: u64,
        request: RequestId,
        count: i64,
    ) -> Result<(), PrefixError> {
        let n = non_negative_count("count", count)?;
        let len = self.live("rollback", request)?.tokens.len();
        if n > len as u64 {
            return Err(PrefixError::RollbackTooFar {
                request,
                count: n,
                len,
            });
        }
        let kept = len - n as usize;
        let keep_blocks = self.config.blocks_for(kept);
        let r = self.live_mut(request);
        r.tokens.truncate(kept);
        r.computed = r.computed.min(kept);
        let dropped = r.blocks.split_off(keep_blocks);
        for holding in dropped {
            self.release(index, holding);
        }
        Ok(())
    }

    /// docs/contract.md §15 `finish`.
    pub(super) fn finish(&mut self, index: u64, request: RequestId) -> Result<(), PrefixError> {
        let r = self
            .requests
            .remove(&request)
            .ok_or(PrefixError::UnknownRequest {
                op: "finish",
                request,
            })?;
        for holding in r.blocks {
            self.release(index, holding);
        }
        Ok(())
    }

    /// docs/contract.md §15 `preempt`.
    pub(super) fn preempt(&mut self, index: u64, request: RequestId) -> Result<(), PrefixError> {
        self.live("preempt", request)?;
        let r = self.live_mut(request);
        let blocks = std::mem::take(&mut r.blocks);
        r.computed = 0;
        r.preempted = true;
        for holding in blocks {
            self.release(index, holding);
        }
        Ok(())
    }

    /// docs/contract.md §15 `read`: the positions read.
    pub(super) fn read(&self, request: RequestId) -> Result<usize, PrefixError> {
        Ok(self.live("read", request)?.computed)
    }

    /// docs/contract.md §15 `evict`.
    pub(super) fn evict(&mut self, blocks: i64) -> Result<(), PrefixError> {
        let k = non_negative_count("blocks", blocks)?;
        if k > self.cached.len() as u64 {
            return Err(PrefixError::EvictTooMany {
                blocks: k,
                cached: self.cached.len(),
            });
        }
        self.evict_oldest(k as usize);
        Ok(())
    }
}
