//! [`FaultyCache`]: a shipped cache with one bug of the zoo.

use std::collections::BTreeSet;
use std::ops::Range;

use candle_core::{Device, Tensor};
use kvmodel::{Config, Quant, Variant, Write};

use super::{CacheFault, FaultBase};
use crate::{
    candle_dtype, DenseCache, Internals, KvCache, Layout, PackedCache, Path, Result, RingCache,
    Slot, View,
};

#[allow(unused_imports)]
pub(super) use super::view::*;

/// Gaps longer than this are not filled by [`CacheFault::GapWriteAccepted`]
/// (the correct refusal stands), so a huge start cannot allocate gigabytes.
pub(super) const MAX_GAP: u64 = 4096;

/// A [`DenseCache`] or [`PackedCache`] (or a [`RingCache`], see
/// [`FaultBase`]) with one [`CacheFault`]: every call goes to the correct
/// cache, and the fault changes what a real
/// implementation with that bug would change (the request, the returned
/// rows and positions, or the state after a refusal). Ops the fault does
/// not touch behave exactly like the shipped cache.
pub struct FaultyCache {
    pub(super) fault: CacheFault,
    pub(super) inner: Inner,
    /// Packed appends, oldest first.
    pub(super) chunks: Vec<Range<u64>>,
    /// Chunks the faulty cache has made cold (a superset of what the
    /// correct cache keeps cold; only the difference shows).
    pub(super) extra_cold: Vec<Range<u64>>,
    /// A pin lost by a misaligned roll, hidden until the pin changes.
    pub(super) lost_pin: Option<Range<u64>>,
    /// Position 0 dropped by an eviction counted from slot 0.
    pub(super) sink_dropped: bool,
    /// Window and capacity before any growth.
    pub(super) initial: (usize, usize),
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

    pub(super) fn cache(&self) -> &dyn KvCache {
        match &self.inner {
            Inner::Dense(c) => c,
            Inner::Packed(c) => c,
            Inner::Ring(c) => c,
        }
    }

    /// What the correct cache underneath reports of its storage.
    pub(super) fn storage(&self) -> &dyn Internals {
        match &self.inner {
            Inner::Dense(c) => c,
            Inner::Packed(c) => c,
            Inner::Ring(c) => c,
        }
    }

    pub(super) fn cache_mut(&mut self) -> &mut dyn KvCache {
        match &mut self.inner {
            Inner::Dense(c) => c,
            Inner::Packed(c) => c,
            Inner::Ring(c) => c,
        }
    }

    pub(super) fn pin_range(&self) -> Option<Range<u64>> {
        match &self.inner {
            Inner::Dense(c) => c.pin_range(),
            Inner::Ring(c) => c.pin_range(),
            Inner::Packed(_) => None,
        }
    }

    pub(super) fn window(&self) -> usize {
        match &self.inner {
            Inner::Dense(c) => c.window(),
            Inner::Ring(c) => c.window(),
            Inner::Packed(_) => self.cache().config().effective_window(),
        }
    }

    pub(super) fn resident(&self) -> BTreeSet<u64> {
        self.storage()
            .layout()
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Hot(p) | Slot::Cold(p) => Some(*p),
                Slot::Free => None,
            })
            .collect()
    }

    pub(super) fn cold(&self) -> BTreeSet<u64> {
        self.storage()
            .layout()
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Cold(p) => Some(*p),
                _ => None,
            })
            .collect()
    }

    pub(super) fn is_protected(&self, p: u64) -> bool {
        let config = self.cache().config();
        match self.pin_range() {
            Some(pin) => p < config.global_sink as u64 || pin.contains(&p),
            None => p < config.sink as u64,
        }
    }

    pub(super) fn quant(&self) -> Quant {
        self.cache().config().packed_policy().quant
    }

    pub(super) fn zeros(&self, len: u64, device: &Device) -> Result<Tensor> {
        let c = self.cache().config();
        Ok(Tensor::zeros(
            (c.batch, len as usize, c.heads, c.head_dim),
            candle_dtype(c.dtype),
            device,
        )?)
    }

    pub(super) fn write_owned(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<Owned> {
        Owned::of(self.cache_mut().write(request, k, v)?)
    }

    pub(super) fn view_owned(&self) -> Result<Owned> {
        Owned::of(self.cache().view()?)
    }

    /// Whether the fault lives in this cache's variant (a dense fault in a
    /// packed cache, or the reverse, leaves the shipped cache as it is).
    pub(super) fn active(&self) -> bool {
        self.fault.variant() == self.cache().config().variant
    }
}

impl KvCache for FaultyCache {
    fn config(&self) -> &Config {
        self.cache().config()
    }

    fn global_end(&self) -> u64 {
        self.cache().global_end()
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

    fn reset(&mut self) -> Result<u64> {
        // The inner cache first, so that an error leaves this one as it was.
        let g = self.cache_mut().reset()?;
        self.chunks.clear();
        self.extra_cold.clear();
        self.lost_pin = None;
        self.sink_dropped = false;
        Ok(g)
    }

    fn internals(&self) -> Option<&dyn Internals> {
        Some(self)
    }
}

impl Internals for FaultyCache {
    fn capacity(&self) -> usize {
        self.storage().capacity()
    }

    fn resident_bytes(&self) -> u64 {
        self.storage().resident_bytes() - self.extra_cold_savings()
    }

    fn layout(&self) -> Layout {
        self.storage().layout()
    }
}
