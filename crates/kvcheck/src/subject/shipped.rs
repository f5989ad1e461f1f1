//! The caches shipped in `kvcache`, opened for a configuration's variant.

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::{Config, Variant};

/// The shipped cache for `config.variant`, on `device`.
pub fn open_cache(config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
    Ok(match config.variant {
        Variant::Dense => Box::new(kvcache::DenseCache::new(config, device)?),
        Variant::Packed => Box::new(kvcache::PackedCache::new(config, device)?),
    })
}
