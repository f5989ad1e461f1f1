//! The paged prefix cache: docs/contract.md Part II (§10–§18) on a candle
//! block pool, checked op by op against `kvmodel::prefix::PrefixModel`.
//!
//! A prefix cache lets requests whose prompts start alike share the KV of
//! their common prefix. [`PagedCache`] does it the way vLLM's block
//! manager does, with every decision the contract fixes made exactly as
//! the model makes it:
//!
//! - **the pool** is one `[L, N·B, D]` tensor on a candle [`Device`]
//!   (`pool.rs`): block `b` holds slots `[b·B, (b+1)·B)` of every layer.
//!   `compute` writes the payload rows (§16) of the positions it computes
//!   into their slots, as a model runner writes KV; `read` gathers whole
//!   blocks through the request's block table with one `index_select`;
//! - **block tables**: a running request holds one block id per `B` of
//!   its tokens (`ops.rs`);
//! - **the prefix index** (`blocks.rs`) names a sealed block by its
//!   parent block and its own `B` tokens, so a hit walks the prompt block
//!   by block and compares every token: no hash is trusted alone;
//! - **reference counts** say which blocks are in use; a sealed block no
//!   one references is **cached**, in an LRU ordered exactly as §14 says
//!   (least recently released, longest prefix first), and an allocation
//!   that finds too few free blocks evicts from its head;
//! - **copy on write**: `extend` into a partial last block that is sealed
//!   (after a rollback) or shared (after a fork) copies the block first
//!   (§15);
//! - **merging**: a block whose prefix is already stored when `compute`
//!   seals it is given up for the stored one (§12, one block per prefix).
//!
//! Every op checks everything in the contract's order before it changes
//! anything, so a refusal returns the model's [`PrefixError`] (the same
//! kind and the same numbers) and leaves the cache as it was.
//!
//! ```
//! use candle_core::Device;
//! use kvcache::{PagedCache, PrefixCache};
//! use kvmodel::prefix::{check_rows, PrefixConfig, PrefixOp};
//!
//! let config = PrefixConfig::new(4, 2);
//! let mut cache = PagedCache::new(&config, &Device::Cpu).unwrap();
//! let ops = [
//!     PrefixOp::Start { request: 0, tokens: vec![7, 8, 9, 10, 11] },
//!     PrefixOp::Compute { request: 0, count: 5 },
//!     PrefixOp::Finish { request: 0 },
//!     // Shares the two full blocks [7 8] and [7 8 9 10]: a hit of 4.
//!     PrefixOp::Start { request: 1, tokens: vec![7, 8, 9, 10, 3] },
//!     PrefixOp::Compute { request: 1, count: 1 },
//! ];
//! for (i, op) in ops.iter().enumerate() {
//!     cache.apply(i as u64, op).unwrap();
//! }
//! let rows = cache.read_values(1).unwrap();
//! assert_eq!(check_rows(&config, &[7, 8, 9, 10, 3], 0, &rows), Ok(()));
//! ```

mod blocks;
mod ops;
#[cfg(feature = "faults")]
mod planted;
mod pool;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use kvmodel::prefix::{
    BlockCounts, PrefixConfig, PrefixEffect, PrefixError, PrefixErrorKind, PrefixOp, RequestId,
    Token,
};

use blocks::{BlockId, Blocks};
use pool::Pool;

/// Errors of a prefix cache: a refusal of the contract (docs/contract.md
/// §15, with the model's kind and numbers), or a failure of the tensor
/// backend. Every error leaves the cache's observable state as it was.
#[derive(Debug, thiserror::Error)]
pub enum PrefixCacheError {
    /// The operation (or the configuration) is refused by the contract.
    #[error(transparent)]
    Contract(#[from] PrefixError),
    /// The tensor backend failed (allocation, device error).
    #[error("tensor backend: {0}")]
    Backend(#[from] candle_core::Error),
}

impl PrefixCacheError {
    /// The docs/contract.md §15 kind of a refusal; `None` for a backend
    /// failure.
    pub fn kind(&self) -> Option<PrefixErrorKind> {
        match self {
            PrefixCacheError::Contract(e) => Some(e.kind()),
            PrefixCacheError::Backend(_) => None,
        }
    }
}

/// The operations of docs/contract.md §15 on an optimized prefix cache.
///
/// An implementation is correct when, for every op sequence,
/// [`PrefixCache::apply`] returns what `kvmodel::prefix::PrefixModel::apply`
/// returns (the same effect, or an error of the same kind) and every
/// [`PrefixCache::read_rows`] after a read is accepted by
/// `kvmodel::prefix::check_rows`.
pub trait PrefixCache {
    /// The configuration the cache was built with.
    fn config(&self) -> &PrefixConfig;
    /// The pool's accounting now (docs/contract.md §12).
    fn counts(&self) -> BlockCounts;
    /// Applies `op`, the op of index `index` in its trace (the time stamp
    /// of the blocks it releases, §14). On error the cache is unchanged.
    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixCacheError>;
    /// The rows a `read` of `request` returns now: for every layer, the
    /// rows of its computed positions, `[L, computed, D]` in the cache's
    /// dtype. Refuses a request that does not exist (`unknown_request`) or
    /// is preempted (`preempted`), as `read` does; changes nothing.
    fn read_rows(&self, request: RequestId) -> Result<Tensor, PrefixCacheError>;
    /// [`PrefixCache::read_rows`] as f32 values laid out
    /// `[layer][position][dim]`: what `kvmodel::prefix::check_rows` judges.
    fn read_values(&self, request: RequestId) -> Result<Vec<f32>, PrefixCacheError> {
        let rows = self.read_rows(request)?;
        Ok(rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
    }
    /// The cache's own invariants (reference counts, accounting, its
    /// index), for tests after every op: a description of the first one
    /// broken. The default checks nothing.
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A request as the cache keeps it.
#[derive(Clone, Debug)]
struct Request {
    /// Its prompt and what was extended since, less what was rolled back.
    tokens: Vec<Token>,
    /// Leading tokens whose rows are written.
    computed: usize,
    /// The hash of `tokens[..computed]` (docs/contract.md §16): `compute`
    /// continues the chain from it instead of hashing the prefix again.
    hash: u64,
    /// Block `j` holds positions `[jB, (j+1)B)`; empty while preempted.
    table: Vec<BlockId>,
    preempted: bool,
}

/// The paged prefix cache of docs/contract.md Part II on a candle block
/// pool (see the module docs).
///
/// Guarantees:
///
/// - the pool is allocated once, `[L, N·B, D]`, in the configured dtype
///   on the configured device; no op allocates a tensor proportional to
///   the pool;
/// - every op returns the effect `PrefixModel::apply` returns for the same
///   op and index, hits and counts included, or the very [`PrefixError`]
///   the model returns, and a refused op changes nothing;
/// - a read returns, bit for bit, the payload of each computed position's
///   own prefix (§16), whatever the dtype (the payload is exact in f32,
///   f16 and bf16);
/// - no input panics: negative counts, unknown ids and oversized requests
///   are typed errors.
#[derive(Clone, Debug)]
pub struct PagedCache {
    config: PrefixConfig,
    pool: Pool,
    blocks: Blocks,
    requests: HashMap<RequestId, Request>,
}

impl PagedCache {
    /// An empty f32 cache on `device`: every block free. Refuses a
    /// configuration that breaks docs/contract.md §11 with
    /// `invalid_config` naming the field, as `PrefixModel::new` does.
    pub fn new(config: &PrefixConfig, device: &Device) -> Result<PagedCache, PrefixCacheError> {
        PagedCache::with_dtype(config, device, DType::F32)
    }

    /// [`PagedCache::new`] with the pool in `dtype`: f32, f16 or bf16
    /// (every payload value is exact in the three); any other dtype is
    /// refused with `invalid_config` naming `dtype`.
    pub fn with_dtype(
        config: &PrefixConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<PagedCache, PrefixCacheError> {
        config.validate()?;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(PrefixError::InvalidConfig {
                field: "dtype",
                reason: format!("must be f32, f16 or bf16, got {dtype:?}"),
            }
            .into());
        }
        let pool = Pool::new(
            config.layers,
            config.blocks,
            config.block_size,
            config.row_width,
            dtype,
            device,
        )?;
        Ok(PagedCache {
            config: config.clone(),
            pool,
            blocks: Blocks::new(config.blocks),
            requests: HashMap::new(),
        })
    }

    /// Turns on one planted bug of the zoo (`crate::fault`).
    #[cfg(feature = "faults")]
    pub(crate) fn plant(&mut self, fault: crate::fault::PrefixFault) {
        self.blocks.fault = Some(fault);
    }

    /// Whether `fault` is planted (never, without the `faults` feature).
    #[cfg(feature = "faults")]
    fn planted(&self, fault: crate::fault::PrefixFault) -> bool {
        self.blocks.fault == Some(fault)
    }

    /// The pool's dtype.
    pub fn dtype(&self) -> DType {
        self.pool.dtype()
    }

    /// The pool's device.
    pub fn device(&self) -> &Device {
        self.pool.device()
    }

    /// The block ids request `request` holds, block `j` for its positions
    /// `[jB, (j+1)B)` (empty while preempted); `None` for an unknown
    /// request. Which block holds what is the cache's business (§12): this
    /// is for tests and explanations, never compared with a model.
    pub fn block_table(&self, request: RequestId) -> Option<&[u32]> {
        self.requests.get(&request).map(|r| r.table.as_slice())
    }

    /// The cached blocks in the order eviction takes them (§14), each as
    /// the token prefix it holds: what `PrefixModel::eviction_order`
    /// answers, for tests.
    pub fn eviction_order(&self) -> Vec<Vec<Token>> {
        let cached = self.blocks.cached_len();
        self.blocks
            .victims(cached)
            .into_iter()
            .map(|id| self.blocks.prefix(id))
            .collect()
    }

    /// The running request `request`, or `unknown_request` / `preempted`
    /// naming `op`.
    fn live(&self, op: &'static str, request: RequestId) -> Result<&Request, PrefixError> {
        match self.requests.get(&request) {
            None => Err(PrefixError::UnknownRequest { op, request }),
            Some(r) if r.preempted => Err(PrefixError::Preempted { op, request }),
            Some(r) => Ok(r),
        }
    }
}

impl PrefixCache for PagedCache {
    fn config(&self) -> &PrefixConfig {
        &self.config
    }

    fn counts(&self) -> BlockCounts {
        self.blocks.counts()
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixCacheError> {
        let (mut hit, mut read) = (None, None);
        match op {
            PrefixOp::Start { request, tokens } => hit = Some(self.start(*request, tokens)?),
            PrefixOp::Compute { request, count } => self.compute(index, *request, *count)?,
            PrefixOp::Extend { request, tokens } => self.extend(index, *request, tokens)?,
            PrefixOp::Fork { request, into } => self.fork(*request, *into)?,
            PrefixOp::Rollback { request, count } => self.rollback(index, *request, *count)?,
            PrefixOp::Finish { request } => self.finish(index, *request)?,
            PrefixOp::Preempt { request } => self.preempt(index, *request)?,
            PrefixOp::Resume { request } => hit = Some(self.resume(*request)?),
            PrefixOp::Read { request } => read = Some(self.live("read", *request)?.computed),
            PrefixOp::Evict { blocks } => self.evict(*blocks)?,
            PrefixOp::Clear => self.blocks.evict(self.blocks.cached_len()),
        }
        Ok(PrefixEffect {
            hit: hit.map(|h| h as u64),
            read: read.map(|r| r as u64),
            ..PrefixEffect::counts(self.blocks.counts())
        })
    }

    fn read_rows(&self, request: RequestId) -> Result<Tensor, PrefixCacheError> {
        let r = self.live("read", request)?;
        self.pool.gather(&r.table, r.computed)
    }

    /// Reference counts equal the block tables' entries, every block is
    /// exactly one of in use, cached and free, the counts add up to `N`,
    /// the prefix index names exactly the sealed blocks, each under its own
    /// prefix, every parent stored, and every running request's full
    /// computed blocks sealed.
    fn audit(&self) -> Result<(), String> {
        let b = self.config.block_size;
        let mut refs = vec![0u32; self.config.blocks];
        for (id, r) in &self.requests {
            if r.preempted && (!r.table.is_empty() || r.computed != 0) {
                return Err(format!("preempted r{id} holds blocks or computed tokens"));
            }
            if !r.preempted && r.table.len() != self.config.blocks_for(r.tokens.len()) {
                return Err(format!(
                    "r{id} holds {} blocks for {} tokens",
                    r.table.len(),
                    r.tokens.len()
                ));
            }
            for (j, &block) in r.table.iter().enumerate() {
                refs[block as usize] += 1;
                let sealed = self.blocks.is_sealed(block);
                if (j + 1) * b <= r.computed && !sealed {
                    return Err(format!(
                        "r{id} block {j} is full and computed but not sealed"
                    ));
                }
                if sealed {
                    let prefix = self.blocks.prefix(block);
                    let used = r.tokens.len().min(prefix.len());
                    if prefix.len() != (j + 1) * b || prefix[..used] != r.tokens[..used] {
                        return Err(format!("r{id} block {j} is sealed on another prefix"));
                    }
                }
            }
        }
        self.blocks.audit(&refs)?;
        let counts = self.blocks.counts();
        if counts.in_use + counts.cached + counts.free != self.config.blocks as u64 {
            return Err(format!(
                "{counts} does not add up to N = {}",
                self.config.blocks
            ));
        }
        Ok(())
    }
}
