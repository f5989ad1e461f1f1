//! The dense rolling cache: preallocated `[B, C, H, D]` K and V buffers on a
//! candle [`Device`], written and rolled in place (docs/contract.md §1–§5, §7).
//!
//! # Layout
//!
//! Resident positions are kept **compacted and in ascending order** in slots
//! `[0, |R|)`; slots `[|R|, C)` are free. An explicit slot map (a short list
//! of runs `{position, slot, len}` sorted by position, see `slots.rs`) says
//! which slot holds which position. Slots are never derived from `G − L`
//! arithmetic: that is how sglang overwrites its sink when a roll and a
//! rewrite disagree.
//!
//! The order is what makes every operation cheap:
//!
//! - **append**: new positions are larger than every resident one, so they
//!   go to the first free slot;
//! - **rewrite**: a rewritten range `[s, s+n)` is resident as a whole, and
//!   consecutive resident positions sit in consecutive slots, so the range is
//!   one block of slots;
//! - **evict-shift**: eviction removes the smallest evictable positions; the
//!   survivors above them move down with one memmove per run and batch row
//!   (the `ShiftRows` op), so the sink (and a pin) never move and the tail
//!   stays contiguous;
//! - **rewind**: the dropped positions are the largest, at the top: only the
//!   slot map changes;
//! - **view**: the visible positions (protected ∪ a suffix of the others)
//!   map to ascending slots; [`KvCache::write_segments`] returns one
//!   zero-copy `narrow` per slot run, and [`KvCache::write`] the same
//!   `narrow` when there is one run (the steady rolling state: sink
//!   followed by the tail), otherwise one `Tensor::cat` of the runs.
//!
//! # Refusals
//!
//! Every operation first plans its whole effect (victims, growth, view) on
//! the slot map without touching a byte, runs every check of docs/contract.md §3 in
//! its order, then checks the payload, and only then moves data. A refusal
//! therefore leaves buffers, slot map, pin and global end exactly as they
//! were. Contract refusals come before payload errors, so a request the
//! contract refuses gets its contract kind whatever payload it carries.
//!
//! # Devices
//!
//! The buffers live on any candle device. Every mutating op has two
//! implementations, chosen by [`Path`]: the CPU's custom in-place ops
//! (`inplace.rs`, `cpu_fwd` only) and a device-generic one built from
//! candle's public tensor ops (`generic.rs`). A cache on a non-CPU device
//! uses the generic path; [`DenseCache::with_path`] forces either.

mod generic;
mod inplace;
mod slots;

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use kvmodel::{Config, Write};

use crate::contract::Residency;
use crate::segments::buffer_view;
use crate::{Internals, KvCache, Layout, Path, Result, SegmentedView, Slot, View};
use inplace::{CopyBlock, Place, ShiftRows, ZeroRows};
use slots::SlotMap;

/// The dense rolling cache of docs/contract.md §1–§5 on candle tensors.
///
/// Guarantees:
///
/// - K and V are allocated once as `[B, C, H, D]` in the configured dtype
///   and reallocated only by growth, once per doubling of `C`;
/// - writes, rolls and evictions move data in place; the append / rewrite
///   path allocates nothing proportional to the capacity;
/// - every refusal returns the error kind of `kvmodel::Model` and leaves
///   the cache unchanged;
/// - a view is valid until the next mutating call (the borrow checker
///   enforces it); it may share storage with the buffers.
#[derive(Debug)]
pub struct DenseCache {
    /// `G`, `C`, `W`, the pin: the contract's scalar state.
    state: Residency,
    device: Device,
    dtype: DType,
    /// Position → slot (see the module docs).
    slots: SlotMap,
    /// Keys, `[B, C, H, D]`, contiguous.
    k: Tensor,
    /// Values, `[B, C, H, D]`, contiguous.
    v: Tensor,
    /// Which implementation moves the bytes.
    path: Path,
    /// The generic path's shift scratch, `[1, ⌈C/4⌉, H, D]` (see
    /// `generic.rs`); `None` on the in-place path.
    scratch: Option<Tensor>,
}

impl DenseCache {
    /// A new, empty cache with zeroed `[B, C, H, D]` K and V buffers on
    /// `device`. Refuses a configuration that breaks docs/contract.md §1 with
    /// `invalid_config` (as `kvmodel::Model::new` does), and a packed one
    /// with `invalid_config` naming `variant`. The size rule bounds the
    /// allocation (at most 2^31 elements per buffer), but that much memory
    /// must still be available: candle aborts on a failed CPU allocation.
    pub fn new(config: &Config, device: &Device) -> Result<DenseCache> {
        DenseCache::with_path(config, device, Path::default_for(device))
    }

    /// [`DenseCache::new`] with an explicit [`Path`]. `Path::InPlace` on a
    /// non-CPU device builds, but its first mutating op fails with
    /// [`Error::Backend`](crate::Error::Backend) (the custom ops have CPU
    /// bodies only).
    pub fn with_path(config: &Config, device: &Device, path: Path) -> Result<DenseCache> {
        let state = Residency::new(config, "DenseCache")?;
        let (k, v) = state.zeroed_buffers(config.capacity, device)?;
        let scratch = Self::scratch(config, config.capacity, state.dtype(), device, path)?;
        Ok(DenseCache {
            dtype: state.dtype(),
            state,
            device: device.clone(),
            slots: SlotMap::default(),
            k,
            v,
            path,
            scratch,
        })
    }

    /// The generic path's shift scratch for `capacity` (none in place).
    fn scratch(
        config: &Config,
        capacity: usize,
        dtype: DType,
        device: &Device,
        path: Path,
    ) -> Result<Option<Tensor>> {
        Ok(match path {
            Path::InPlace => None,
            Path::Generic => {
                let rows = generic::scratch_rows(capacity);
                let shape = (1, rows, config.heads, config.head_dim);
                Some(Tensor::zeros(shape, dtype, device)?)
            }
        })
    }

    /// The implementation this cache runs.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Copies a block into `dst` on this cache's path.
    fn copy_block(&self, dst: &Tensor, src: &Tensor, copy: &CopyBlock) -> Result<()> {
        match self.path {
            Path::InPlace => dst.inplace_op2(src, copy)?,
            Path::Generic => generic::copy_block(dst, src, copy)?,
        }
        Ok(())
    }

    /// The current window `W`.
    pub fn window(&self) -> usize {
        self.state.window
    }

    /// The pinned positions, if any.
    pub fn pin_range(&self) -> Option<Range<u64>> {
        self.state.pin.clone()
    }

    /// The device the buffers live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The resident positions, ascending.
    fn resident(&self) -> Vec<Range<u64>> {
        self.slots
            .runs()
            .iter()
            .map(|run| run.position..run.position + run.len as u64)
            .collect()
    }

    /// Replaces the buffers by zeroed `[B, capacity, H, D]` ones holding the
    /// resident rows in the same slots. Allocates before it changes anything.
    fn grow(&mut self, capacity: usize, window: usize) -> Result<()> {
        let (k, v) = self.state.zeroed_buffers(capacity, &self.device)?;
        let c = &self.state.config;
        let scratch = Self::scratch(c, capacity, self.dtype, &self.device, self.path)?;
        let copy = CopyBlock {
            batch: c.batch,
            len: self.slots.resident(),
            head_count: c.heads,
            head_dim: c.head_dim,
            src: Place {
                slots: self.state.capacity,
                heads: c.heads,
                slot: 0,
                head: 0,
            },
            dst: Place {
                slots: capacity,
                heads: c.heads,
                slot: 0,
                head: 0,
            },
        };
        self.copy_block(&k, &self.k, &copy)?;
        self.copy_block(&v, &self.v, &copy)?;
        self.k = k;
        self.v = v;
        self.scratch = scratch;
        self.state.capacity = capacity;
        self.state.window = window;
        Ok(())
    }

    /// Removes `victims` and shifts the survivors down in both buffers.
    fn evict_positions(&mut self, victims: &[Range<u64>]) -> Result<()> {
        if victims.is_empty() {
            return Ok(());
        }
        let mut next = self.slots.clone();
        let moves = next.remove(victims);
        if !moves.is_empty() {
            match &self.scratch {
                None => {
                    let shift = ShiftRows {
                        batch: self.state.config.batch,
                        slots: self.state.capacity,
                        row: self.state.config.heads * self.state.config.head_dim,
                        moves: &moves,
                    };
                    self.k.inplace_op1(&shift)?;
                    self.v.inplace_op1(&shift)?;
                }
                Some(scratch) => {
                    generic::shift_rows(&self.k, scratch, &moves)?;
                    generic::shift_rows(&self.v, scratch, &moves)?;
                }
            }
        }
        self.slots = next;
        Ok(())
    }

    /// The segments of `visible` (ascending position ranges, all
    /// resident) for `heads`: one zero-copy `narrow` per slot run (one run
    /// in the steady rolling state: the sink followed by the tail).
    fn segments(&self, visible: &[Range<u64>], heads: Range<usize>) -> Result<SegmentedView<'_>> {
        let positions: Vec<u64> = visible.iter().flat_map(|r| r.clone()).collect();
        let runs: Vec<(usize, usize)> = self
            .slots
            .slot_ranges(visible)
            .into_iter()
            .map(|r| (r.start, r.len()))
            .collect();
        buffer_view(
            [&self.k, &self.v],
            &runs,
            heads,
            self.state.global_end,
            positions,
        )
    }
}

impl KvCache for DenseCache {
    fn config(&self) -> &Config {
        &self.state.config
    }

    fn global_end(&self) -> u64 {
        self.state.global_end
    }

    /// docs/contract.md §3 `write`: checks 1–8 in order, then the payload (shape,
    /// dtype, device), then the commit: grow or evict-shift, zero the fresh
    /// rows of a head-range write, copy the payload block in place.
    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<SegmentedView<'_>> {
        let plan = self.state.plan_write(&self.resident(), request)?;
        let (k, v) = self
            .state
            .check_payloads(&plan, self.dtype, &self.device, k, v)?;
        let len = plan.len();
        // Commit.
        if let Some((capacity, window)) = plan.grow_to {
            self.grow(capacity, window)?;
        }
        self.evict_positions(&plan.victims)?;
        self.slots.push(plan.fresh.clone());
        if len > 0 {
            let slot = self.slots.slot_of(plan.start).unwrap_or(0);
            let c = &self.state.config;
            let row = c.heads * c.head_dim;
            let fresh = (plan.fresh.end - plan.fresh.start) as usize;
            if plan.heads.len() < c.heads && fresh > 0 {
                // Fresh rows may hold stale data of rewound positions; heads
                // outside the range are never written and must read zero.
                let zero = ZeroRows {
                    batch: c.batch,
                    slots: self.state.capacity,
                    row,
                    slot: slot + len - fresh,
                    len: fresh,
                };
                match self.path {
                    Path::InPlace => {
                        self.k.inplace_op1(&zero)?;
                        self.v.inplace_op1(&zero)?;
                    }
                    Path::Generic => {
                        generic::zero_rows(&self.k, zero.slot, zero.len)?;
                        generic::zero_rows(&self.v, zero.slot, zero.len)?;
                    }
                }
            }
            let copy = CopyBlock {
                batch: c.batch,
                len,
                head_count: plan.heads.len(),
                head_dim: c.head_dim,
                src: Place {
                    slots: len,
                    heads: plan.heads.len(),
                    slot: 0,
                    head: 0,
                },
                dst: Place {
                    slots: self.state.capacity,
                    heads: c.heads,
                    slot,
                    head: plan.heads.start,
                },
            };
            self.copy_block(&self.k, &k, &copy)?;
            self.copy_block(&self.v, &v, &copy)?;
        }
        self.state.global_end = self.state.global_end.max(plan.end);
        self.segments(&plan.visible, plan.heads)
    }

    /// [`KvCache::write_segments`], concatenated: a zero-copy `narrow`
    /// when the visible rows form one slot range, otherwise one `cat`.
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        self.write_segments(request, k, v)?.into_view()
    }

    fn view(&self) -> Result<View<'_>> {
        self.view_segments()?.into_view()
    }

    fn view_segments(&self) -> Result<SegmentedView<'_>> {
        let visible = self.state.current_view(&self.resident());
        self.segments(&visible, 0..self.state.config.heads)
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        let to = self.state.check_rewind(to)?;
        self.slots.truncate(to);
        self.state.commit_rewind(to);
        Ok(to)
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        let victims = self.state.plan_evict(&self.resident(), tokens)?;
        self.evict_positions(&victims)?;
        Ok(self.state.global_end)
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        let resident = self.resident();
        Ok(self.state.pin(&resident, tokens)?)
    }

    /// Empties the slot map; the buffers keep their size (capacity and
    /// window keep their current values) and their stale bytes, which no
    /// view can reach and every later write overwrites or zeroes.
    fn reset(&mut self) -> Result<u64> {
        self.slots.clear();
        self.state.reset();
        Ok(0)
    }

    fn internals(&self) -> Option<&dyn Internals> {
        Some(self)
    }
}

impl Internals for DenseCache {
    fn capacity(&self) -> usize {
        self.state.capacity
    }

    /// `2 · B · C · H · D · size_of(dtype)`: the allocated buffers.
    fn resident_bytes(&self) -> u64 {
        self.state.resident_bytes()
    }

    /// Slot `i < |R|` holds `Hot(position)`, the rest are `Free`.
    fn layout(&self) -> Layout {
        let mut slots: Vec<Slot> = self.slots.positions().map(Slot::Hot).collect();
        slots.resize(self.state.capacity, Slot::Free);
        Layout { slots }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvmodel::Model;

    /// Rolls a cache whose shift moves more rows than the scratch holds
    /// (several blocks per move) and compares every view with the model's
    /// positions and the written values.
    fn rolls_like_the_model(path: Path) -> bool {
        let mut config = Config::dense(16);
        config.sink = 2;
        let mut cache = DenseCache::with_path(&config, &Device::Cpu, path).unwrap();
        let mut model = Model::new(&config).unwrap();
        for step in 0..12u64 {
            let n = 3;
            let start = step * n;
            let values: Vec<f32> = (start..start + n).map(|p| p as f32).collect();
            let payload = Tensor::from_vec(values, (1, n as usize, 1, 1), &Device::Cpu).unwrap();
            let request = Write::new(start as i64, n as i64);
            let effect = model.apply(step, &kvmodel::Op::Write(request)).unwrap();
            let view = cache.write(&request, &payload, &payload).unwrap();
            let got: Vec<f32> = view.k.flatten_all().unwrap().to_vec1().unwrap();
            let want: Vec<f32> = effect.visible.unwrap().iter().map(|&p| p as f32).collect();
            if got != want {
                return false;
            }
        }
        true
    }

    #[test]
    fn both_paths_roll_like_the_model() {
        for path in Path::ALL {
            assert!(rolls_like_the_model(path), "{path}");
        }
    }

    /// A bug planted in the generic shift only (blocks moved back to front,
    /// which overwrites rows not yet read) is caught; the in-place path is
    /// unaffected by it.
    #[test]
    fn a_bug_planted_in_the_generic_shift_is_caught() {
        generic::PLANT_BACKWARD_SHIFT.with(|b| b.set(true));
        let (in_place, generic) = (
            rolls_like_the_model(Path::InPlace),
            rolls_like_the_model(Path::Generic),
        );
        generic::PLANT_BACKWARD_SHIFT.with(|b| b.set(false));
        assert!(in_place, "the in-place path does not use the generic shift");
        assert!(!generic, "the planted bug went unnoticed");
    }
}
