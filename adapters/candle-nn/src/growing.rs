//! `candle_nn::kv_cache::KvCache` and `ConcatKvCache` as subjects: caches
//! that keep every row, so `append` returns positions `0..G` in order (what
//! both document: the whole sequence so far along dim 2).

use candle_core::Tensor;
use candle_nn::kv_cache::{ConcatKvCache, KvCache as CandleKvCache};
use kvcache::{KvCache, View};
use kvcheck::subject::Factory;
use kvmodel::{Config, Write};

use crate::{appends_at, growing_capabilities, max_seq_len, to_candle, view_of};

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
        // Every row, in position order: what both caches document.
        let positions: Vec<usize> = (0..k.dim(2)?).collect();
        let masked = vec![0; positions.len()];
        view_of(self.global_end(), (&k, &v), &positions, &masked)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        match &mut self.cache {
            Inner::Buffer(c) => c.reset(),
            Inner::Concat(c) => c.reset(),
        }
        Ok(self.global_end())
    }
}

/// The subject `KvCache::new(2, C)`.
pub fn kv_cache() -> Factory {
    Factory::new("candle-nn:KvCache", growing_capabilities(), |config, _| {
        let cache = Inner::Buffer(CandleKvCache::new(2, max_seq_len(config)));
        Ok(Box::new(Growing {
            config: config.clone(),
            cache,
        }))
    })
}

/// The subject `ConcatKvCache::new(2)`.
pub fn concat_kv_cache() -> Factory {
    Factory::new(
        "candle-nn:ConcatKvCache",
        growing_capabilities(),
        |config, _| {
            Ok(Box::new(Growing {
                config: config.clone(),
                cache: Inner::Concat(ConcatKvCache::new(2)),
            }))
        },
    )
}
