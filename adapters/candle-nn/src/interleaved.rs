//! `candle_nn::kv_cache::InterleavedKvCache` and `RawInterleavedKvCache`
//! as subjects: caches of one sequence (batch 1) that keep every row with
//! K and V side by side per head, `(S, H, 2·D)`, K first. Both return (or
//! hold) every position so far in order; the view is K's and V's halves.

use candle_core::Tensor;
use candle_nn::kv_cache::{InterleavedKvCache, RawInterleavedKvCache};
use kvcache::{KvCache, View};
use kvcheck::subject::{Capabilities, Factory};
use kvmodel::{Config, Dtype, Write};

use crate::{appends_at, growing_capabilities, max_seq_len, to_candle, view_of};

/// Either cache.
enum Inner {
    /// `InterleavedKvCache::new(D)`: a concatenation per append.
    Tensor(InterleavedKvCache),
    /// `RawInterleavedKvCache::new(H, D, C)`: an f32 buffer doubled when full.
    Raw(RawInterleavedKvCache),
}

/// An interleaved cache and what it was built for.
pub struct Interleaved {
    config: Config,
    cache: Inner,
}

impl KvCache for Interleaved {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        (match &self.cache {
            Inner::Tensor(c) => c.current_seq_len(),
            Inner::Raw(c) => c.len(),
        }) as u64
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        appends_at(self.global_end(), request)?;
        let (heads, d) = (self.config.heads, self.config.head_dim);
        let kv = match &mut self.cache {
            // `append` takes `(1, H, S, D)` and returns `(S_total, H, 2·D)`.
            Inner::Tensor(c) => c.append(&to_candle(k)?, &to_candle(v)?)?,
            // `write_kv_batch` takes `(S, H·D)` rows; `data()` is every row.
            Inner::Raw(c) => {
                let rows = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
                c.write_kv_batch(&rows(k)?, &rows(v)?, request.len as usize);
                let len = c.len();
                Tensor::from_slice(c.data(), (len, heads, 2 * d), k.device())?
            }
        };
        // K and V halves as `(1, H, S, D)`, what a model reads.
        let half = |at: usize| -> candle_core::Result<Tensor> {
            kv.narrow(2, at, d)?.transpose(0, 1)?.unsqueeze(0)
        };
        let (k, v) = (half(0)?, half(d)?);
        let positions: Vec<usize> = (0..k.dim(2)?).collect();
        let masked = vec![0; positions.len()];
        view_of(self.global_end(), (&k, &v), &positions, &masked)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        match &mut self.cache {
            Inner::Tensor(c) => c.reset(),
            Inner::Raw(c) => c.reset(),
        }
        Ok(self.global_end())
    }
}

/// What a cache of one sequence that keeps every row is asked.
fn one_sequence() -> Capabilities {
    let mut capabilities = growing_capabilities();
    if let Some(domain) = capabilities.domain.as_mut() {
        domain.configs.batch = Some(vec![1]);
    }
    capabilities
}

/// The subject `InterleavedKvCache::new(D)` (batch 1, as documented).
pub fn interleaved_kv_cache() -> Factory {
    Factory::new(
        "candle-nn:InterleavedKvCache",
        one_sequence(),
        |config, _| {
            Ok(Box::new(Interleaved {
                config: config.clone(),
                cache: Inner::Tensor(InterleavedKvCache::new(config.head_dim)),
            }))
        },
    )
}

/// The subject `RawInterleavedKvCache::new(H, D, C)` (batch 1, f32).
pub fn raw_interleaved_kv_cache() -> Factory {
    let capabilities = Capabilities {
        dtypes: vec![Dtype::F32],
        ..one_sequence()
    };
    Factory::new(
        "candle-nn:RawInterleavedKvCache",
        capabilities,
        |config, _| {
            let cache =
                RawInterleavedKvCache::new(config.heads, config.head_dim, max_seq_len(config));
            Ok(Box::new(Interleaved {
                config: config.clone(),
                cache: Inner::Raw(cache),
            }))
        },
    )
}
