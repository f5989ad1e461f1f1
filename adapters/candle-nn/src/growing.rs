//! `candle_nn::kv_cache::KvCache` and `ConcatKvCache` as subjects: caches
//! that keep every row, so `append` returns positions `0..G` in order (what
//! both document: the whole sequence so far along dim 2).

use candle_core::{Device, Tensor};
use candle_nn::kv_cache::{ConcatKvCache, KvCache as CandleKvCache};
use kvcache::{Error, KvCache, View};
use kvcheck::subject::Factory;
use kvmodel::{Config, Write};

use crate::{appends_at, growing_capabilities, max_seq_len, rows_of, to_candle};

/// Either cache.
enum Inner {
    /// `KvCache::new(2, C)`: a buffer of `C` rows grown by `C` when full.
    Buffer(CandleKvCache),
    /// `ConcatKvCache::new(2)`: a concatenation per append.
    Concat(ConcatKvCache),
}

/// A cache that keeps every row, and what it was built for.
pub struct Growing {
    config: Config,
    cache: Inner,
    device: Device,
}

impl KvCache for Growing {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        (match &self.cache {
            Inner::Buffer(c) => c.current_seq_len(),
            Inner::Concat(c) => c.current_seq_len(),
        }) as u64
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        appends_at(self.global_end(), request)?;
        let (k, v) = (to_candle(k)?, to_candle(v)?);
        let (k, v) = match &mut self.cache {
            Inner::Buffer(c) => c.append(&k, &v)?,
            Inner::Concat(c) => c.append(&k, &v)?,
        };
        let order: Vec<usize> = (0..k.dim(2)?).collect();
        let k = rows_of(&k, &order, &self.device)?;
        let v = rows_of(&v, &order, &self.device)?;
        let positions = (0..order.len() as u64).collect();
        Ok(View::new(self.global_end(), positions, k, v, false))
    }

    fn view(&self) -> kvcache::Result<View<'_>> {
        Err(outside("a model reads the cache through append only"))
    }

    fn rewind(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("no rewind"))
    }

    fn evict(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("no evict"))
    }

    fn pin(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("no pin"))
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        match &mut self.cache {
            Inner::Buffer(c) => c.reset(),
            Inner::Concat(c) => c.reset(),
        }
        Ok(self.global_end())
    }
}

fn outside(reason: &str) -> Error {
    Error::Outside {
        reason: reason.to_string(),
    }
}

/// The subject `KvCache::new(2, C)`.
pub fn kv_cache() -> Factory {
    Factory::new(
        "candle-nn:KvCache",
        growing_capabilities(),
        |config, device| {
            let cache = Inner::Buffer(CandleKvCache::new(2, max_seq_len(config)));
            Ok(Box::new(Growing {
                config: config.clone(),
                cache,
                device: device.clone(),
            }))
        },
    )
}

/// The subject `ConcatKvCache::new(2)`.
pub fn concat_kv_cache() -> Factory {
    Factory::new(
        "candle-nn:ConcatKvCache",
        growing_capabilities(),
        |config, device| {
            Ok(Box::new(Growing {
                config: config.clone(),
                cache: Inner::Concat(ConcatKvCache::new(2)),
                device: device.clone(),
            }))
        },
    )
}
