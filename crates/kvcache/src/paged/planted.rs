//! The hooks of the planted faults (`crate::fault::PrefixFault`, feature
//! `faults` only) that take more than a switch in place: each changes what
//! an op does to a request's blocks as the buggy block manager would.

use kvmodel::prefix::RequestId;

use super::{PagedCache, Request};
use crate::fault::PrefixFault;

impl PagedCache {
    /// `cache-uncomputed-block`: before `r`'s blocks are released, seals
    /// (or merges) every full block of it as if it were computed, so that
    /// the release caches it with whatever rows it holds.
    pub(super) fn cache_uncomputed(&mut self, index: u64, r: &mut Request) {
        if !self.planted(PrefixFault::CacheUncomputedBlock) {
            return;
        }
        let b = self.config.block_size;
        // A preempted request holds no block: nothing to seal.
        let full = (r.tokens.len() / b).min(r.table.len());
        for j in r.computed.min(r.tokens.len()) / b..full {
            self.seal(index, r, j);
        }
    }

    /// The planted side of `preempt`: `cache-uncomputed-block` caches the
    /// request's full blocks before they are released; the answer is
    /// whether `double-release-on-finish-after-preempt` keeps its block
    /// table after releasing it, for `finish` to release again.
    pub(super) fn planted_preempt(&mut self, index: u64, request: RequestId) -> bool {
        if self.planted(PrefixFault::CacheUncomputedBlock) {
            if let Some(mut r) = self.requests.remove(&request) {
                self.cache_uncomputed(index, &mut r);
                self.requests.insert(request, r);
            }
        }
        self.planted(PrefixFault::DoubleReleaseOnFinishAfterPreempt)
    }
}
