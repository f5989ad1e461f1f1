//! candle-transformers 0.11.1, `models::mistral`: a token decoded past the
//! sliding window (`forward` with one token) attends every cached
//! position, while the same model run on the whole sequence masks the
//! positions beyond the window. Exit status 1 while the two differ.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, VarBuilder, VarMap};
use candle_transformers::models::mistral::{Config, Model};

/// `n` values fixed by `name` (uniform in ±0.25), so that every run prints
/// the same numbers.
fn fixed_values(name: &str, n: usize) -> Vec<f32> {
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
    // Two models sharing one set of weights, fixed by their names so that
    // every run prints the same numbers: one decodes with its cache, one
    // recomputes.
    let weights = VarMap::new();
    let vb = VarBuilder::from_varmap(&weights, DType::F32, &device);
    let mut cached = Model::new(&cfg, vb.clone())?;
    for (name, var) in weights.data().lock().unwrap().iter() {
        let values = fixed_values(name, var.elem_count());
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
