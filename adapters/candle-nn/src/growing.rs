//! The candle-nn caches that keep every row, as subjects: `KvCache` and
//! `ConcatKvCache` return positions `0..G` in order (what both document:
//! the whole sequence so far along dim 2); `InterleavedKvCache` and
//! `RawInterleavedKvCache` hold the same for one sequence (batch 1) with K
//! and V side by side per head, `(S, H, 2·D)`, K first, and the view is
//! the two halves.

use candle_core::Tensor;
use candle_nn::kv_cache::{
    ConcatKvCache, InterleavedKvCache, KvCache as CandleKvCache, RawInterleavedKvCache,
};
use kvcache::{KvCache, View};
use kvcheck::subject::{Capabilities, Factory};
use kvmodel::{Config, Dtype, Write};

use crate::{appends_at, growing_capabilities, max_seq_len, to_candle, view_of};

/// One of the caches.
enum Inner {
    /// `KvCache::new(2, C)`: a buffer of `C` rows grown by `C` when full.
    Buffer(CandleKvCache),
    /// `ConcatKvCache::new(2)`: a concatenation per append.
    Concat(ConcatKvCache),
    /// `InterleavedKvCache::new(D)`: a concatenation per append.
    Interleaved(InterleavedKvCache),
    /// `RawInterleavedKvCache::new(H, D, C)`: an f32 buffer doubled when full.
    Raw(RawInterleavedKvCache),
}

/// A cache that keeps every row, and what it was built for.
pub struct Growing {
    config: Config,
    cache: Inner,
}

impl Growing {
    /// What `append` returned (or the raw buffer holds), as `(B, H, S, D)`
    /// K and V.
    fn append(&mut self, k: &Tensor, v: &Tensor, len: usize) -> kvcache::Result<(Tensor, Tensor)> {
        let (heads, d) = (self.config.heads, self.config.head_dim);
        let kv = match &mut self.cache {
            Inner::Buffer(c) => return Ok(c.append(&to_candle(k)?, &to_candle(v)?)?),
            Inner::Concat(c) => return Ok(c.append(&to_candle(k)?, &to_candle(v)?)?),
            // `append` takes `(1, H, S, D)` and returns `(S_total, H, 2·D)`.
            Inner::Interleaved(c) => c.append(&to_candle(k)?, &to_candle(v)?)?,
            // `write_kv_batch` takes `(S, H·D)` rows; `data()` is every row.
            Inner::Raw(c) => {
                let rows = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
                c.write_kv_batch(&rows(k)?, &rows(v)?, len);
                Tensor::from_slice(c.data(), (c.len(), heads, 2 * d), k.device())?
            }
        };
        let half = |at: usize| -> candle_core::Result<Tensor> {
            kv.narrow(2, at, d)?.transpose(0, 1)?.unsqueeze(0)
        };
        Ok((half(0)?, half(d)?))
    }
}

impl KvCache for Growing {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        (match &self.cache {
            Inner::Buffer(c) => c.current_seq_len(),
            Inner::Concat(c) => c.current_seq_len(),
            Inner::Interleaved(c) => c.current_seq_len(),
            Inner::Raw(c) => c.len(),
        }) as u64
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        appends_at(self.global_end(), request)?;
        let (k, v) = self.append(k, v, request.len as usize)?;
        // Every row, in position order: what each cache documents.
        let positions: Vec<usize> = (0..k.dim(2)?).collect();
        let masked = vec![0; positions.len()];
        view_of(self.global_end(), (&k, &v), &positions, &masked)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        match &mut self.cache {
            Inner::Buffer(c) => c.reset(),
            Inner::Concat(c) => c.reset(),
            Inner::Interleaved(c) => c.reset(),
            Inner::Raw(c) => c.reset(),
        }
        Ok(self.global_end())
    }
}

/// A subject named `name` whose cache `open` builds for a config.
fn subject(name: &str, capabilities: Capabilities, open: fn(&Config) -> Inner) -> Factory {
    Factory::new(name, capabilities, move |config, _| {
        Ok(Box::new(Growing {
            config: config.clone(),
            cache: open(config),
        }))
    })
}

/// What a cache of one sequence that keeps every row is asked.
fn one_sequence() -> Capabilities {
    let mut capabilities = growing_capabilities();
    if let Some(domain) = capabilities.domain.as_mut() {
        domain.configs.batch = Some(vec![1]);
    }
    capabilities
}

/// The subject `KvCache::new(2, C)`.
pub fn kv_cache() -> Factory {
    subject("candle-nn:KvCache", growing_capabilities(), |config| {
        Inner::Buffer(CandleKvCache::new(2, max_seq_len(config)))
    })
}

/// The subject `ConcatKvCache::new(2)`.
pub fn concat_kv_cache() -> Factory {
    subject("candle-nn:ConcatKvCache", growing_capabilities(), |_| {
        Inner::Concat(ConcatKvCache::new(2))
    })
}

/// The subject `InterleavedKvCache::new(D)` (batch 1, as documented).
pub fn interleaved_kv_cache() -> Factory {
    subject("candle-nn:InterleavedKvCache", one_sequence(), |config| {
        Inner::Interleaved(InterleavedKvCache::new(config.head_dim))
    })
}

/// The subject `RawInterleavedKvCache::new(H, D, C)` (batch 1, f32).
pub fn raw_interleaved_kv_cache() -> Factory {
    let capabilities = Capabilities {
        dtypes: vec![Dtype::F32],
        ..one_sequence()
    };
    subject("candle-nn:RawInterleavedKvCache", capabilities, |config| {
        Inner::Raw(RawInterleavedKvCache::new(
            config.heads,
            config.head_dim,
            max_seq_len(config),
        ))
    })
}
