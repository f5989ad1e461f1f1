//! candle-transformers 0.11.1, `models::gemma3`: on a sliding layer a
//! prefill's query attends `sliding_window + 1` keys (its mask bound is
//! `j + sliding_window < i`), while a decoded token attends the
//! `sliding_window` keys its `RotatingKvCache` holds. The same tokens give
//! other logits prefilled in one forward than decoded one at a time. Exit
//! status 1 while the two differ.

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
    let window = 2;
    // Gemma 3 1B's shape, tiny: one KV head; layer 0 slides over
    // `sliding_window` (a `RotatingKvCache` of that size), layer 1 is global.
    let cfg = Config {
        attention_bias: false,
        head_dim: 8,
        hidden_activation: Activation::GeluPytorchTanh,
        hidden_size: 32,
        intermediate_size: 64,
        num_attention_heads: 4,
        num_hidden_layers: 2,
        num_key_value_heads: 1,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.,
        rope_local_base_freq: 10_000.,
        vocab_size: 64,
        final_logit_softcapping: None,
        attn_logit_softcapping: None,
        query_pre_attn_scalar: 8,
        sliding_window: window,
        sliding_window_pattern: 2,
        max_position_embeddings: 512,
    };
    // Two models sharing one set of fixed weights.
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

    // One forward of the 4 tokens: the last query, at position 3, attends
    // the sliding layer's keys 1, 2 and 3.
    let whole = prefilled.forward(&ids(&tokens)?, 0)?.flatten_all()?;
    // The same 4 tokens one at a time: the cache of 2 holds keys 2 and 3.
    let mut last = None;
    for (position, token) in tokens.iter().enumerate() {
        last = Some(decoded.forward(&ids(&[*token])?, position)?);
    }
    let last = last.unwrap().flatten_all()?;
    let difference = (&whole - &last)?.abs()?.max(0)?.to_scalar::<f32>()?;
    let argmax = |t: &Tensor| t.argmax(0)?.to_scalar::<u32>();
    println!(
        "candle-transformers 0.11.1, gemma3, sliding_window {window}; 4 tokens, the logits of the last"
    );
    println!(
        "expected: the same logits prefilled in one forward as decoded one token at a time (difference ~1e-6)"
    );
    println!(
        "actual: largest difference of a logit, prefilled against decoded: {difference:.4} (greedy token {} against {})",
        argmax(&whole)?,
        argmax(&last)?
    );
    if difference > 1e-4 {
        println!(
            "DEFECT: a prefill's query attends {} keys on the sliding layer, a decoded token the {window} its cache holds",
            window + 1
        );
        std::process::exit(1);
    }
    println!("OK: the prefill attends the {window} keys decoding attends");
    Ok(())
}
