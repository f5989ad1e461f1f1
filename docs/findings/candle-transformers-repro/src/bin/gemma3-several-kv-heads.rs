//! candle-transformers 0.11.1, `models::gemma3` with more than one KV
//! head: `value_states` reaches the KV cache's `append` transposed (not
//! contiguous), and the cache's `slice_set` refuses it, so every forward
//! of more than one token fails. Exit status 1 while the prefill fails.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, VarBuilder, VarMap};
use candle_transformers::models::gemma3::{Config, Model};

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
    // A tiny Gemma 3 with two KV heads (as text checkpoints other than 1B
    // have several); the window (16) is longer than the prompt, so that
    // only the KV heads matter here.
    let cfg = Config {
        attention_bias: false,
        head_dim: 8,
        hidden_activation: Activation::GeluPytorchTanh,
        hidden_size: 32,
        intermediate_size: 64,
        num_attention_heads: 4,
        num_hidden_layers: 2,
        num_key_value_heads: 2,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.,
        rope_local_base_freq: 10_000.,
        vocab_size: 64,
        final_logit_softcapping: None,
        attn_logit_softcapping: None,
        query_pre_attn_scalar: 8,
        sliding_window: 16,
        sliding_window_pattern: 2,
        max_position_embeddings: 512,
    };
    let weights = VarMap::new();
    let vb = VarBuilder::from_varmap(&weights, DType::F32, &device);
    let mut prefilled = Model::new(false, &cfg, vb.clone())?;
    for (name, var) in weights.data().lock().unwrap().iter() {
        let values = fixed_values(name, var.elem_count());
        var.set(&Tensor::from_vec(values, var.shape(), &device)?)?;
    }
    let mut decoded = Model::new(false, &cfg, vb)?;
    let tokens = [3u32, 14, 15, 9];
    let ids = |t: &[u32]| Tensor::new(t, &device)?.unsqueeze(0);

    println!("candle-transformers 0.11.1, gemma3, num_key_value_heads 2; a prompt of 4 tokens");
    // One token at a time works: a (1, 2, 1, 8) transpose is contiguous.
    let mut last = None;
    for (position, token) in tokens.iter().enumerate() {
        last = Some(decoded.forward(&ids(&[*token])?, position)?);
    }
    let last = last.unwrap().flatten_all()?;
    println!("the 4 tokens decoded one at a time: ok");
    println!("expected: the prompt in one forward gives the same logits (difference ~1e-6)");
    match prefilled.forward(&ids(&tokens)?, 0) {
        Ok(whole) => {
            let whole = whole.flatten_all()?;
            let difference = (&whole - &last)?.abs()?.max(0)?.to_scalar::<f32>()?;
            println!(
                "actual: largest difference of a logit, prefilled against decoded: {difference:.4}"
            );
            if difference > 1e-4 {
                println!("DEFECT: the prefill and decoding disagree");
                std::process::exit(1);
            }
            println!("OK: the prefill runs and agrees with decoding");
            Ok(())
        }
        Err(e) => {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default();
            println!("actual: the forward fails: {first}");
            println!("DEFECT: a forward of more than one token fails with several KV heads");
            std::process::exit(1);
        }
    }
}
