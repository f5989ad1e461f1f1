//! The device-generic path of [`DenseCache`](super::DenseCache): the same
//! moves as the in-place ops of `inplace.rs`, built only from candle's
//! public tensor ops (`narrow`, `slice_set`, `zeros`), which every backend
//! implements. The CPU runs it when a cache is built with
//! [`Path::Generic`](crate::Path::Generic), so the suites check here, bit
//! for bit, the code a GPU runs.
//!
//! # Why per batch row
//!
//! `slice_set` needs a contiguous destination and source. A slot range of a
//! `[B, C, H, D]` buffer is contiguous only inside one batch row
//! (`narrow(0, b, 1)` then `narrow(1, ..)`), so every op loops over `B`.
//!
//! # Overlapping moves: the scratch
//!
//! `slice_set` refuses a source that shares storage with the destination,
//! even for disjoint ranges, so a row cannot be moved within a buffer
//! directly. Each move goes through a scratch buffer of `[1, S, H, D]` with
//! `S = ⌈C / 4⌉` rows, in blocks of at most `S` rows, front to back: copy a
//! block out to the scratch, then from the scratch to its destination.
//! Moves only go down (`to < from`), so a block written front to back never
//! lands on source rows not yet read. The scratch costs `1/(4B)` of one
//! buffer (a quarter of one batch row), is allocated with the cache and
//! reallocated only by growth, and is shared by K and V: a steady-state
//! append allocates nothing proportional to `C` (`tests/alloc.rs` counts).

use candle_core::{Result, Tensor};

use super::inplace::{CopyBlock, Place};
use super::slots::Move;

/// Scratch rows for a capacity: `⌈C / 4⌉`, at least 1.
pub(crate) fn scratch_rows(capacity: usize) -> usize {
    capacity.div_ceil(4).max(1)
}

#[cfg(test)]
thread_local! {
    /// A deliberately wrong block order for the shift (back to front), so
    /// that a test can prove the suites catch a bug in this path only.
    pub(crate) static PLANT_BACKWARD_SHIFT: std::cell::Cell<bool> =
        const { std::cell::Cell::new(false) };
}

fn backward_shift() -> bool {
    #[cfg(test)]
    {
        PLANT_BACKWARD_SHIFT.with(|b| b.get())
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Slots `[slot, slot + len)` of batch row `b` of a `[B, C, H, D]` buffer:
/// a contiguous view.
fn rows(buffer: &Tensor, b: usize, slot: usize, len: usize) -> Result<Tensor> {
    buffer.narrow(0, b, 1)?.narrow(1, slot, len)
}

/// Executes `moves` (in order) on every batch row of `buffer`, through
/// `scratch` (`[1, S, H, D]`, same dtype and device).
pub(crate) fn shift_rows(buffer: &Tensor, scratch: &Tensor, moves: &[Move]) -> Result<()> {
    let (batch, slots) = (buffer.dim(0)?, buffer.dim(1)?);
    let block = scratch.dim(1)?;
    if moves.iter().any(|m| m.from.max(m.to) + m.len > slots) {
        candle_core::bail!("kvcache generic shift: moves outside the buffer");
    }
    for b in 0..batch {
        let row = buffer.narrow(0, b, 1)?;
        for m in moves {
            let mut blocks: Vec<usize> = (0..m.len).step_by(block).collect();
            if backward_shift() {
                blocks.reverse();
            }
            for done in blocks {
                let len = block.min(m.len - done);
                let staged = scratch.narrow(1, 0, len)?;
                staged.slice_set(&row.narrow(1, m.from + done, len)?, 1, 0)?;
                row.slice_set(&staged, 1, m.to + done)?;
            }
        }
    }
    Ok(())
}

/// Zeroes slots `[slot, slot + len)` of every batch row, all heads.
pub(crate) fn zero_rows(buffer: &Tensor, slot: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (batch, _, heads, head_dim) = buffer.dims4()?;
    let zeros = Tensor::zeros((1, len, heads, head_dim), buffer.dtype(), buffer.device())?;
    for b in 0..batch {
        buffer.narrow(0, b, 1)?.slice_set(&zeros, 1, slot)?;
    }
    Ok(())
}

/// The block of `place` in batch row `b` of `tensor`, `len` slots and
/// `heads` heads from the place's first head.
fn block(tensor: &Tensor, place: &Place, b: usize, len: usize, heads: usize) -> Result<Tensor> {
    let t = rows(tensor, b, place.slot, len)?;
    if heads == place.heads {
        Ok(t)
    } else {
        t.narrow(2, place.head, heads)
    }
}

/// [`CopyBlock`] with `slice_set`: per batch row, the source block (made
/// contiguous if it is a head range of a wider tensor) is set into the
/// destination's slot range at the destination's first head.
pub(crate) fn copy_block(dst: &Tensor, src: &Tensor, copy: &CopyBlock) -> Result<()> {
    if copy.len == 0 {
        return Ok(());
    }
    for b in 0..copy.batch {
        let from = block(src, &copy.src, b, copy.len, copy.head_count)?.contiguous()?;
        let into = rows(dst, b, copy.dst.slot, copy.len)?;
        into.slice_set(&from, 2, copy.dst.head)?;
    }
    Ok(())
}
