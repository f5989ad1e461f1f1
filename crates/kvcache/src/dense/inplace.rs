//! The in-place tensor ops of [`DenseCache`](super::DenseCache).
//!
//! candle's own `slice_set` needs contiguous source and destination and
//! refuses a source that shares storage with the destination even for
//! disjoint ranges, so neither a strided head-range write nor a shift of the
//! buffer's tail can go through it. These ops do both directly on the CPU
//! storage. They implement `cpu_fwd` only: on CUDA candle's default
//! `cuda_fwd` returns an error ("no cuda implementation"), which the cache
//! reports as [`Error::Backend`](crate::Error::Backend).
//!
//! Every op checks that its geometry fits the storage before touching it, so
//! a mistake surfaces as an error, never as a panic or a partial write.

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, InplaceOp1, InplaceOp2, Layout};

use super::slots::Move;

/// The start offset of a contiguous layout.
fn contiguous_start(layout: &Layout, what: &str) -> candle_core::Result<usize> {
    match layout.contiguous_offsets() {
        Some((start, _)) => Ok(start),
        None => bail!("{what}: tensor is not contiguous"),
    }
}

/// Moves rows of a `[B, C, H, D]` buffer down within each batch row: the
/// compaction after an eviction. One `copy_within` (memmove) per move and
/// batch row; moves run in the order given (see [`Move`]).
pub(crate) struct ShiftRows<'a> {
    /// Batch rows `B`.
    pub batch: usize,
    /// Slots per batch row `C`.
    pub slots: usize,
    /// Elements per slot `H · D`.
    pub row: usize,
    /// The moves, in execution order.
    pub moves: &'a [Move],
}

impl ShiftRows<'_> {
    fn apply<T: Copy>(&self, data: &mut [T], start: usize) -> candle_core::Result<()> {
        let plane = self.slots * self.row;
        if start + self.batch * plane > data.len()
            || self
                .moves
                .iter()
                .any(|m| m.from.max(m.to) + m.len > self.slots)
        {
            bail!("kvcache-shift-rows: moves outside the buffer");
        }
        for b in 0..self.batch {
            let base = start + b * plane;
            for m in self.moves {
                let from = base + m.from * self.row;
                data.copy_within(from..from + m.len * self.row, base + m.to * self.row);
            }
        }
        Ok(())
    }
}

impl InplaceOp1 for ShiftRows<'_> {
    fn name(&self) -> &'static str {
        "kvcache-shift-rows"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let start = contiguous_start(layout, self.name())?;
        match storage {
            CpuStorage::F32(data) => self.apply(data, start),
            CpuStorage::F16(data) => self.apply(data, start),
            CpuStorage::BF16(data) => self.apply(data, start),
            other => bail!("kvcache-shift-rows: unsupported dtype {:?}", other.dtype()),
        }
    }
}

/// Zeroes slots `[slot, slot + len)` of every batch row of a `[B, C, H, D]`
/// buffer, all heads: the fresh rows of a head-range write, whose other
/// heads are never written and must read as zero.
pub(crate) struct ZeroRows {
    /// Batch rows `B`.
    pub batch: usize,
    /// Slots per batch row `C`.
    pub slots: usize,
    /// Elements per slot `H · D`.
    pub row: usize,
    /// First slot zeroed.
    pub slot: usize,
    /// Slots zeroed.
    pub len: usize,
}

impl ZeroRows {
    fn apply<T: Copy + Default>(&self, data: &mut [T], start: usize) -> candle_core::Result<()> {
        let plane = self.slots * self.row;
        if self.slot + self.len > self.slots || start + self.batch * plane > data.len() {
            bail!("kvcache-zero-rows: rows outside the buffer");
        }
        for b in 0..self.batch {
            let from = start + b * plane + self.slot * self.row;
            data[from..from + self.len * self.row].fill(T::default());
        }
        Ok(())
    }
}

impl InplaceOp1 for ZeroRows {
    fn name(&self) -> &'static str {
        "kvcache-zero-rows"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let start = contiguous_start(layout, self.name())?;
        match storage {
            CpuStorage::F32(data) => self.apply(data, start),
            CpuStorage::F16(data) => self.apply(data, start),
            CpuStorage::BF16(data) => self.apply(data, start),
            other => bail!("kvcache-zero-rows: unsupported dtype {:?}", other.dtype()),
        }
    }
}

/// Where a block sits in a contiguous `[B, slots, heads, D]` tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    /// Slots per batch row of the tensor.
    pub slots: usize,
    /// Heads of the tensor.
    pub heads: usize,
    /// First slot of the block.
    pub slot: usize,
    /// First head of the block.
    pub head: usize,
}

/// Copies a `[B, len, head_count, D]` block from a source tensor into the
/// destination (`Tensor::inplace_op2(dst, src, op)`). The destination block
/// is strided when `head_count < H`: it copies `head_count · D` elements per
/// (batch row, slot), or one `len · H · D` span per batch row when both
/// sides hold whole slots. Serves payload writes and the copy into a grown
/// buffer; source and destination never share storage.
pub(crate) struct CopyBlock {
    /// Batch rows `B`.
    pub batch: usize,
    /// Slots copied.
    pub len: usize,
    /// Heads copied.
    pub head_count: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// The block in the source.
    pub src: Place,
    /// The block in the destination.
    pub dst: Place,
}

impl CopyBlock {
    fn fits(&self, place: &Place, start: usize, available: usize) -> bool {
        place.slot + self.len <= place.slots
            && place.head + self.head_count <= place.heads
            && start + self.batch * place.slots * place.heads * self.head_dim <= available
    }

    fn apply<T: Copy>(
        &self,
        dst: &mut [T],
        dst_start: usize,
        src: &[T],
        src_start: usize,
    ) -> candle_core::Result<()> {
        if !self.fits(&self.dst, dst_start, dst.len())
            || !self.fits(&self.src, src_start, src.len())
        {
            bail!("kvcache-copy-block: block outside its tensors");
        }
        let d = self.head_dim;
        let offset = |place: &Place, start: usize, b: usize, t: usize| {
            start + ((b * place.slots + place.slot + t) * place.heads + place.head) * d
        };
        // Whole slots on both sides: one contiguous span per batch row.
        let whole = self.head_count == self.src.heads && self.head_count == self.dst.heads;
        for b in 0..self.batch {
            if whole {
                let span = self.len * self.head_count * d;
                let (from, to) = (
                    offset(&self.src, src_start, b, 0),
                    offset(&self.dst, dst_start, b, 0),
                );
                dst[to..to + span].copy_from_slice(&src[from..from + span]);
            } else {
                let span = self.head_count * d;
                for t in 0..self.len {
                    let (from, to) = (
                        offset(&self.src, src_start, b, t),
                        offset(&self.dst, dst_start, b, t),
                    );
                    dst[to..to + span].copy_from_slice(&src[from..from + span]);
                }
            }
        }
        Ok(())
    }
}

impl InplaceOp2 for CopyBlock {
    fn name(&self) -> &'static str {
        "kvcache-copy-block"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        src: &CpuStorage,
        src_l: &Layout,
    ) -> candle_core::Result<()> {
        let dst_start = contiguous_start(dst_l, self.name())?;
        let src_start = contiguous_start(src_l, self.name())?;
        match (dst, src) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => self.apply(d, dst_start, s, src_start),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => self.apply(d, dst_start, s, src_start),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => self.apply(d, dst_start, s, src_start),
            (d, s) => bail!(
                "kvcache-copy-block: dtypes {:?} and {:?} are not one of f32, f16, bf16 alike",
                d.dtype(),
                s.dtype()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    fn place(slots: usize, heads: usize, slot: usize, head: usize) -> Place {
        Place {
            slots,
            heads,
            slot,
            head,
        }
    }

    /// A block whose geometry claims more storage than the tensor holds is
    /// refused before anything is copied (each factor of the size counts).
    #[test]
    fn copy_block_refuses_a_block_outside_its_tensor() {
        let device = Device::Cpu;
        // 16 elements each; the destination block claims 2 · 4 · 2 · 4 = 64.
        let dst = Tensor::zeros((1, 2, 2, 4), candle_core::DType::F32, &device).unwrap();
        let src = Tensor::ones((2, 1, 2, 4), candle_core::DType::F32, &device).unwrap();
        let op = CopyBlock {
            batch: 2,
            len: 1,
            head_count: 2,
            head_dim: 4,
            src: place(1, 2, 0, 0),
            dst: place(4, 2, 3, 0),
        };
        assert!(dst.inplace_op2(&src, &op).is_err());
        let before: Vec<f32> = dst.flatten_all().unwrap().to_vec1().unwrap();
        assert!(before.iter().all(|&x| x == 0.0));
    }

    /// A source that is a view starting inside its storage (a `narrow` on
    /// the token axis) is read from its own offset, not from the storage's
    /// first element.
    #[test]
    fn copy_block_reads_a_source_view_from_its_offset() {
        let device = Device::Cpu;
        let dst = Tensor::zeros((1, 2, 1, 2), candle_core::DType::F32, &device).unwrap();
        let all = Tensor::arange(0f32, 8.0, &device)
            .unwrap()
            .reshape((1, 4, 1, 2))
            .unwrap();
        let src = all.narrow(1, 2, 2).unwrap();
        let op = CopyBlock {
            batch: 1,
            len: 2,
            head_count: 1,
            head_dim: 2,
            src: place(2, 1, 0, 0),
            dst: place(2, 1, 0, 0),
        };
        dst.inplace_op2(&src, &op).unwrap();
        let got: Vec<f32> = dst.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got, vec![4.0, 5.0, 6.0, 7.0]);
    }

    /// A zeroing that reaches past the slots of a batch row, or past the
    /// buffer's batch rows, is refused (an error, not a panic or a write
    /// into the next row) before anything is zeroed; one inside is done.
    /// Both sums of the bounds check count: with `slot · len` a run of
    /// slots starting at 0 or 1 passes the slot check, and with
    /// `start · B · plane` a buffer at offset 0 passes the size check.
    #[test]
    fn zero_rows_refuses_rows_outside_the_buffer() {
        let device = Device::Cpu;
        // [B = 2, C = 4, H · D = 2]: 16 elements, all ones.
        let buf = Tensor::ones((2, 4, 1, 2), candle_core::DType::F32, &device).unwrap();
        let zero = |batch, slot, len| ZeroRows {
            batch,
            slots: 4,
            row: 2,
            slot,
            len,
        };
        for (slot, len) in [(0, 5), (1, 4), (3, 2)] {
            assert!(
                buf.inplace_op1(&zero(2, slot, len)).is_err(),
                "{slot}+{len}"
            );
        }
        // Three batch rows claimed in a buffer of two.
        assert!(buf.inplace_op1(&zero(3, 0, 1)).is_err());
        let after: Vec<f32> = buf.flatten_all().unwrap().to_vec1().unwrap();
        assert!(after.iter().all(|&x| x == 1.0));
        buf.inplace_op1(&zero(2, 1, 3)).unwrap();
        let got: Vec<f32> = buf.flatten_all().unwrap().to_vec1().unwrap();
        let row = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        assert_eq!(got, [row, row].concat());
    }
}
