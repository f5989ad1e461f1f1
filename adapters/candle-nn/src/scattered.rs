//! `candle_nn::kv_cache::ScatteredKvCache` with its `ScatteredCacheBuilder`
//! as a subject: every batch entry appends together (`batch_mask` all
//! true). The mask comes from the builder (`indices_and_mask(n)`, asked
//! once per step before the append, as its callers do), the rows from
//! `append`. The builder does not say which position a slot holds (its
//! indices are private), so a slot is labelled with the latest position
//! of its residue modulo the context, the ring its code writes; a row
//! that does not hold that position's bytes is a `values` divergence, a
//! mislabel cannot hide one.

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::kv_cache::{ScatteredCacheBuilder, ScatteredKvCache};
use kvcache::{Error, KvCache, View};
use kvcheck::subject::Factory;
use kvmodel::{Config, Write};

use crate::{appends_at, max_seq_len, rotating_capabilities, to_candle, view_of};

/// The builder, its one cache, and what they were built for.
pub struct Scattered {
    config: Config,
    builder: ScatteredCacheBuilder,
    cache: ScatteredKvCache,
}

impl KvCache for Scattered {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.builder.positions().first().copied().unwrap_or(0) as u64
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        appends_at(self.global_end(), request)?;
        let n = request.len as usize;
        let every = vec![true; self.config.batch];
        let iam = self.builder.indices_and_mask(n, &every)?;
        let (k, v) = self.cache.append(&to_candle(k)?, &to_candle(v)?, &iam)?;
        let end = self.global_end() as usize;
        let mask = iam.mask().to_dtype(DType::F32)?;
        // The newest query's row (`-inf`: masked), and the position each
        // returned row stands for.
        let (row, positions): (Vec<f32>, Vec<usize>) = if mask.rank() == 2 {
            // A chunk of `context` or more: the chunk itself, in order.
            (mask.i(n - 1)?.to_vec1()?, (end - n..end).collect())
        } else {
            let context = max_seq_len(&self.config);
            let slot = |s: usize| (s < end).then(|| end - 1 - (end - 1 - s) % context);
            let labels: Vec<Option<usize>> = (0..context).map(slot).collect();
            let row: Vec<f32> = mask.i((0, 0, n - 1))?.to_vec1()?;
            if let Some(s) = (0..context).find(|&s| labels[s].is_none() && row[s] == 0.0) {
                return Err(Error::External(
                    format!("slot {s} is unmasked but no token was written to it").into(),
                ));
            }
            (
                row,
                labels
                    .into_iter()
                    .map(|p| p.unwrap_or(usize::MAX))
                    .collect(),
            )
        };
        let masked: Vec<u8> = row.iter().map(|&m| u8::from(m != 0.0)).collect();
        view_of(end as u64, (&k, &v), &positions, &masked)
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        self.builder.reset();
        Ok(self.global_end())
    }
}

/// The subject: a `ScatteredCacheBuilder::new(B, C, dtype, device)` and
/// its `make_cache(H, D)` per case, asked chunks up to the context.
pub fn factory() -> Factory {
    Factory::new("candle-nn:ScatteredKvCache", rotating_capabilities(), open)
}

fn open(config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
    let dtype = kvcache::candle_dtype(config.dtype);
    let builder = ScatteredCacheBuilder::new(config.batch, max_seq_len(config), dtype, device)?;
    let cache = builder.make_cache(config.heads, config.head_dim)?;
    Ok(Box::new(Scattered {
        config: config.clone(),
        builder,
        cache,
    }))
}
