//! The model families driven at the front door, each tiny (2 layers,
//! hidden size 32, a vocabulary of 64) with random weights.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Activation, VarBuilder};
use candle_transformers::models::{gemma2, gemma3, llama, mistral, phi3, qwen2, qwen3};
use kvcheck::subject::Factory;
use kvmodel::Config;

use crate::{front_door, Decoder};

const VOCAB: usize = 64;

/// `Decoder` for a model type whose inherent `forward(input, offset)` and
/// `clear_kv_cache()` are the front door.
macro_rules! decoder {
    ($model:ty) => {
        impl Decoder for $model {
            fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
                <$model>::forward(self, input_ids, seqlen_offset)
            }

            fn clear_kv_cache(&mut self) {
                <$model>::clear_kv_cache(self)
            }
        }
    };
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

/// Qwen2 with a sliding window of the config's capacity on every layer.
pub fn qwen2() -> Factory {
    front_door(
        "candle-transformers:qwen2",
        |config: &Config, vb: VarBuilder| {
            let cfg = qwen2::Config {
                vocab_size: VOCAB,
                hidden_size: 32,
                intermediate_size: 64,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                max_position_embeddings: 512,
                sliding_window: config.capacity,
                max_window_layers: 2,
                tie_word_embeddings: true,
                rope_theta: 10_000.,
                rms_norm_eps: 1e-5,
                use_sliding_window: true,
                hidden_act: Activation::Silu,
            };
            let model: Box<dyn Decoder> = Box::new(qwen2::ModelForCausalLM::new(&cfg, vb)?);
            Ok((model, VOCAB as u32))
        },
    )
}

/// Llama and the cache object it is driven with (`llama::Cache`), which
/// a new conversation replaces.
struct Llama {
    model: llama::Llama,
    cache: llama::Cache,
    config: llama::Config,
    device: Device,
}

impl Decoder for Llama {
    fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        self.model
            .forward(input_ids, seqlen_offset, &mut self.cache)
    }

    fn clear_kv_cache(&mut self) {
        if let Ok(cache) = llama::Cache::new(true, DType::F32, &self.config, &self.device) {
            self.cache = cache;
        }
    }
}

/// Llama (no sliding window) with its own `Cache`.
pub fn llama() -> Factory {
    front_door("candle-transformers:llama", |_: &Config, vb: VarBuilder| {
        let cfg = llama::Config {
            hidden_size: 32,
            intermediate_size: 64,
            vocab_size: VOCAB,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            use_flash_attn: false,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.,
            bos_token_id: None,
            eos_token_id: None,
            rope_scaling: None,
            max_position_embeddings: 512,
            tie_word_embeddings: false,
        };
        let device = vb.device().clone();
        let model = llama::Llama::load(vb, &cfg)?;
        let cache = llama::Cache::new(true, DType::F32, &cfg, &device)?;
        let model: Box<dyn Decoder> = Box::new(Llama {
            model,
            cache,
            config: cfg,
            device,
        });
        Ok((model, VOCAB as u32))
    })
}

decoder!(mistral::Model);
decoder!(qwen2::ModelForCausalLM);
decoder!(qwen3::ModelForCausalLM);
decoder!(phi3::Model);
decoder!(gemma2::Model);
decoder!(gemma3::Model);

/// Qwen3 without a sliding window (0.11.1 refuses one: "sliding window is
/// not supported").
pub fn qwen3() -> Factory {
    front_door("candle-transformers:qwen3", |_: &Config, vb: VarBuilder| {
        let cfg = qwen3::Config {
            vocab_size: VOCAB,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            head_dim: 8,
            attention_bias: false,
            num_key_value_heads: 2,
            max_position_embeddings: 512,
            sliding_window: None,
            max_window_layers: 2,
            tie_word_embeddings: true,
            rope_theta: 10_000.,
            rms_norm_eps: 1e-5,
            use_sliding_window: false,
            hidden_act: Activation::Silu,
        };
        let model: Box<dyn Decoder> = Box::new(qwen3::ModelForCausalLM::new(&cfg, vb)?);
        Ok((model, VOCAB as u32))
    })
}

/// Phi-3 (no sliding window).
pub fn phi3() -> Factory {
    front_door("candle-transformers:phi3", |_: &Config, vb: VarBuilder| {
        let cfg = phi3::Config {
            vocab_size: VOCAB,
            hidden_act: Activation::Silu,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.,
            bos_token_id: None,
            eos_token_id: None,
            rope_scaling: None,
            max_position_embeddings: 512,
            original_max_position_embeddings: None,
            partial_rotary_factor: None,
            tie_word_embeddings: false,
        };
        let model: Box<dyn Decoder> = Box::new(phi3::Model::new(&cfg, vb)?);
        Ok((model, VOCAB as u32))
    })
}

/// Gemma 2, its `sliding_window` the config's capacity (the model's own
/// comment: "TODO: Handle the sliding window in the attention mask").
pub fn gemma2() -> Factory {
    front_door(
        "candle-transformers:gemma2",
        |config: &Config, vb: VarBuilder| {
            let cfg = gemma2::Config {
                attention_bias: false,
                head_dim: 8,
                hidden_activation: Activation::GeluPytorchTanh,
                hidden_size: 32,
                intermediate_size: 64,
                num_attention_heads: 4,
                num_hidden_layers: 2,
                num_key_value_heads: 2,
                rms_norm_eps: 1e-6,
                rope_theta: 10_000.,
                vocab_size: VOCAB,
                final_logit_softcapping: Some(30.),
                attn_logit_softcapping: Some(50.),
                query_pre_attn_scalar: 8,
                sliding_window: Some(config.capacity),
                max_position_embeddings: 512,
            };
            let model: Box<dyn Decoder> = Box::new(gemma2::Model::new(false, &cfg, vb)?);
            Ok((model, VOCAB as u32))
        },
    )
}

/// Gemma 3 as Gemma 3 1B is shaped: one KV head, layer 0 slides over a
/// window of the config's capacity (candle-nn's `RotatingKvCache` of that
/// size), layer 1 is global (`sliding_window_pattern` 2).
pub fn gemma3() -> Factory {
    front_door("candle-transformers:gemma3", |config, vb| {
        gemma3_with(config, vb, 1)
    })
}

/// Gemma 3 with two KV heads, as the 4B, 12B and 27B models have several.
pub fn gemma3_kv2() -> Factory {
    front_door("candle-transformers:gemma3-kv2", |config, vb| {
        gemma3_with(config, vb, 2)
    })
}

fn gemma3_with(
    config: &Config,
    vb: VarBuilder,
    kv_heads: usize,
) -> Result<(Box<dyn Decoder>, u32)> {
    let cfg = gemma3::Config {
        attention_bias: false,
        head_dim: 8,
        hidden_activation: Activation::GeluPytorchTanh,
        hidden_size: 32,
        intermediate_size: 64,
        num_attention_heads: 4,
        num_hidden_layers: 2,
        num_key_value_heads: kv_heads,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.,
        rope_local_base_freq: 10_000.,
        vocab_size: VOCAB,
        final_logit_softcapping: None,
        attn_logit_softcapping: None,
        query_pre_attn_scalar: 8,
        sliding_window: config.capacity,
        sliding_window_pattern: 2,
        max_position_embeddings: 512,
    };
    let model: Box<dyn Decoder> = Box::new(gemma3::Model::new(false, &cfg, vb)?);
    Ok((model, VOCAB as u32))
}
