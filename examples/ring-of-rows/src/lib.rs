//! A small dense KV cache that lives outside `kvcache`, written the way a
//! pipeline author would write one, and checked against the reference model
//! by kvcheck's property suites (`tests/suites.rs`).
//!
//! [`RingOfRows`] keeps the `S` sink positions in the first `S` slots and
//! every later position `p` in slot `S + (p − S) mod (C − S)`: a ring, so an
//! append overwrites exactly the position that falls out of it. Each slot
//! holds one row of `B · H · D` values per tensor. It implements the
//! contract's dense variant without pins, growth, head ranges or recent
//! windows; those are refused as outside what it supports, and its
//! capabilities say so, so kvcheck never sends them.
//!
//! Why the ring is right: without pins the protected positions are the
//! sink, and every other resident position lies in the last `C − S`
//! positions below the global end (they are only ever evicted from the
//! front), so the `C − S` ring slots hold them without collision, and the
//! position an append overwrites is the oldest evictable one, which the
//! contract evicts first.

use candle_core::{DType, Device, Tensor};
use kvcache::{KvCache, Layout, Slot, View};
use kvmodel::{CacheError, Config, Variant, Write};

/// A dense ring of rows (see the crate docs).
pub struct RingOfRows {
    config: Config,
    device: Device,
    global_end: u64,
    slots: Vec<Option<Row>>,
}

/// One resident position: its K and V rows, `B · H · D` values each,
/// batch-major.
#[derive(Clone)]
struct Row {
    position: u64,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn refused<T>(op: &'static str, detail: &str) -> kvcache::Result<T> {
    Err(CacheError::Unsupported {
        op,
        detail: format!("{detail} is not supported by ring-of-rows"),
    }
    .into())
}

impl RingOfRows {
    /// An empty cache for `config`: dense, no growth, no global sink.
    pub fn new(config: &Config, device: &Device) -> kvcache::Result<RingOfRows> {
        config.validate()?;
        let unsupported = [
            (config.variant != Variant::Dense, "variant", "must be dense"),
            (config.growth, "growth", "is not supported"),
            (config.global_sink > 0, "global_sink", "is not supported"),
        ];
        if let Some((_, field, reason)) = unsupported.into_iter().find(|(bad, _, _)| *bad) {
            let reason = format!("{reason} by ring-of-rows");
            return Err(CacheError::InvalidConfig { field, reason }.into());
        }
        Ok(RingOfRows {
            config: config.clone(),
            device: device.clone(),
            global_end: 0,
            slots: vec![None; config.capacity],
        })
    }

    fn slot_of(&self, position: u64) -> usize {
        let sink = self.config.sink as u64;
        if position < sink {
            return position as usize;
        }
        let ring = (self.config.capacity - self.config.sink) as u64;
        (sink + (position - sink) % ring) as usize
    }

    /// Resident positions, ascending.
    fn resident(&self) -> Vec<u64> {
        let mut positions: Vec<u64> = self
            .slots
            .iter()
            .flatten()
            .map(|row| row.position)
            .collect();
        positions.sort_unstable();
        positions
    }

    fn is_resident(&self, position: u64) -> bool {
        matches!(&self.slots[self.slot_of(position)], Some(row) if row.position == position)
    }

    /// Resident positions that can be evicted (all but the sink), ascending.
    fn evictable(&self) -> Vec<u64> {
        let sink = self.config.sink as u64;
        self.resident().into_iter().filter(|&p| p >= sink).collect()
    }

    /// docs/contract.md §4 without a recent window, for the resident positions
    /// `resident`: the sink and the newest `W − |sink|` others.
    fn view_of(&self, resident: &[u64]) -> Vec<u64> {
        let sink = self.config.sink as u64;
        let (protected, others): (Vec<u64>, Vec<u64>) = resident.iter().partition(|&&p| p < sink);
        let keep = self
            .config
            .effective_window()
            .saturating_sub(protected.len());
        let mut shown = protected;
        shown.extend_from_slice(&others[others.len().saturating_sub(keep)..]);
        shown
    }

    fn view_now(&self) -> kvcache::Result<View<'_>> {
        let positions = self.view_of(&self.resident());
        let c = &self.config;
        let row = c.heads * c.head_dim;
        let mut tensors = Vec::new();
        for kv in 0..2 {
            let mut data = Vec::with_capacity(c.batch * positions.len() * row);
            for b in 0..c.batch {
                for &p in &positions {
                    let row_of = self.slots[self.slot_of(p)].as_ref().expect("resident");
                    let values = if kv == 0 { &row_of.k } else { &row_of.v };
                    data.extend_from_slice(&values[b * row..(b + 1) * row]);
                }
            }
            let shape = (c.batch, positions.len(), c.heads, c.head_dim);
            let tensor = Tensor::from_vec(data, shape, &self.device)?;
            tensors.push(tensor.to_dtype(kvcache::candle_dtype(c.dtype))?);
        }
        let v = tensors.pop().expect("two tensors");
        let k = tensors.pop().expect("two tensors");
        Ok(View::new(self.global_end, positions, k, v, false))
    }
}

impl KvCache for RingOfRows {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.global_end
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        let checked = request.check_arguments(self.config.heads)?;
        if request.heads.is_some() {
            return refused("write", "a head range");
        }
        if request.recent_window.is_some() {
            return refused("write", "a recent window");
        }
        let (s, e, g) = (checked.start, checked.end(), self.global_end);
        if s > g {
            return Err(CacheError::NonSequential {
                start: s,
                global_end: g,
            }
            .into());
        }
        if let Some(position) = (s..e.min(g)).find(|&p| !self.is_resident(p)) {
            let resident = kvmodel::format_ranges(self.resident());
            return Err(CacheError::Evicted {
                start: s,
                end: e,
                position,
                resident,
            }
            .into());
        }
        // Room: evict the oldest evictable positions outside the write.
        let resident = self.resident();
        let total = resident.len() as u64 + e.saturating_sub(s.max(g));
        let excess = total.saturating_sub(self.config.capacity as u64) as usize;
        let victims: Vec<u64> = self
            .evictable()
            .into_iter()
            .filter(|&p| p < s)
            .take(excess)
            .collect();
        if victims.len() < excess {
            let protected = resident.len() - self.evictable().len();
            let capacity = self.config.capacity;
            return Err(CacheError::chunk_too_large(s, e, total, capacity, protected).into());
        }
        let mut after: Vec<u64> = resident
            .into_iter()
            .filter(|p| !victims.contains(p))
            .collect();
        after.extend(s.max(g)..e);
        let shown = self.view_of(&after);
        if let Some(position) = (s..e).find(|p| !shown.contains(p)) {
            let (window, protected) = (
                self.config.effective_window(),
                self.config.sink.min(after.len()),
            );
            return Err(CacheError::WindowTooSmall {
                start: s,
                end: e,
                position,
                window,
                protected,
            }
            .into());
        }
        let c = &self.config;
        let shape = [c.batch, checked.len as usize, c.heads, c.head_dim];
        let dtype = kvcache::candle_dtype(c.dtype);
        kvcache::check_payload("k", k, shape, dtype)?;
        kvcache::check_payload("v", v, shape, dtype)?;
        let k = k.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let v = v.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        // Commit: nothing above failed, so the state changes only here.
        for victim in victims {
            let slot = self.slot_of(victim);
            self.slots[slot] = None;
        }
        let row = c.heads * c.head_dim;
        let n = checked.len as usize;
        for (i, p) in (s..e).enumerate() {
            let gather = |values: &[f32]| -> Vec<f32> {
                (0..c.batch)
                    .flat_map(|b| {
                        values[(b * n + i) * row..(b * n + i + 1) * row]
                            .iter()
                            .copied()
                    })
                    .collect()
            };
            let slot = self.slot_of(p);
            self.slots[slot] = Some(Row {
                position: p,
                k: gather(&k),
                v: gather(&v),
            });
        }
        self.global_end = g.max(e);
        self.view_now()
    }

    fn view(&self) -> kvcache::Result<View<'_>> {
        self.view_now()
    }

    fn rewind(&mut self, to: i64) -> kvcache::Result<u64> {
        let to = kvmodel::non_negative("to", to)?;
        if to > self.global_end {
            let global_end = self.global_end;
            return Err(CacheError::RewindAhead { to, global_end }.into());
        }
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|row| row.position >= to) {
                *slot = None;
            }
        }
        self.global_end = to;
        Ok(to)
    }

    fn evict(&mut self, tokens: i64) -> kvcache::Result<u64> {
        let k = kvmodel::non_negative("tokens", tokens)?;
        let evictable = self.evictable();
        if k > evictable.len() as u64 {
            let evictable = evictable.len();
            return Err(CacheError::EvictTooMany {
                tokens: k,
                evictable,
            }
            .into());
        }
        for p in &evictable[..k as usize] {
            let slot = self.slot_of(*p);
            self.slots[slot] = None;
        }
        Ok(self.global_end)
    }

    fn pin(&mut self, _tokens: i64) -> kvcache::Result<u64> {
        refused("pin", "pinning")
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        self.slots.iter_mut().for_each(|slot| *slot = None);
        self.global_end = 0;
        Ok(0)
    }

    fn internals(&self) -> Option<&dyn kvcache::Internals> {
        Some(self)
    }
}

impl kvcache::Internals for RingOfRows {
    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn resident_bytes(&self) -> u64 {
        let c = &self.config;
        (2 * c.batch * c.capacity * c.heads * c.head_dim * c.dtype.size_bytes()) as u64
    }

    fn layout(&self) -> Layout {
        let slots = self.slots.iter().map(|slot| match slot {
            Some(row) => Slot::Hot(row.position),
            None => Slot::Free,
        });
        Layout {
            slots: slots.collect(),
        }
    }
}
