//! candle-transformers' models at their front door: kvcheck's appends
//! become a model's incremental decoding through its own
//! `forward(input_ids, seqlen_offset)` (a prefill in chunks, then single
//! tokens), `reset` its `clear_kv_cache()`. Every write is judged by the
//! same model, weights shared, recomputing the whole sequence from a
//! cleared cache: the logits of the chunk's last token must agree within
//! [`TOLERANCE`]. A difference is the subject's failure
//! ([`RecomputeMismatch`]), a divergence of the write, minimized and saved
//! like any other. The view is every position of the sequence (the
//! contract's growing cache); the logits check what the model attends.

use std::fmt;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use kvcache::{KvCache, View};
use kvcheck::subject::domain::{ConfigLimits, Probes, Rewrites};
use kvcheck::subject::{Capabilities, Domain, Factory, Feature, OpKind};
use kvcheck::Variant;
use kvmodel::{Config, Write};

pub mod models;
pub mod quantized;

/// The largest difference of a logit the recompute allows (float32 on the
/// CPU: an incremental forward and a whole one agree to about 1e-6).
pub const TOLERANCE: f32 = 1e-4;

/// A model that decodes incrementally: what the front door drives.
pub trait Decoder: Send {
    /// The logits of the last of `input_ids` (`(1, n)`), the first of
    /// them at position `seqlen_offset`.
    fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> candle_core::Result<Tensor>;
    /// Forgets every cached position.
    fn clear_kv_cache(&mut self);
}

/// The incremental forward and the recompute disagree.
#[derive(Debug)]
pub struct RecomputeMismatch {
    /// The sequence's length after the write.
    pub length: usize,
    /// The largest difference of a logit.
    pub difference: f32,
    /// The greedy tokens, incremental and recomputed.
    pub argmax: (u32, u32),
}

impl fmt::Display for RecomputeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the logits of token {} differ from the model's recompute without its cache by up to {:.4} (greedy token {} against {})",
            self.length - 1,
            self.difference,
            self.argmax.0,
            self.argmax.1
        )
    }
}

impl std::error::Error for RecomputeMismatch {}

/// The model driven incrementally, its twin for the recompute, and the
/// tokens so far.
pub struct FrontDoor {
    config: Config,
    cached: Box<dyn Decoder>,
    fresh: Box<dyn Decoder>,
    tokens: Vec<u32>,
    vocab: u32,
    index: u64,
    device: Device,
}

impl FrontDoor {
    /// A front door driving `cached` and judging it by `fresh`, two
    /// models of one set of weights with a vocabulary of `vocab`.
    pub(crate) fn new(
        config: &Config,
        cached: Box<dyn Decoder>,
        fresh: Box<dyn Decoder>,
        vocab: u32,
        device: &Device,
    ) -> Self {
        FrontDoor {
            config: config.clone(),
            cached,
            fresh,
            tokens: Vec::new(),
            vocab,
            index: 0,
            device: device.clone(),
        }
    }

    /// The token of `position` written by op `index`: fixed by both, so a
    /// trace replays the same sequence.
    fn token(&self, position: usize) -> u32 {
        let h = (self.index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ position as u64)
            .wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (h >> 33) as u32 % self.vocab
    }

    fn logits(
        model: &mut dyn Decoder,
        tokens: &[u32],
        offset: usize,
        device: &Device,
    ) -> candle_core::Result<Vec<f32>> {
        let ids = Tensor::new(tokens, device)?.unsqueeze(0)?;
        model
            .forward(&ids, offset)?
            .flatten_all()?
            .to_dtype(DType::F32)?
            .to_vec1()
    }
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len())
        .max_by(|&a, &b| v[a].total_cmp(&v[b]))
        .unwrap_or(0) as u32
}

impl KvCache for FrontDoor {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.tokens.len() as u64
    }

    fn write(&mut self, request: &Write, _: &Tensor, _: &Tensor) -> kvcache::Result<View<'_>> {
        let start = self.tokens.len();
        if request.start != start as i64 {
            return Err(kvcache::Error::Outside {
                reason: format!(
                    "a model appends at the end ({start}), never at {}",
                    request.start
                ),
            });
        }
        let new: Vec<u32> = (start..start + request.len as usize)
            .map(|p| self.token(p))
            .collect();
        let got = Self::logits(self.cached.as_mut(), &new, start, &self.device)?;
        self.tokens.extend(&new);
        self.fresh.clear_kv_cache();
        let want = Self::logits(self.fresh.as_mut(), &self.tokens, 0, &self.device)?;
        let difference = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if difference > TOLERANCE || difference.is_nan() {
            return Err(kvcache::Error::External(Box::new(RecomputeMismatch {
                length: self.tokens.len(),
                difference,
                argmax: (argmax(&got), argmax(&want)),
            })));
        }
        let c = &self.config;
        let rows = Tensor::zeros((c.batch, 0, c.heads, c.head_dim), DType::F32, &self.device)?;
        let positions = (0..self.tokens.len() as u64).collect();
        Ok(View::new(
            self.global_end(),
            positions,
            rows.clone(),
            rows,
            false,
        ))
    }

    fn reset(&mut self) -> kvcache::Result<u64> {
        self.cached.clear_kv_cache();
        self.tokens.clear();
        Ok(0)
    }

    fn begin_op(&mut self, index: u64) {
        self.index = index;
    }
}

/// What a model's front door is asked: appends of tokens (a prefill, in
/// chunks or whole, then decoding), a new conversation; the view is every
/// position, values not compared (the logits are).
pub fn front_door_capabilities() -> Capabilities {
    Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Reset],
        features: vec![Feature::Growth],
        values: false,
        view: false,
        domain: Some(Domain {
            rewrites: Rewrites::None,
            gaps: false,
            probes: Probes::None,
            malformed: false,
            configs: Box::new(ConfigLimits {
                max_sink: Some(0),
                growth: Some(true),
                batch: Some(vec![1]),
                ..ConfigLimits::default()
            }),
            ..Domain::default()
        }),
        ..Capabilities::full()
    }
}

/// Builds one model of a family for a config from its weights: the model
/// and its vocabulary size.
pub type Build = fn(&Config, VarBuilder) -> candle_core::Result<(Box<dyn Decoder>, u32)>;

/// A subject named `name` whose two models `build` makes from one set of
/// random weights for a config (its capacity is the model's sliding
/// window, where it has one).
pub fn front_door(name: &str, build: Build) -> Factory {
    Factory::new(name, front_door_capabilities(), move |config, device| {
        let weights = VarMap::new();
        let vb = VarBuilder::from_varmap(&weights, DType::F32, device);
        let (cached, vocab) = build(config, vb.clone())?;
        fixed_weights(&weights)?;
        let (fresh, _) = build(config, vb)?;
        Ok(Box::new(FrontDoor::new(
            config, cached, fresh, vocab, device,
        )))
    })
}

/// Replaces every weight of `weights` with values fixed by its name, so
/// that a trace replays on the same model run after run (the variables'
/// own initialization draws from an unseeded generator): uniform in
/// ±0.25, from a hash of the name and the index.
fn fixed_weights(weights: &VarMap) -> candle_core::Result<()> {
    let data = weights.data().lock().unwrap_or_else(|e| e.into_inner());
    for (name, var) in data.iter() {
        let values = fixed_values(name, var.elem_count());
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok(())
}

/// `n` values fixed by `name`: uniform in ±0.25, from a hash of the name
/// and the index.
pub(crate) fn fixed_values(name: &str, n: usize) -> Vec<f32> {
    let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..n as u64)
        .map(|i| {
            let h =
                (seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.5
        })
        .collect()
}
