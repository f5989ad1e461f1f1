//! [`ReferenceCache`]: a deliberately naive [`KvCache`] that keeps every
//! row in a map and asks the model what is resident. It implements both
//! trim modes (docs/contract.md §3): under `after_read` the view is read
//! before the rows the trim drops are forgotten.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use kvcache::{KvCache, Layout, Slot, View};
use kvmodel::quant::cold_round_trip;
use kvmodel::{CacheError, Config, Model, Quant, Trim, Variant, Write};

use super::Fault;
use crate::codec::{tensor_values, to_dtype_tensor, Kv};

/// A naive cache: the model decides what is resident, a map holds each
/// row's values. See the module docs.
#[derive(Clone, Debug)]
pub struct ReferenceCache {
    /// The configuration it was opened with (the model's, except under
    /// [`Fault::TrimBeforeRead`], whose model trims before the read).
    config: Config,
    model: Model,
    device: Device,
    rows: HashMap<(Kv, u64, usize, usize), Vec<f32>>,
    writes: u64,
    evicted_once: bool,
    fault: Option<Fault>,
}

impl ReferenceCache {
    /// A correct naive cache.
    pub fn new(config: &Config, device: &Device) -> Result<ReferenceCache, CacheError> {
        Ok(ReferenceCache {
            config: config.clone(),
            model: Model::new(config)?,
            device: device.clone(),
            rows: HashMap::new(),
            writes: 0,
            evicted_once: false,
            fault: None,
        })
    }

    /// A naive cache with `fault` injected.
    pub fn with_fault(
        config: &Config,
        device: &Device,
        fault: Fault,
    ) -> Result<ReferenceCache, CacheError> {
        let mut cache = Self::new(config, device)?;
        cache.fault = Some(fault);
        if fault == Fault::TrimBeforeRead {
            // Accepts an after_read config but runs the default rule.
            cache.model = Model::new(&Config {
                trim: Trim::BeforeRead,
                ..config.clone()
            })?;
        }
        Ok(cache)
    }

    fn build_view(
        &self,
        positions: Vec<u64>,
        heads: std::ops::Range<usize>,
    ) -> kvcache::Result<View<'_>> {
        let (positions, k, v) = self.view_rows(positions, heads)?;
        Ok(View::new(self.model.global_end(), positions, k, v, false))
    }

    /// The view's positions and its K and V tensors, read from the rows
    /// held now (zeros for a head never written).
    fn view_rows(
        &self,
        positions: Vec<u64>,
        heads: std::ops::Range<usize>,
    ) -> kvcache::Result<(Vec<u64>, Tensor, Tensor)> {
        let config = self.model.config();
        let quant = match config.variant {
            Variant::Packed => config.packed_policy().quant,
            Variant::Dense => Quant::None,
        };
        let positions: Vec<u64> = match self.fault {
            Some(Fault::ForgetSinkAfterEviction) if self.evicted_once => {
                positions.into_iter().filter(|&p| p != 0).collect()
            }
            _ => positions,
        };
        let mut tensors = Vec::new();
        for kv in [Kv::K, Kv::V] {
            let mut data = Vec::new();
            for batch in 0..config.batch {
                for &p in &positions {
                    for head in heads.clone() {
                        match self.rows.get(&(kv, p, batch, head)) {
                            None => data.extend(std::iter::repeat_n(0.0, config.head_dim)),
                            Some(row) if self.model.is_cold(p) => {
                                data.extend(cold_round_trip(row, quant, config.dtype))
                            }
                            Some(row) => data.extend_from_slice(row),
                        }
                    }
                }
            }
            let shape = [config.batch, positions.len(), heads.len(), config.head_dim];
            tensors.push(to_dtype_tensor(data, shape, config.dtype, &self.device)?);
        }
        let v = tensors.pop().expect("two tensors");
        let k = tensors.pop().expect("two tensors");
        Ok((positions, k, v))
    }

    fn forget_dropped(&mut self) {
        let model = &self.model;
        self.rows
            .retain(|(_, p, _, _), _| model.writers(*p).is_some());
    }
}

impl KvCache for ReferenceCache {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.model.global_end()
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        let before = self.model.global_end();
        if self.fault == Some(Fault::RefuseOverlap)
            && request.start >= 0
            && request.len > 0
            && (request.start as u64) < before
            && ((request.start + request.len) as u64) > before
        {
            return Err(CacheError::NonSequential {
                start: request.start as u64,
                global_end: before,
            }
            .into());
        }
        let index = self.writes;
        let resident_before = self.model.resident_len();
        let mut next = self.model.clone();
        let effect = next.write(index, request)?;
        let config = self.model.config().clone();
        let heads = match request.heads {
            Some([first, count]) => first as usize..(first + count) as usize,
            None => 0..config.heads,
        };
        let (s, n) = (request.start as u64, request.len as usize);
        let shape = [config.batch, n, heads.len(), config.head_dim];
        let dtype = kvcache::candle_dtype(config.dtype);
        kvcache::check_payload("k", k, shape, dtype)?;
        kvcache::check_payload("v", v, shape, dtype)?;
        self.model = next;
        self.writes += 1;
        for (kv, tensor) in [(Kv::K, k), (Kv::V, v)] {
            let values = tensor_values(tensor)?;
            let mut rows = values.chunks(config.head_dim);
            for batch in 0..config.batch {
                for i in 0..n {
                    for head in heads.clone() {
                        let row = rows
                            .next()
                            .expect("payload shape checked by the write")
                            .to_vec();
                        let position = s + i as u64;
                        if self.fault == Some(Fault::StaleRewrite)
                            && position < before
                            && self.rows.contains_key(&(kv, position, batch, head))
                        {
                            continue;
                        }
                        self.rows.insert((kv, position, batch, head), row);
                    }
                }
            }
        }
        let added = (s + n as u64).saturating_sub(before) as usize;
        if self.model.resident_len() < resident_before + added {
            self.evicted_once = true;
        }
        let reported = if request.heads.is_some() {
            heads
        } else {
            0..config.heads
        };
        // Read before forgetting: under after_read the view holds rows
        // that the trim has already dropped from the model.
        let (positions, k, v) = self.view_rows(effect.visible.unwrap_or_default(), reported)?;
        self.forget_dropped();
        Ok(View::new(self.model.global_end(), positions, k, v, false))
    }

    fn view(&self) -> kvcache::Result<View<'_>> {
        self.build_view(self.model.view(None), 0..self.model.config().heads)
    }

    fn rewind(&mut self, to: i64) -> kvcache::Result<u64> {
        let g = self.model.rewind(to)?;
        self.forget_dropped();
        Ok(g)
    }

    fn evict(&mut self, tokens: i64) -> kvcache::Result<u64> {
        let g = self.model.evict(tokens)?;
        if tokens > 0 {
            self.evicted_once = true;
        }
        self.forget_dropped();
        Ok(g)
    }

    fn pin(&mut self, tokens: i64) -> kvcache::Result<u64> {
        Ok(self.model.pin(tokens)?)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        self.rows.clear();
        Ok(self.model.reset())
    }

    fn internals(&self) -> Option<&dyn kvcache::Internals> {
        Some(self)
    }
}

impl kvcache::Internals for ReferenceCache {
    fn capacity(&self) -> usize {
        self.model.capacity()
    }

    fn resident_bytes(&self) -> u64 {
        self.model.resident_bytes()
    }

    fn layout(&self) -> Layout {
        Layout {
            slots: self
                .model
                .resident()
                .map(|p| {
                    if self.model.is_cold(p) {
                        Slot::Cold(p)
                    } else {
                        Slot::Hot(p)
                    }
                })
                .collect(),
        }
    }
}
