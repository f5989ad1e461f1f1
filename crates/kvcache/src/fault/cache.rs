//! [`FaultyCache`]: a shipped cache with one bug of the zoo.

use std::collections::BTreeSet;
use std::ops::Range;

use candle_core::{Device, Tensor};
use kvmodel::{CacheError, Config, ErrorKind, Quant, Variant, Write};

use super::{rows, CacheFault, FaultBase};
use crate::{
    candle_dtype, DenseCache, Error, KvCache, Layout, PackedCache, Path, Result, RingCache, Slot,
    View,
};

/// Gaps longer than this are not filled by [`CacheFault::GapWriteAccepted`]
/// (the correct refusal stands), so a huge start cannot allocate gigabytes.
const MAX_GAP: u64 = 4096;

enum Inner {
    Dense(DenseCache),
    Packed(PackedCache),
    Ring(RingCache),
}

/// A view the wrapper owns (copied out of the inner cache's storage).
struct Owned {
    global_end: u64,
    positions: Vec<u64>,
    k: Tensor,
    v: Tensor,
}

impl Owned {
    fn of(view: View<'_>) -> Result<Owned> {
        Ok(Owned {
            global_end: view.global_end,
            positions: view.positions,
            k: view.k.copy()?,
            v: view.v.copy()?,
        })
    }

    /// The rows at `which`, in that order (indices may repeat).
    fn select(self, which: &[usize]) -> Result<Owned> {
        Ok(Owned {
            global_end: self.global_end,
            positions: which.iter().map(|&i| self.positions[i]).collect(),
            k: rows::select(&self.k, which)?,
            v: rows::select(&self.v, which)?,
        })
    }

    /// Only the rows whose position passes `keep`.
    fn filter(self, keep: impl Fn(u64) -> bool) -> Result<Owned> {
        let which: Vec<usize> = (0..self.positions.len())
            .filter(|&i| keep(self.positions[i]))
            .collect();
        if which.len() == self.positions.len() {
            return Ok(self);
        }
        self.select(&which)
    }

    /// Rows at `which` replaced by `f(i, row)`, K and V alike.
    fn map(self, which: &[usize], f: impl Fn(usize, &Tensor) -> Result<Tensor>) -> Result<Owned> {
        if which.is_empty() {
            return Ok(self);
        }
        Ok(Owned {
            k: rows::replace(&self.k, which, &f)?,
            v: rows::replace(&self.v, which, &f)?,
            ..self
        })
    }

    fn into_view<'a>(self) -> View<'a> {
        View::new(self.global_end, self.positions, self.k, self.v, false)
    }
}

/// A [`DenseCache`] or [`PackedCache`] (or a [`RingCache`], see
/// [`FaultBase`]) with one [`CacheFault`]: every call goes to the correct
/// cache, and the fault changes what a real
/// implementation with that bug would change (the request, the returned
/// rows and positions, or the state after a refusal). Ops the fault does
/// not touch behave exactly like the shipped cache.
pub struct FaultyCache {
    fault: CacheFault,
    inner: Inner,
    /// Packed appends, oldest first.
    chunks: Vec<Range<u64>>,
    /// Chunks the faulty cache has made cold (a superset of what the
    /// correct cache keeps cold; only the difference shows).
    extra_cold: Vec<Range<u64>>,
    /// A pin lost by a misaligned roll, hidden until the pin changes.
    lost_pin: Option<Range<u64>>,
    /// Position 0 dropped by an eviction counted from slot 0.
    sink_dropped: bool,
    /// Window and capacity before any growth.
    initial: (usize, usize),
}

impl FaultyCache {
    /// The shipped cache of `config.variant` with `fault` injected.
    pub fn new(config: &Config, device: &Device, fault: CacheFault) -> Result<FaultyCache> {
        FaultyCache::on(config, device, fault, FaultBase::Shipped)
    }

    /// The `base` cache for `config` with `fault` injected. Refuses what
    /// the base refuses (a packed config on [`FaultBase::Ring`] with
    /// `invalid_config`).
    pub fn on(
        config: &Config,
        device: &Device,
        fault: CacheFault,
        base: FaultBase,
    ) -> Result<FaultyCache> {
        let inner = match (base, config.variant) {
            (FaultBase::Ring, _) => Inner::Ring(RingCache::new(config, device)?),
            (FaultBase::Shipped, Variant::Dense) => Inner::Dense(DenseCache::new(config, device)?),
            (FaultBase::Shipped, Variant::Packed) => {
                Inner::Packed(PackedCache::new(config, device)?)
            }
            (FaultBase::Generic, Variant::Dense) => {
                Inner::Dense(DenseCache::with_path(config, device, Path::Generic)?)
            }
            (FaultBase::Generic, Variant::Packed) => {
                Inner::Packed(PackedCache::with_path(config, device, Path::Generic)?)
            }
        };
        Ok(FaultyCache {
            fault,
            inner,
            chunks: Vec::new(),
            extra_cold: Vec::new(),
            lost_pin: None,
            sink_dropped: false,
            initial: (config.effective_window(), config.capacity),
        })
    }

    /// The injected fault.
    pub fn fault(&self) -> CacheFault {
        self.fault
    }

    fn cache(&self) -> &dyn KvCache {
        match &self.inner {
            Inner::Dense(c) => c,
            Inner::Packed(c) => c,
            Inner::Ring(c) => c,
        }
    }

    fn cache_mut(&mut self) -> &mut dyn KvCache {
        match &mut self.inner {
            Inner::Dense(c) => c,
            Inner::Packed(c) => c,
            Inner::Ring(c) => c,
        }
    }

    fn pin_range(&self) -> Option<Range<u64>> {
        match &self.inner {
            Inner::Dense(c) => c.pin_range(),
            Inner::Ring(c) => c.pin_range(),
            Inner::Packed(_) => None,
        }
    }

    fn window(&self) -> usize {
        match &self.inner {
            Inner::Dense(c) => c.window(),
            Inner::Ring(c) => c.window(),
            Inner::Packed(_) => self.cache().config().effective_window(),
        }
    }

    fn resident(&self) -> BTreeSet<u64> {
        self.cache()
            .layout()
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Hot(p) | Slot::Cold(p) => Some(*p),
                Slot::Free => None,
            })
            .collect()
    }

    fn cold(&self) -> BTreeSet<u64> {
        self.cache()
            .layout()
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Cold(p) => Some(*p),
                _ => None,
            })
            .collect()
    }

    fn is_protected(&self, p: u64) -> bool {
        let config = self.cache().config();
        match self.pin_range() {
            Some(pin) => p < config.global_sink as u64 || pin.contains(&p),
            None => p < config.sink as u64,
        }
    }

    fn quant(&self) -> Quant {
        self.cache().config().packed_policy().quant
    }

    fn zeros(&self, len: u64, device: &Device) -> Result<Tensor> {
        let c = self.cache().config();
        Ok(Tensor::zeros(
            (c.batch, len as usize, c.heads, c.head_dim),
            candle_dtype(c.dtype),
            device,
        )?)
    }

    fn write_owned(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<Owned> {
        Owned::of(self.cache_mut().write(request, k, v)?)
    }

    fn view_owned(&self) -> Result<Owned> {
        Owned::of(self.cache().view()?)
    }

    /// Whether the fault lives in this cache's variant (a dense fault in a
    /// packed cache, or the reverse, leaves the shipped cache as it is).
    fn active(&self) -> bool {
        self.fault.variant() == self.cache().config().variant
    }

    /// The write as the faulty implementation performs it.
    fn faulty_write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<Owned> {
        if !self.active() {
            return self.write_owned(request, k, v);
        }
        let g = self.cache().global_end();
        let c = self.cache().config().clone();
        let (start, len) = (request.start, request.len);
        let valid = start >= 0 && len >= 0;
        match self.fault {
            CacheFault::GapWriteAccepted | CacheFault::ZeroLengthAdvances
                if valid
                    && start as u64 > g
                    && start as u64 - g <= MAX_GAP
                    && (len == 0) == (self.fault == CacheFault::ZeroLengthAdvances)
                    && request.recent_window.is_none_or(|r| r >= 0) =>
            {
                let gap = start as u64 - g;
                let zeros = self.zeros(gap, k.device())?;
                self.write_owned(&Write::new(g as i64, gap as i64), &zeros, &zeros)?;
                self.write_owned(request, k, v)
            }
            CacheFault::ProbeMakesRoom
                if valid
                    && len == 0
                    && start as u64 == g
                    && self.resident().len() >= self.cache().capacity() =>
            {
                // Room for max(n, 1) rows; nothing evictable leaves it full.
                let _ = self.cache_mut().evict(1);
                self.write_owned(request, k, v)
            }
            CacheFault::MutateThenRaise => match request.recent_window {
                Some(r) if r < 0 && valid => {
                    let landed = Write {
                        recent_window: None,
                        ..*request
                    };
                    let _ = self.write_owned(&landed, k, v);
                    Err(Error::Contract(CacheError::NegativeWindow {
                        recent_window: r,
                    }))
                }
                _ => self.write_owned(request, k, v),
            },
            CacheFault::HeadStartIgnored => match request.heads {
                Some([first, count]) if first > 0 && count >= 1 && count as usize <= c.heads => {
                    let from_zero = Write {
                        heads: Some([0, count]),
                        ..*request
                    };
                    self.write_owned(&from_zero, k, v)
                }
                _ => self.write_owned(request, k, v),
            },
            CacheFault::EvictedRewriteOnSink => match self.write_owned(request, k, v) {
                Err(e) if e.kind() == Some(ErrorKind::Evicted) && c.sink > 0 && len > 0 => {
                    let m = (len as usize).min(c.sink);
                    let onto_sink = Write {
                        start: 0,
                        len: m as i64,
                        heads: request.heads,
                        recent_window: None,
                    };
                    self.write_owned(&onto_sink, &k.narrow(1, 0, m)?, &v.narrow(1, 0, m)?)
                }
                other => other,
            },
            CacheFault::ChunkOverProtected => match self.write_owned(request, k, v) {
                Err(e) if e.kind() == Some(ErrorKind::ChunkTooLarge) => self.view_owned(),
                other => other,
            },
            CacheFault::RefusalRolls => match self.write_owned(request, k, v) {
                Err(e)
                    if matches!(
                        e.kind(),
                        Some(
                            ErrorKind::Evicted
                                | ErrorKind::ChunkTooLarge
                                | ErrorKind::WindowTooSmall
                        )
                    ) =>
                {
                    if self.cache_mut().evict(len.max(1)).is_err() {
                        let _ = self.cache_mut().evict(1);
                    }
                    Err(e)
                }
                other => other,
            },
            CacheFault::SlotIgnoresSink
                if valid
                    && c.sink > 0
                    && len > 0
                    && start as u64 >= c.sink as u64
                    && (start + len) as u64 <= g
                    && (self.resident().len() as u64) < g =>
            {
                let early = Write {
                    start: start - c.sink as i64,
                    ..*request
                };
                match self.write_owned(&early, k, v) {
                    Ok(view) => Ok(view),
                    Err(_) => self.write_owned(request, k, v),
                }
            }
            CacheFault::PackedReturnsEveryHead if request.heads.is_some() => {
                let written = self.write_owned(request, k, v)?;
                let all = self.view_owned()?;
                let which: Option<Vec<usize>> = written
                    .positions
                    .iter()
                    .map(|p| all.positions.iter().position(|q| q == p))
                    .collect();
                match which {
                    Some(which) => all.select(&which).map(|o| Owned {
                        global_end: written.global_end,
                        ..o
                    }),
                    None => Ok(written),
                }
            }
            CacheFault::StaleViewAfterRewrite
                if valid && len > 0 && (start as u64) < g && request.heads.is_none() =>
            {
                let before = self.view_owned()?;
                let after = self.write_owned(request, k, v)?;
                let end = (start + len) as u64;
                let stale: Vec<(usize, usize)> = after
                    .positions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| (start as u64..end).contains(p))
                    .filter_map(|(i, p)| Some((i, before.positions.iter().position(|q| q == p)?)))
                    .collect();
                let which: Vec<usize> = stale.iter().map(|s| s.0).collect();
                let old_k = before.k.clone();
                let old_v = before.v.clone();
                let source = |i: usize| stale.iter().find(|s| s.0 == i).map(|s| s.1);
                Ok(Owned {
                    k: rows::replace(&after.k, &which, |i, row| match source(i) {
                        Some(j) => Ok(old_k.narrow(1, j, 1)?),
                        None => Ok(row.clone()),
                    })?,
                    v: rows::replace(&after.v, &which, |i, row| match source(i) {
                        Some(j) => Ok(old_v.narrow(1, j, 1)?),
                        None => Ok(row.clone()),
                    })?,
                    ..after
                })
            }
            _ => self.write_owned(request, k, v),
        }
    }

    /// Bookkeeping after a successful write: chunks of the packed cache and
    /// what a roll did to the pin.
    fn after_write(&mut self, request: &Write, g_before: u64, rolled: bool) {
        let len = request.len.max(0) as u64;
        if let Inner::Packed(_) = self.inner {
            if len > 0 && request.start.max(0) as u64 == g_before {
                let start = g_before;
                self.chunks.push(start..start + len);
                self.freeze_extra();
            }
        }
        if self.fault == CacheFault::PinLostOnMisalignedRoll && rolled && len > 0 {
            if let Some(pin) = self.pin_range() {
                let sink = self.cache().config().sink as u64;
                if pin.start.saturating_sub(sink) % len != 0 {
                    self.lost_pin = Some(pin);
                }
            }
        }
    }

    /// The chunks the faulty coldness rule freezes after an append.
    fn freeze_extra(&mut self) {
        let policy = self.cache().config().packed_policy();
        let sink = self.cache().config().sink as u64;
        if policy.quant == Quant::None {
            return;
        }
        let completed = &self.chunks[..self.chunks.len().saturating_sub(1)];
        let n = completed.len();
        let keep = policy.keep_recent_chunks;
        let mut frozen = Vec::new();
        for (i, chunk) in completed.iter().enumerate() {
            let rank = n - 1 - i;
            let cold = match self.fault {
                CacheFault::KeepRecentCountsCurrent => {
                    rank + 1 >= keep && (chunk.start >= sink || policy.pack_sink)
                }
                CacheFault::SinkChunkPacked => rank >= keep,
                _ => false,
            };
            if cold && !self.extra_cold.contains(chunk) {
                frozen.push(chunk.clone());
            }
        }
        self.extra_cold.extend(frozen);
    }

    /// The view as the faulty implementation returns it.
    fn disguise(&self, view: Owned, recent_window: bool) -> Result<Owned> {
        if !self.active() {
            return Ok(view);
        }
        let c = self.cache().config();
        let sink = c.sink as u64;
        match self.fault {
            CacheFault::WindowDropsSink
                if !recent_window && self.window() < self.cache().capacity() =>
            {
                view.filter(|p| p >= sink)
            }
            CacheFault::WindowDoubleCountsSink if !recent_window && sink > 0 => {
                self.window_budget(view, self.window(), c.sink)
            }
            CacheFault::GrowthKeepsWindow
                if !recent_window && self.cache().capacity() > self.initial.1 =>
            {
                self.window_budget(view, self.initial.0, 0)
            }
            CacheFault::PinDuplicatedInView => match self.pin_range() {
                Some(pin) => {
                    let mut which = Vec::new();
                    for (i, p) in view.positions.iter().enumerate() {
                        which.push(i);
                        if pin.contains(p) {
                            which.push(i);
                        }
                    }
                    view.select(&which)
                }
                None => Ok(view),
            },
            CacheFault::PinLostOnMisalignedRoll => match &self.lost_pin {
                Some(lost) if self.pin_range().as_ref() == Some(lost) => {
                    view.filter(|p| !lost.contains(&p))
                }
                _ => Ok(view),
            },
            CacheFault::EvictRemovesSink if self.sink_dropped => view.filter(|p| p != 0),
            CacheFault::KeepRecentCountsCurrent | CacheFault::SinkChunkPacked => {
                let cold = self.cold();
                let which: Vec<usize> = (0..view.positions.len())
                    .filter(|&i| {
                        let p = view.positions[i];
                        !cold.contains(&p) && self.extra_cold.iter().any(|r| r.contains(&p))
                    })
                    .collect();
                let quant = self.quant();
                view.map(&which, |_, row| rows::quantized(row, quant))
            }
            CacheFault::Int4NibblesSwapped if self.quant() == Quant::Int4 => {
                let which = self.cold_rows(&view);
                view.map(&which, |_, row| rows::nibbles_swapped(row))
            }
            CacheFault::ScaleReciprocal if self.quant() != Quant::None => {
                let which = self.cold_rows(&view);
                let quant = self.quant();
                view.map(&which, |_, row| rows::reciprocal_scale(row, quant))
            }
            _ => Ok(view),
        }
    }

    fn cold_rows(&self, view: &Owned) -> Vec<usize> {
        let cold = self.cold();
        (0..view.positions.len())
            .filter(|&i| cold.contains(&view.positions[i]))
            .collect()
    }

    /// The view keeping the protected positions and the largest
    /// `window − |protected| − less` others.
    fn window_budget(&self, view: Owned, window: usize, less: usize) -> Result<Owned> {
        let protected = view
            .positions
            .iter()
            .filter(|p| self.is_protected(**p))
            .count();
        let budget = window.saturating_sub(protected + less);
        let others: Vec<usize> = (0..view.positions.len())
            .filter(|&i| !self.is_protected(view.positions[i]))
            .collect();
        let drop = others.len().saturating_sub(budget);
        let dropped: BTreeSet<usize> = others.into_iter().take(drop).collect();
        let which: Vec<usize> = (0..view.positions.len())
            .filter(|i| !dropped.contains(i))
            .collect();
        if dropped.is_empty() {
            return Ok(view);
        }
        view.select(&which)
    }

    /// Rows a roll shifted one short: the oldest kept evictable position
    /// shows the row of the next one.
    fn roll_one_short(&self, view: Owned) -> Result<Owned> {
        let first = (0..view.positions.len()).find(|&i| !self.is_protected(view.positions[i]));
        match first {
            Some(i) if i + 1 < view.positions.len() => {
                let (k, v) = (view.k.clone(), view.v.clone());
                Ok(Owned {
                    k: rows::replace(&view.k, &[i], |_, _| Ok(k.narrow(1, i + 1, 1)?))?,
                    v: rows::replace(&view.v, &[i], |_, _| Ok(v.narrow(1, i + 1, 1)?))?,
                    ..view
                })
            }
            _ => Ok(view),
        }
    }

    /// The oldest evictable visible row of batch row `b` replaced by that
    /// of batch row `b + 1` (the last wraps to the first).
    fn roll_crosses_batch(&self, view: Owned) -> Result<Owned> {
        let first = (0..view.positions.len()).find(|&i| !self.is_protected(view.positions[i]));
        let batch = view.k.dim(0)?;
        let Some(i) = first.filter(|_| batch > 1) else {
            return Ok(view);
        };
        let shifted = |t: &Tensor| -> Result<Tensor> {
            let row = t.narrow(1, i, 1)?.contiguous()?;
            let order: Vec<u32> = (0..batch as u32).map(|b| (b + 1) % batch as u32).collect();
            let order = Tensor::from_vec(order, batch, t.device())?;
            Ok(row.index_select(&order, 0)?)
        };
        let (k, v) = (shifted(&view.k)?, shifted(&view.v)?);
        Ok(Owned {
            k: rows::replace(&view.k, &[i], |_, _| Ok(k.clone()))?,
            v: rows::replace(&view.v, &[i], |_, _| Ok(v.clone()))?,
            ..view
        })
    }

    /// Bytes the extra cold rows no longer hold at full precision.
    fn extra_cold_savings(&self) -> u64 {
        if self.extra_cold.is_empty() {
            return 0;
        }
        let c = self.cache().config();
        let hot = (c.head_dim * c.dtype.size_bytes()) as u64;
        let cold = match self.quant() {
            Quant::Int8 => c.head_dim as u64 + 4,
            Quant::Int4 => c.head_dim.div_ceil(2) as u64 + 4,
            Quant::None => hot,
        };
        let cold_now = self.cold();
        let rows = self
            .resident()
            .into_iter()
            .filter(|p| !cold_now.contains(p) && self.extra_cold.iter().any(|r| r.contains(p)))
            .count() as u64;
        rows * (c.batch * c.heads) as u64 * 2 * hot.saturating_sub(cold)
    }
}

impl KvCache for FaultyCache {
    fn config(&self) -> &Config {
        self.cache().config()
    }

    fn global_end(&self) -> u64 {
        self.cache().global_end()
    }

    fn capacity(&self) -> usize {
        self.cache().capacity()
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        let g = self.cache().global_end();
        let before = self.resident();
        let view = self.faulty_write(request, k, v)?;
        let after = self.resident();
        let rolled = before.iter().any(|p| !after.contains(p));
        self.after_write(request, g, rolled);
        let view = match self.fault {
            CacheFault::RollOneShort if rolled && self.active() => self.roll_one_short(view)?,
            CacheFault::RollCrossesBatch if rolled && self.active() => {
                self.roll_crosses_batch(view)?
            }
            _ => view,
        };
        Ok(self
            .disguise(view, request.recent_window.is_some())?
            .into_view())
    }

    fn view(&self) -> Result<View<'_>> {
        Ok(self.disguise(self.view_owned()?, false)?.into_view())
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        let g = self.cache_mut().rewind(to)?;
        self.chunks.retain(|c| c.start < g);
        self.extra_cold.retain(|c| c.start < g);
        if self.pin_range().is_none() {
            self.lost_pin = None;
        }
        if g == 0 {
            self.sink_dropped = false;
        }
        Ok(g)
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        let g = self.cache_mut().evict(tokens)?;
        if tokens > 0 && self.cache().config().sink > 0 && self.active() {
            self.sink_dropped = true;
        }
        Ok(g)
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        let g = self.cache_mut().pin(tokens)?;
        self.lost_pin = None;
        Ok(g)
    }

    fn reset(&mut self) -> u64 {
        self.chunks.clear();
        self.extra_cold.clear();
        self.lost_pin = None;
        self.sink_dropped = false;
        self.cache_mut().reset()
    }

    fn resident_bytes(&self) -> u64 {
        self.cache().resident_bytes() - self.extra_cold_savings()
    }

    fn layout(&self) -> Layout {
        self.cache().layout()
    }
}
