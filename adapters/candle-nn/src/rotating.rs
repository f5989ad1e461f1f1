//! `candle_nn::kv_cache::RotatingKvCache` as a subject: the positions and
//! the mask come from the cache (`positions(n)`, `attn_mask(n)`, asked
//! before the append as their docs say), the rows from `append`.

use candle_core::{Device, Tensor};
use candle_nn::kv_cache::RotatingKvCache;
use kvcache::{KvCache, View};
use kvcheck::subject::{Capabilities, Factory};
use kvmodel::{Config, Write};

use crate::{
    appends_at, max_seq_len, rotating_capabilities, rotating_long_prefill_capabilities, to_candle,
    view_of,
};

/// The cache and what it was built for.
pub struct Rotating {
    config: Config,
    cache: RotatingKvCache,
    device: Device,
}

impl KvCache for Rotating {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.cache.current_seq_len() as u64
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        appends_at(self.global_end(), request)?;
        let n = request.len as usize;
        let positions = self.cache.positions(n);
        let mask = self.cache.attn_mask(n, &self.device)?;
        let (k, v) = self.cache.append(&to_candle(k)?, &to_candle(v)?)?;
        // The newest query's row of the mask (1: masked); none for one token.
        let masked = match mask {
            Some(mask) => mask.get(mask.dim(0)? - 1)?.to_vec1()?,
            None => vec![0; positions.len()],
        };
        view_of(self.global_end(), (&k, &v), &positions, &masked)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        self.cache.reset();
        Ok(self.global_end())
    }
}

/// The subject: a `RotatingKvCache::new(2, C)` per case, asked chunks up
/// to its window.
pub fn factory() -> Factory {
    with(rotating_capabilities(), "candle-nn:RotatingKvCache")
}

/// The same cache asked long prefills too, for the relations.
pub fn long_prefill() -> Factory {
    with(
        rotating_long_prefill_capabilities(),
        "candle-nn:RotatingKvCache+long",
    )
}

fn with(capabilities: Capabilities, name: &str) -> Factory {
    Factory::new(name, capabilities, |config, device| {
        let cache = RotatingKvCache::new(2, max_seq_len(config));
        Ok(Box::new(Rotating {
            config: config.clone(),
            cache,
            device: device.clone(),
        }))
    })
}
