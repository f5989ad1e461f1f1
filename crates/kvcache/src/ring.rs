//! The ring cache: the dense contract of docs/contract.md §1–§5 on `[B, C, H, D]`
//! K and V buffers in which history never moves.
//!
//! # Layout
//!
//! Each resident position keeps the slot it was written to until growth
//! re-lays the buffers out. Protected positions (the sink, a pin) therefore
//! sit at fixed slots; the other resident positions form a ring: an append
//! takes the free slots after the newest row, cyclically, skipping occupied
//! ones (see `ring/map.rs`). Eviction removes the oldest evictable rows,
//! which are exactly the slots the next append reaches, so in the rolling
//! steady state an append writes its own rows in one `slice_set`, or two
//! when it wraps past the top of the buffer. Compare [`DenseCache`], which
//! keeps rows compacted and moves `C − S − n` rows per append to do so.
//!
//! - **append / rewrite**: `slice_set` of the payload rows into their slots
//!   (a head-range write first merges the payload with the rows' other
//!   heads, or with zeros for fresh rows, with `cat`);
//! - **evict / rewind / reset / pin**: the slot map only;
//! - **growth**: new zeroed buffers, resident rows copied compacted in
//!   position order (one `slice_set` per run), once per doubling of `C`;
//! - **view**: a [`SegmentedView`] whose segments are zero-copy `narrow`s,
//!   one per slot run of the visible positions (the sink, then the ring
//!   tail in at most two pieces in the steady state). [`KvCache::view`] and
//!   [`KvCache::write`] concatenate them (a copy when there are several).
//!
//! Only device-generic candle ops are used (`zeros`, `narrow`, `cat`,
//! `slice_set`), so the cache runs on any candle device without a kernel
//! of its own.
//!
//! # Refusals
//!
//! Every check of docs/contract.md §3 runs on position sets first (shared with
//! [`DenseCache`] in `contract.rs`), then the payload is checked, and only
//! then does anything change, so a refusal leaves the cache as it was.
//!
//! [`DenseCache`]: crate::DenseCache

mod map;

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use kvmodel::{Config, Write};

use crate::contract::{Residency, WritePlan};
use crate::segments::{buffer_view, set_rows};
use crate::{Internals, KvCache, Layout, Result, RingLayout, SegmentedView, View};
use map::RingMap;

/// The ring cache of docs/contract.md §1–§5 (see the module docs).
///
/// Guarantees:
///
/// - K and V are allocated once as `[B, C, H, D]` and reallocated only by
///   growth, once per doubling of `C`;
/// - an append or rewrite writes only the rows it carries; eviction,
///   rewind, pin and reset move no data;
/// - every refusal returns the error kind of `kvmodel::Model` and leaves
///   the cache unchanged;
/// - [`KvCache::write_segments`] and [`KvCache::view_segments`] return
///   zero-copy segments of the buffers, positions ascending across them.
#[derive(Debug)]
pub struct RingCache {
    /// `G`, `C`, `W`, the pin: the contract's scalar state.
    state: Residency,
    device: Device,
    dtype: DType,
    /// Position → slot and where the next append goes.
    map: RingMap,
    /// Keys, `[B, C, H, D]`, contiguous.
    k: Tensor,
    /// Values, `[B, C, H, D]`, contiguous.
    v: Tensor,
}

impl RingCache {
    /// A new, empty cache with zeroed `[B, C, H, D]` K and V buffers on
    /// `device`. Refuses what [`DenseCache::new`](crate::DenseCache::new)
    /// refuses, with the same errors.
    pub fn new(config: &Config, device: &Device) -> Result<RingCache> {
        let state = Residency::new(config, "RingCache")?;
        let (k, v) = state.zeroed_buffers(config.capacity, device)?;
        Ok(RingCache {
            dtype: state.dtype(),
            state,
            device: device.clone(),
            map: RingMap::new(config.capacity),
            k,
            v,
        })
    }

    /// The current window `W`.
    pub fn window(&self) -> usize {
        self.state.window
    }

    /// The pinned positions, if any.
    pub fn pin_range(&self) -> Option<Range<u64>> {
        self.state.pin.clone()
    }

    /// The position before `G`, if any.
    fn newest(&self) -> Option<u64> {
        self.state.global_end.checked_sub(1)
    }

    /// New zeroed buffers of `capacity` slots holding the resident rows
    /// compacted in position order.
    fn grow(&mut self, capacity: usize, window: usize) -> Result<()> {
        let (k, v) = self.state.zeroed_buffers(capacity, &self.device)?;
        let mut map = self.map.clone();
        for (from, to, len) in map.relayout(capacity) {
            set_rows(&k, to, &self.k.narrow(1, from, len)?)?;
            set_rows(&v, to, &self.v.narrow(1, from, len)?)?;
        }
        self.k = k;
        self.v = v;
        self.map = map;
        self.state.capacity = capacity;
        self.state.window = window;
        Ok(())
    }

    /// The full rows `[B, n, H, D]` a head-range write stores: the payload's
    /// heads, and for the other heads the rows' current values (rewritten
    /// positions) or zeros (fresh ones). Read before anything is written.
    fn merge_heads(&self, plan: &WritePlan, buffer: &Tensor, payload: &Tensor) -> Result<Tensor> {
        let c = &self.state.config;
        let old = plan.start..plan.fresh.start.min(plan.end);
        let mut rows = Vec::new();
        for (positions, slot) in self.map.pieces(std::slice::from_ref(&old)) {
            rows.push(buffer.narrow(1, slot, (positions.end - positions.start) as usize)?);
        }
        let fresh = (plan.fresh.end - plan.fresh.start) as usize;
        if fresh > 0 {
            rows.push(Tensor::zeros(
                (c.batch, fresh, c.heads, c.head_dim),
                self.dtype,
                &self.device,
            )?);
        }
        let full = Tensor::cat(&rows, 1)?;
        let (h0, hc) = (plan.heads.start, plan.heads.len());
        let mut parts = Vec::new();
        if h0 > 0 {
            parts.push(full.narrow(2, 0, h0)?);
        }
        parts.push(payload.clone());
        if h0 + hc < c.heads {
            parts.push(full.narrow(2, h0 + hc, c.heads - h0 - hc)?);
        }
        // `cat` of two or more parts is a fresh tensor, never a view of
        // the buffer (`slice_set` refuses a source sharing its storage).
        Ok(Tensor::cat(&parts, 2)?)
    }

    /// The segments of `visible` (ascending, all resident) for `heads`:
    /// one per slot run.
    fn segments(&self, visible: &[Range<u64>], heads: Range<usize>) -> Result<SegmentedView<'_>> {
        let positions: Vec<u64> = visible.iter().flat_map(|r| r.clone()).collect();
        let runs: Vec<(usize, usize)> = self
            .map
            .pieces(visible)
            .into_iter()
            .map(|(range, slot)| (slot, (range.end - range.start) as usize))
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

impl KvCache for RingCache {
    fn config(&self) -> &Config {
        &self.state.config
    }

    fn global_end(&self) -> u64 {
        self.state.global_end
    }

    /// [`KvCache::write_segments`], concatenated.
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        self.write_segments(request, k, v)?.into_view()
    }

    fn view(&self) -> Result<View<'_>> {
        self.view_segments()?.into_view()
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        let to = self.state.check_rewind(to)?;
        self.map.truncate(to);
        self.state.commit_rewind(to);
        Ok(to)
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        let victims = self.state.plan_evict(&self.map.positions(), tokens)?;
        self.map.remove(&victims);
        Ok(self.state.global_end)
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        let resident = self.map.positions();
        Ok(self.state.pin(&resident, tokens)?)
    }

    /// Empties the slot map; buffers, capacity and window stay. Stale rows
    /// are unreachable and every later write overwrites or zeroes them.
    fn reset(&mut self) -> Result<u64> {
        self.map.clear();
        self.state.reset();
        Ok(0)
    }

    /// docs/contract.md §3 `write`: checks 1–8 in order, then the payload (shape,
    /// dtype, device), then the commit: grow, drop the victims from the
    /// map, place fresh positions in the ring, write the rows.
    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<SegmentedView<'_>> {
        let plan = self.state.plan_write(&self.map.positions(), request)?;
        let (k, v) = self
            .state
            .check_payloads(&plan, self.dtype, &self.device, k, v)?;
        if let Some((capacity, window)) = plan.grow_to {
            self.grow(capacity, window)?;
        }
        let partial = plan.heads.len() < self.state.config.heads && plan.len() > 0;
        // Merged rows are read from the buffers before any row is written.
        let (k, v) = if partial {
            (
                self.merge_heads(&plan, &self.k, &k)?,
                self.merge_heads(&plan, &self.v, &v)?,
            )
        } else {
            (k, v)
        };
        self.map.remove(&plan.victims);
        let fresh_len = (plan.fresh.end - plan.fresh.start) as usize;
        if fresh_len > 0 {
            let slots = self.map.allocate(fresh_len, self.newest());
            self.map.insert(plan.fresh.clone(), &slots);
        }
        let mut row = 0;
        for (positions, slot) in self
            .map
            .pieces(std::slice::from_ref(&(plan.start..plan.end)))
        {
            let len = (positions.end - positions.start) as usize;
            set_rows(&self.k, slot, &k.narrow(1, row, len)?)?;
            set_rows(&self.v, slot, &v.narrow(1, row, len)?)?;
            row += len;
        }
        self.state.global_end = self.state.global_end.max(plan.end);
        self.segments(&plan.visible, plan.heads)
    }

    fn view_segments(&self) -> Result<SegmentedView<'_>> {
        let visible = self.state.current_view(&self.map.positions());
        self.segments(&visible, 0..self.state.config.heads)
    }

    fn ring(&self) -> Option<RingLayout> {
        let resident = self.map.positions();
        let protected = self.state.protected_ranges();
        let oldest = resident
            .iter()
            .find_map(|r| crate::ranges::subtract(r.clone(), &protected).next())
            .map(|r| r.start);
        Some(self.map.ring(oldest, self.newest()))
    }

    fn internals(&self) -> Option<&dyn Internals> {
        Some(self)
    }
}

impl Internals for RingCache {
    fn capacity(&self) -> usize {
        self.state.capacity
    }

    /// `2 · B · C · H · D · size_of(dtype)`: the allocated buffers.
    fn resident_bytes(&self) -> u64 {
        self.state.resident_bytes()
    }

    fn layout(&self) -> Layout {
        Layout {
            slots: self.map.slots(),
        }
    }
}
