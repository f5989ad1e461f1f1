//! The block pool's tensor: `[L, N·B, D]` on a candle device, the layout
//! of the payload rows (`[layer][position][dim]`, docs/contract.md §16)
//! with positions replaced by slots. Block `b` holds slots `[b·B, (b+1)·B)`
//! of every layer, as vLLM's per-layer `[num_blocks, block_size, heads,
//! head_dim]` caches do.
//!
//! Three moves, each one candle op on any device (no separate CPU path is
//! needed: `slice_set` is an in-place strided copy and `index_select` a
//! gather on every backend):
//!
//! - **write**: the rows of a run of consecutive positions within one
//!   block, `[L, run, D]`, land with one `slice_set` at the run's first
//!   slot;
//! - **copy**: copy on write of one block into another (a temporary `[L,
//!   B, D]` copy, because `slice_set` refuses a source that shares the
//!   pool's storage);
//! - **gather**: a read selects whole blocks through the block table with
//!   one `index_select` on the pool seen as `[L, N, B·D]`: one index per
//!   block, not per row, and the result is already `[L, positions, D]`
//!   once reshaped and cut to the computed positions.

use candle_core::{DType, Device, Tensor};

use super::blocks::BlockId;
use crate::paged::PrefixCacheError;

/// The `[L, N·B, D]` pool of one [`PagedCache`](super::PagedCache).
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    /// `[L, N·B, D]`, contiguous, never handed out: reads are gathers
    /// (copies), so no caller ever aliases it.
    rows: Tensor,
    layers: usize,
    blocks: usize,
    block_size: usize,
    row_width: usize,
}

impl Pool {
    /// A zeroed pool. Zero is never a payload value (§16), so a slot read
    /// before it was written shows as wrong.
    pub fn new(
        layers: usize,
        blocks: usize,
        block_size: usize,
        row_width: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Pool, PrefixCacheError> {
        let rows = Tensor::zeros((layers, blocks * block_size, row_width), dtype, device)?;
        Ok(Pool {
            rows,
            layers,
            blocks,
            block_size,
            row_width,
        })
    }

    pub fn dtype(&self) -> DType {
        self.rows.dtype()
    }

    pub fn device(&self) -> &Device {
        self.rows.device()
    }

    /// Writes `values`, laid out `[L, run, D]`, into slots `[slot, slot +
    /// run)` of every layer.
    pub fn write(&self, slot: usize, run: usize, values: Vec<f32>) -> Result<(), PrefixCacheError> {
        let src = Tensor::from_vec(values, (self.layers, run, self.row_width), self.device())?
            .to_dtype(self.dtype())?;
        self.rows.slice_set(&src, 1, slot)?;
        Ok(())
    }

    /// Copies every slot of block `from` into block `to`.
    pub fn copy_block(&self, from: BlockId, to: BlockId) -> Result<(), PrefixCacheError> {
        let b = self.block_size;
        // `force_contiguous` copies the block's elements only (`copy`
        // would clone the whole pool's storage).
        let src = self
            .rows
            .narrow(1, from as usize * b, b)?
            .force_contiguous()?;
        self.rows.slice_set(&src, 1, to as usize * b)?;
        Ok(())
    }

    /// The rows of the first `positions` slots of `table`'s blocks, in
    /// order: `[L, positions, D]`. A fresh tensor (a narrow of one, when
    /// `positions` ends inside a block and `L > 1`: strided, not
    /// contiguous), independent of later writes to the pool.
    pub fn gather(&self, table: &[BlockId], positions: usize) -> Result<Tensor, PrefixCacheError> {
        let (l, b, d) = (self.layers, self.block_size, self.row_width);
        let used = positions.div_ceil(b).min(table.len());
        // Only a planted fault (`crate::fault`) counts more computed
        // positions than its blocks hold: it reads what they hold.
        #[cfg(feature = "faults")]
        let positions = positions.min(used * b);
        if positions == 0 {
            return Ok(Tensor::zeros((l, 0, d), self.dtype(), self.device())?);
        }
        let index = Tensor::from_slice(&table[..used], used, self.device())?;
        let by_block = self.rows.reshape((l, self.blocks, b * d))?;
        let gathered = by_block
            .index_select(&index, 1)?
            .reshape((l, used * b, d))?;
        Ok(gathered.narrow(1, 0, positions)?)
    }
}
