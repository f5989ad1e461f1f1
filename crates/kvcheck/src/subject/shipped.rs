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

/// The shipped cache for `config.variant`, on `device`, running `path`.
pub fn open_cache_on(
    config: &Config,
    device: &Device,
    path: kvcache::Path,
) -> kvcache::Result<Box<dyn KvCache>> {
    Ok(match config.variant {
        Variant::Dense => Box::new(kvcache::DenseCache::with_path(config, device, path)?),
        Variant::Packed => Box::new(kvcache::PackedCache::with_path(config, device, path)?),
    })
}
