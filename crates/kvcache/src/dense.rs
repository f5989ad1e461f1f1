//! The dense rolling cache: preallocated `[B, C, H, D]` K and V buffers on a
//! candle [`Device`], written and rolled in place (SPEC.md §1–§5, §7).
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
//!   map to ascending slots; when they form one slot range (the steady
//!   rolling state: sink followed by the tail) the view is a zero-copy
//!   `narrow`, otherwise one `Tensor::cat` of the narrowed slot runs.
//!
//! # Refusals
//!
//! Every operation first plans its whole effect (victims, growth, view) on
//! the slot map without touching a byte, runs every check of SPEC.md §3 in
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
use kvmodel::{format_ranges, non_negative, CacheError, Config, Write};

use crate::{candle_dtype, check_payload, Error, KvCache, Layout, Path, Result, Slot, View};
use inplace::{CopyBlock, Place, ShiftRows, ZeroRows};
use slots::{count, intersect, normalize, subtract, SlotMap};

/// The dense rolling cache of SPEC.md §1–§5 on candle tensors.
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
    config: Config,
    device: Device,
    dtype: DType,
    /// `C`: the slots of `k` and `v`.
    capacity: usize,
    /// `W`: follows `C` under growth only while it was equal to it.
    window: usize,
    /// `G`.
    global_end: u64,
    /// The pinned positions, if any (SPEC.md §5).
    pin: Option<Range<u64>>,
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

/// The plan of a write that passed every check: what to do, in order.
struct WritePlan {
    start: u64,
    end: u64,
    heads: Range<usize>,
    /// The capacity to grow to, if any.
    grow_to: Option<usize>,
    /// Positions to evict, ascending.
    victims: Vec<Range<u64>>,
    /// Visible positions after the write, ascending.
    visible: Vec<Range<u64>>,
}

impl DenseCache {
    /// A new, empty cache with zeroed `[B, C, H, D]` K and V buffers on
    /// `device`. Refuses a configuration that breaks SPEC.md §1 with
    /// `invalid_config` (as `kvmodel::Model::new` does), and a packed one
    /// with `invalid_config` naming `variant`. The size rule bounds the
    /// allocation (at most 2^31 elements per buffer), but that much memory
    /// must still be available: candle aborts on a failed CPU allocation.
    pub fn new(config: &Config, device: &Device) -> Result<DenseCache> {
        DenseCache::with_path(config, device, Path::default_for(device))
    }

    /// [`DenseCache::new`] with an explicit [`Path`]. `Path::InPlace` on a
    /// non-CPU device builds, but its first mutating op fails with
    /// [`Error::Backend`] (the custom ops have CPU bodies only).
    pub fn with_path(config: &Config, device: &Device, path: Path) -> Result<DenseCache> {
        config.validate()?;
        if config.variant != kvmodel::Variant::Dense {
            return Err(CacheError::InvalidConfig {
                field: "variant",
                reason: "must be \"dense\" for DenseCache".to_string(),
            }
            .into());
        }
        let dtype = candle_dtype(config.dtype);
        let shape = (config.batch, config.capacity, config.heads, config.head_dim);
        Ok(DenseCache {
            config: config.clone(),
            device: device.clone(),
            dtype,
            capacity: config.capacity,
            window: config.effective_window(),
            global_end: 0,
            pin: None,
            slots: SlotMap::default(),
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
            path,
            scratch: Self::scratch(config, config.capacity, dtype, device, path)?,
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
        self.window
    }

    /// The pinned positions, if any.
    pub fn pin_range(&self) -> Option<Range<u64>> {
        self.pin.clone()
    }

    /// The device the buffers live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// SPEC.md §2: the protected ranges (not yet intersected with `R`),
    /// ascending and disjoint.
    fn protected_ranges(&self) -> Vec<Range<u64>> {
        match &self.pin {
            None => std::iter::once(0..self.config.sink as u64).collect(),
            Some(pin) => normalize(vec![0..self.config.global_sink as u64, pin.clone()]),
        }
    }

    /// The `k` smallest evictable positions outside `exclude`, as ascending
    /// ranges, or `Err(available)` when there are fewer.
    fn victims(&self, k: u64, exclude: Range<u64>) -> std::result::Result<Vec<Range<u64>>, u64> {
        let mut holes = self.protected_ranges();
        holes.push(exclude);
        let holes = normalize(holes);
        let mut victims = Vec::new();
        let mut taken = 0u64;
        for run in self.slots.runs() {
            if taken == k {
                break;
            }
            let positions = run.position..run.position + run.len as u64;
            for piece in subtract(positions, &holes) {
                let take = (piece.end - piece.start).min(k - taken);
                if take == 0 {
                    break;
                }
                victims.push(piece.start..piece.start + take);
                taken += take;
            }
        }
        if taken < k {
            return Err(taken);
        }
        Ok(victims)
    }

    /// SPEC.md §4 on the state given by `slots` and the current pin: the
    /// visible positions as ascending ranges. `recent` is `(s, r)`.
    fn visible(
        &self,
        slots: &SlotMap,
        window: usize,
        recent: Option<(u64, u64)>,
    ) -> Vec<Range<u64>> {
        let holes = self.protected_ranges();
        let mut protected = Vec::new();
        let mut others = Vec::new();
        for run in slots.runs() {
            let positions = run.position..run.position + run.len as u64;
            protected.extend(intersect(positions.clone(), &holes));
            others.extend(subtract(positions, &holes));
        }
        let shown: Vec<Range<u64>> = match recent {
            None => {
                let mut keep = (window as u64).saturating_sub(count(&protected));
                let mut shown = Vec::new();
                for piece in others.iter().rev() {
                    if keep == 0 {
                        break;
                    }
                    let take = (piece.end - piece.start).min(keep);
                    shown.push(piece.end - take..piece.end);
                    keep -= take;
                }
                shown
            }
            Some((s, r)) => {
                let from = s.saturating_sub(r);
                others
                    .iter()
                    .filter(|p| p.end > from)
                    .map(|p| p.start.max(from)..p.end)
                    .collect()
            }
        };
        protected.extend(shown);
        normalize(protected)
    }

    /// Runs SPEC.md §3 write checks 5–8 on the slot map only.
    fn plan_write(
        &self,
        s: u64,
        n: u64,
        heads: Range<usize>,
        recent: Option<u64>,
    ) -> Result<WritePlan, CacheError> {
        let end = s + n;
        // 5. A gap would leave unwritten positions visible.
        if s > self.global_end {
            return Err(CacheError::NonSequential {
                start: s,
                global_end: self.global_end,
            });
        }
        // 6. Rewritten positions must still be resident.
        if let Some(position) = self.slots.first_missing(s..end.min(self.global_end)) {
            return Err(CacheError::Evicted {
                start: s,
                end,
                position,
                resident: format_ranges(self.slots.positions()),
            });
        }
        // 7. Make room: grow, or evict the oldest evictable positions outside the write.
        let new_from = s.max(self.global_end);
        // A rewrite that ends below `G` adds nothing (`new_from > end`).
        let total = self.slots.resident() as u64 + end.saturating_sub(new_from);
        let mut grow_to = None;
        let mut window = self.window;
        let mut victims = Vec::new();
        if total > self.capacity as u64 {
            let protected_outside = {
                let mut holes = self.protected_ranges();
                holes.retain(|h| h.start < h.end);
                let mut c = 0u64;
                for run in self.slots.runs() {
                    let positions = run.position..run.position + run.len as u64;
                    for piece in intersect(positions, &holes) {
                        c += count(
                            &subtract(piece, std::slice::from_ref(&(s..end))).collect::<Vec<_>>(),
                        );
                    }
                }
                c as usize
            };
            let too_large = |capacity: usize| {
                CacheError::chunk_too_large(s, end, total, capacity, protected_outside)
            };
            if self.config.growth {
                let max = self.config.max_capacity();
                if total > max as u64 {
                    return Err(too_large(max));
                }
                let grown = (total as usize)
                    .max(self.capacity.saturating_mul(2))
                    .min(max);
                if window == self.capacity {
                    window = grown;
                }
                grow_to = Some(grown);
            } else {
                victims = self
                    .victims(total - self.capacity as u64, s..end)
                    .map_err(|_| too_large(self.capacity))?;
            }
        }
        // 8. The chunk must see itself: compute the view on the new state.
        let mut next = self.slots.clone();
        next.remove(&victims);
        next.push(new_from..end.max(new_from));
        let visible = self.visible(&next, window, recent.map(|r| (s, r)));
        let mut covered = s;
        for piece in intersect(s..end, &visible) {
            if piece.start != covered {
                break;
            }
            covered = piece.end;
        }
        if covered < end {
            return Err(CacheError::WindowTooSmall {
                start: s,
                end,
                position: covered,
                window,
                protected: count(&self.visible_protected(&next)) as usize,
            });
        }
        Ok(WritePlan {
            start: s,
            end,
            heads,
            grow_to,
            victims,
            visible,
        })
    }

    /// The protected resident positions of `slots`.
    fn visible_protected(&self, slots: &SlotMap) -> Vec<Range<u64>> {
        let holes = self.protected_ranges();
        slots
            .runs()
            .iter()
            .flat_map(|run| {
                intersect(run.position..run.position + run.len as u64, &holes).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Replaces the buffers by zeroed `[B, capacity, H, D]` ones holding the
    /// resident rows in the same slots. Allocates before it changes anything.
    fn grow(&mut self, capacity: usize, window: usize) -> Result<()> {
        let c = &self.config;
        let shape = (c.batch, capacity, c.heads, c.head_dim);
        let k = Tensor::zeros(shape, self.dtype, &self.device)?;
        let v = Tensor::zeros(shape, self.dtype, &self.device)?;
        let scratch = Self::scratch(c, capacity, self.dtype, &self.device, self.path)?;
        let copy = CopyBlock {
            batch: c.batch,
            len: self.slots.resident(),
            head_count: c.heads,
            head_dim: c.head_dim,
            src: Place {
                slots: self.capacity,
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
        self.capacity = capacity;
        self.window = window;
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
                        batch: self.config.batch,
                        slots: self.capacity,
                        row: self.config.heads * self.config.head_dim,
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

    /// The view of `visible` (ascending position ranges, all resident) for
    /// `heads`: a zero-copy `narrow` when the rows form one slot range,
    /// otherwise one `cat` of the narrowed slot runs.
    fn make_view(&self, visible: &[Range<u64>], heads: Range<usize>) -> Result<View<'_>> {
        let positions: Vec<u64> = visible.iter().flat_map(|r| r.clone()).collect();
        let runs = self.slots.slot_ranges(visible);
        let select = |buffer: &Tensor| -> Result<Tensor> {
            let buffer = if heads.len() == self.config.heads {
                buffer.clone()
            } else {
                buffer.narrow(2, heads.start, heads.len())?
            };
            Ok(match runs.as_slice() {
                [] => buffer.narrow(1, 0, 0)?,
                [only] => buffer.narrow(1, only.start, only.len())?,
                many => {
                    let parts = many
                        .iter()
                        .map(|r| buffer.narrow(1, r.start, r.len()))
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    Tensor::cat(&parts, 1)?
                }
            })
        };
        let (k, v) = (select(&self.k)?, select(&self.v)?);
        Ok(View::new(self.global_end, positions, k, v, runs.len() <= 1))
    }
}

impl KvCache for DenseCache {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.global_end
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    /// SPEC.md §3 `write`: checks 1–8 in order, then the payload (shape,
    /// dtype, device), then the commit: grow or evict-shift, zero the fresh
    /// rows of a head-range write, copy the payload block in place.
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        // 1–3. Arguments (shared with the model: they read no state).
        let checked = request.check_arguments(self.config.heads)?;
        let (s, n, recent, head_range) = (
            checked.start,
            checked.len,
            checked.recent_window,
            checked.heads,
        );
        // 4. does not apply to the dense variant. 5–8:
        let plan = self.plan_write(s, n, head_range, recent)?;
        // The plan fits the (possibly grown) capacity, so `n` fits a usize.
        let len = (plan.end - plan.start) as usize;
        let c = &self.config;
        let expected = [c.batch, len, plan.heads.len(), c.head_dim];
        check_payload("k", k, expected, self.dtype)?;
        check_payload("v", v, expected, self.dtype)?;
        for payload in [k, v] {
            if !payload.device().same_device(&self.device) {
                return Err(Error::Backend(candle_core::Error::DeviceMismatchBinaryOp {
                    lhs: self.device.location(),
                    rhs: payload.device().location(),
                    op: "kvcache write",
                }));
            }
        }
        // Make the payload contiguous before any byte of the cache moves (a
        // no-op clone of the handle when it already is).
        let (k, v) = (k.contiguous()?, v.contiguous()?);
        // Commit.
        if let Some(capacity) = plan.grow_to {
            let window = if self.window == self.capacity {
                capacity
            } else {
                self.window
            };
            self.grow(capacity, window)?;
        }
        self.evict_positions(&plan.victims)?;
        let new_from = plan.start.max(self.global_end);
        self.slots.push(new_from..plan.end.max(new_from));
        if len > 0 {
            let slot = self.slots.slot_of(plan.start).unwrap_or(0);
            let c = &self.config;
            let row = c.heads * c.head_dim;
            let fresh = plan.end.saturating_sub(new_from) as usize;
            if plan.heads.len() < c.heads && fresh > 0 {
                // Fresh rows may hold stale data of rewound positions; heads
                // outside the range are never written and must read zero.
                let zero = ZeroRows {
                    batch: c.batch,
                    slots: self.capacity,
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
                    slots: self.capacity,
                    heads: c.heads,
                    slot,
                    head: plan.heads.start,
                },
            };
            self.copy_block(&self.k, &k, &copy)?;
            self.copy_block(&self.v, &v, &copy)?;
        }
        self.global_end = self.global_end.max(plan.end);
        self.make_view(&plan.visible, plan.heads)
    }

    fn view(&self) -> Result<View<'_>> {
        let visible = self.visible(&self.slots, self.window, None);
        self.make_view(&visible, 0..self.config.heads)
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        let to = non_negative("to", to)?;
        if to > self.global_end {
            return Err(CacheError::RewindAhead {
                to,
                global_end: self.global_end,
            }
            .into());
        }
        self.slots.truncate(to);
        self.global_end = to;
        if self.pin.as_ref().is_some_and(|pin| pin.end > to) {
            self.pin = None;
        }
        Ok(self.global_end)
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        let k = non_negative("tokens", tokens)?;
        let victims = self
            .victims(k, 0..0)
            .map_err(|evictable| CacheError::EvictTooMany {
                tokens: k,
                evictable: evictable as usize,
            })?;
        self.evict_positions(&victims)?;
        Ok(self.global_end)
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        let n = non_negative("tokens", tokens)?;
        if n == 0 {
            self.pin = None;
            return Ok(self.global_end);
        }
        let sink = self.config.sink as u64;
        if sink == 0 {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: "needs a sink, but sink is 0".to_string(),
            }
            .into());
        }
        if n > self.global_end {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: format!("exceeds the global end {}", self.global_end),
            }
            .into());
        }
        let from = self.global_end - n;
        let pin = from..from + sink.min(n);
        if let Some(p) = self.slots.first_missing(pin.clone()) {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: format!(
                    "would pin [{}, {}) but position {p} is not resident",
                    pin.start, pin.end
                ),
            }
            .into());
        }
        self.pin = Some(pin);
        Ok(self.global_end)
    }

    /// Empties the slot map; the buffers keep their size (capacity and
    /// window keep their current values) and their stale bytes, which no
    /// view can reach and every later write overwrites or zeroes.
    fn reset(&mut self) -> u64 {
        self.slots.clear();
        self.global_end = 0;
        self.pin = None;
        0
    }

    /// `2 · B · C · H · D · size_of(dtype)`: the allocated buffers.
    fn resident_bytes(&self) -> u64 {
        let c = &self.config;
        2 * (c.batch * c.heads * c.head_dim) as u64
            * self.capacity as u64
            * c.dtype.size_bytes() as u64
    }

    /// Slot `i < |R|` holds `Hot(position)`, the rest are `Free`.
    fn layout(&self) -> Layout {
        let mut slots: Vec<Slot> = self.slots.positions().map(Slot::Hot).collect();
        slots.resize(self.capacity, Slot::Free);
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
