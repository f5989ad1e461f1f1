//! The caches shipped in `kvcache`, opened for a configuration's variant.

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::{Config, Variant};

use super::capabilities::{Capabilities, Feature};

/// The shipped cache for `config.variant`, on `device`.
pub fn open_cache(config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
    Ok(match config.variant {
        Variant::Dense => Box::new(kvcache::DenseCache::new(config, device)?),
        Variant::Packed => Box::new(kvcache::PackedCache::new(config, device)?),
    })
}

/// The shipped `RingCache` for a dense `config`, on `device` (a packed
/// config is refused with `invalid_config`, as the ring has no packed
/// variant).
pub fn open_ring(config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
    Ok(Box::new(kvcache::RingCache::new(config, device)?))
}

/// What the `RingCache` expresses: the whole dense contract, every dtype
/// and op, no packed variant (so no quantization).
pub fn ring_capabilities() -> Capabilities {
    let mut capabilities = Capabilities::full();
    capabilities.variants = vec![Variant::Dense];
    capabilities.features.retain(|f| *f != Feature::Quant);
    capabilities
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
