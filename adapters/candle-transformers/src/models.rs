//! The model families driven at the front door, each tiny (2 layers,
//! hidden size 32, a vocabulary of 64) with random weights.

use candle_core::{Result, Tensor};
use candle_nn::{Activation, VarBuilder};
use candle_transformers::models::mistral;
use kvcheck::subject::Factory;
use kvmodel::Config;

use crate::{front_door, Decoder};

const VOCAB: usize = 64;

impl Decoder for mistral::Model {
    fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        mistral::Model::forward(self, input_ids, seqlen_offset)
    }

    fn clear_kv_cache(&mut self) {
        mistral::Model::clear_kv_cache(self)
    }
}

/// Mistral with a sliding window of the config's capacity.
pub fn mistral() -> Factory {
    front_door(
        "candle-transformers:mistral",
        |config: &Config, vb: VarBuilder| {
            let cfg = mistral::Config {
                vocab_size: VOCAB,
                hidden_size: 32,
                intermediate_size: 64,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                head_dim: None,
                num_key_value_heads: 2,
                hidden_act: Activation::Silu,
                max_position_embeddings: 512,
                rms_norm_eps: 1e-5,
                rope_theta: 10_000.,
                sliding_window: Some(config.capacity),
                use_flash_attn: false,
            };
            let model: Box<dyn Decoder> = Box::new(mistral::Model::new(&cfg, vb)?);
            Ok((model, VOCAB as u32))
        },
    )
}
