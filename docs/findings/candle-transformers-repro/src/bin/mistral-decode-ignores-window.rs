//! candle-transformers 0.11.1, `models::mistral`: a token decoded past the
//! sliding window (`forward` with one token) attends every cached
//! position, while the same model run on the whole sequence masks the
//! positions beyond the window. Exit status 1 while the two differ.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, VarBuilder, VarMap};
use candle_transformers::models::mistral::{Config, Model};

fn main() -> candle_core::Result<()> {
    let device = Device::Cpu;
    let cfg = Config {
        vocab_size: 64,
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
        sliding_window: Some(2),
        use_flash_attn: false,
    };
    // Two models sharing one set of weights (fixed values, for a stable
    // printout): one decodes with its cache, one recomputes.
    let weights = VarMap::new();
    let vb = VarBuilder::from_varmap(&weights, DType::F32, &device);
    let mut cached = Model::new(&cfg, vb.clone())?;
    for (i, var) in weights.all_vars().iter().enumerate() {
        let n = var.elem_count();
        let values: Vec<f32> = (0..n).map(|j| ((i * 7919 + j * 104_729) % 1000) as f32 / 2000.0 - 0.25).collect();
        var.set(&Tensor::from_vec(values, var.shape(), &device)?)?;
    }
    let mut fresh = Model::new(&cfg, vb)?;
    let tokens = [3u32, 14, 15, 9, 26];
    let ids = |t: &[u32]| Tensor::new(t, &device)?.unsqueeze(0);
    // A prompt of 4 tokens, then the 5th decoded: the window is 2.
    cached.forward(&ids(&tokens[..4])?, 0)?;
    let decoded = cached.forward(&ids(&tokens[4..])?, 4)?.flatten_all()?;
    let whole = fresh.forward(&ids(&tokens)?, 0)?.flatten_all()?;
    let difference = (decoded - whole)?.abs()?.max(0)?.to_scalar::<f32>()?;
    println!("candle-transformers 0.11.1, mistral, sliding_window 2; prompt of 4 tokens, the 5th decoded");
    println!("largest difference of a logit, decoded with the cache against the whole sequence without it: {difference:.4}");
    if difference > 1e-4 {
        println!("DEFECT: the decoded token attends positions its own model masks beyond the sliding window");
        std::process::exit(1);
    }
    println!("OK: decoding agrees with the recompute");
    Ok(())
}
