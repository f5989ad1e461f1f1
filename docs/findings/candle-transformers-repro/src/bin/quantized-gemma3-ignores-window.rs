//! candle-transformers 0.11.1, `models::quantized_gemma3`: a decoded token
//! (`forward` with one token) gets no mask and attends every position its
//! untrimmed cache holds, while the same model run on the whole sequence
//! masks the sliding window; and a forward of several tokens after the
//! first fails building its mask ("dtype mismatch in cat"). The model is
//! loaded through `ModelWeights::from_gguf` from a tiny GGUF file written
//! in memory. Exit status 1 while either shows.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_gemma3::ModelWeights;

const VOCAB: usize = 64;
const HIDDEN: usize = 32;
const FFN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 8;
const LAYERS: usize = 2;
const WINDOW: usize = 2;

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

/// A tiny Gemma 3 GGUF file: layer 0 slides over `WINDOW`, layer 1 is
/// global (`sliding_window_type` 2); matrices in F16, norms in F32.
fn gguf() -> candle_core::Result<Vec<u8>> {
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let matrix = |tensors: &mut Vec<(String, QTensor)>, name: String, rows, cols| {
        let values =
            Tensor::from_vec(fixed_values(&name, rows * cols), (rows, cols), &Device::Cpu)?;
        tensors.push((name, QTensor::quantize(&values, GgmlDType::F16)?));
        candle_core::Result::Ok(())
    };
    matrix(&mut tensors, "token_embd.weight".into(), VOCAB, HIDDEN)?;
    matrix(&mut tensors, "output.weight".into(), VOCAB, HIDDEN)?;
    for l in 0..LAYERS {
        matrix(
            &mut tensors,
            format!("blk.{l}.attn_q.weight"),
            HEADS * HEAD_DIM,
            HIDDEN,
        )?;
        matrix(
            &mut tensors,
            format!("blk.{l}.attn_k.weight"),
            KV_HEADS * HEAD_DIM,
            HIDDEN,
        )?;
        matrix(
            &mut tensors,
            format!("blk.{l}.attn_v.weight"),
            KV_HEADS * HEAD_DIM,
            HIDDEN,
        )?;
        matrix(
            &mut tensors,
            format!("blk.{l}.attn_output.weight"),
            HIDDEN,
            HEADS * HEAD_DIM,
        )?;
        matrix(
            &mut tensors,
            format!("blk.{l}.ffn_gate.weight"),
            FFN,
            HIDDEN,
        )?;
        matrix(&mut tensors, format!("blk.{l}.ffn_up.weight"), FFN, HIDDEN)?;
        matrix(
            &mut tensors,
            format!("blk.{l}.ffn_down.weight"),
            HIDDEN,
            FFN,
        )?;
    }
    let mut norms = vec![("output_norm.weight".to_string(), HIDDEN)];
    for l in 0..LAYERS {
        for (name, n) in [
            ("attn_norm", HIDDEN),
            ("ffn_norm", HIDDEN),
            ("attn_q_norm", HEAD_DIM),
            ("attn_k_norm", HEAD_DIM),
            ("post_attention_norm", HIDDEN),
            ("post_ffw_norm", HIDDEN),
        ] {
            norms.push((format!("blk.{l}.{name}.weight"), n));
        }
    }
    for (name, n) in norms {
        let values: Vec<f32> = fixed_values(&name, n).iter().map(|v| 1. + v).collect();
        let values = Tensor::from_vec(values, n, &Device::Cpu)?;
        tensors.push((name, QTensor::quantize(&values, GgmlDType::F32)?));
    }
    let metadata = [
        ("general.architecture", Value::String("gemma3".into())),
        ("gemma3.attention.head_count", Value::U32(HEADS as u32)),
        (
            "gemma3.attention.head_count_kv",
            Value::U32(KV_HEADS as u32),
        ),
        ("gemma3.block_count", Value::U32(LAYERS as u32)),
        ("gemma3.embedding_length", Value::U32(HIDDEN as u32)),
        ("gemma3.attention.key_length", Value::U32(HEAD_DIM as u32)),
        ("gemma3.attention.value_length", Value::U32(HEAD_DIM as u32)),
        ("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("gemma3.attention.sliding_window", Value::U32(WINDOW as u32)),
        ("gemma3.attention.sliding_window_type", Value::U32(2)),
    ];
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut file = Cursor::new(Vec::new());
    gguf_file::write(&mut file, &metadata, &tensors)?;
    Ok(file.into_inner())
}

fn load(file: &[u8]) -> candle_core::Result<ModelWeights> {
    let mut reader = Cursor::new(file);
    let content = gguf_file::Content::read(&mut reader)?;
    ModelWeights::from_gguf(content, &mut reader, &Device::Cpu)
}

fn main() -> candle_core::Result<()> {
    let file = gguf()?;
    let mut cached = load(&file)?;
    let mut whole = load(&file)?;
    let tokens = [3u32, 14, 15, 9, 26];
    let ids = |t: &[u32]| Tensor::new(t, &Device::Cpu)?.unsqueeze(0);
    let largest = |a: &Tensor, b: &Tensor| -> candle_core::Result<f32> {
        (a.flatten_all()? - b.flatten_all()?)?
            .abs()?
            .max(0)?
            .to_scalar::<f32>()
    };
    let mut defect = false;
    println!("candle-transformers 0.11.1, quantized_gemma3 (GGUF), sliding_window {WINDOW}");

    // A prompt of 2 tokens, then 3 decoded, against one forward of all 5.
    cached.forward(&ids(&tokens[..2])?, 0)?;
    let mut decoded = None;
    for p in 2..5 {
        decoded = Some(cached.forward(&ids(&tokens[p..p + 1])?, p)?);
    }
    let recomputed = whole.forward(&ids(&tokens)?, 0)?;
    let difference = largest(&decoded.unwrap(), &recomputed)?;
    println!("prompt of 2 tokens, tokens 3 to 5 decoded, against one forward of all 5:");
    println!("  expected: the same logits for token 5 (difference ~1e-6)");
    println!("  actual: largest difference of a logit: {difference:.4}");
    if difference > 1e-4 {
        println!(
            "  DEFECT: the decoded token attends every cached position, past the sliding window"
        );
        defect = true;
    }

    // A prompt of 2 tokens, then a chunk of 2, against one forward of all 4.
    cached.forward(&ids(&tokens[..2])?, 0)?;
    println!("prompt of 2 tokens, then a chunk of 2 at position 2, against one forward of all 4:");
    println!("  expected: the same logits for token 4 (difference ~1e-6)");
    match cached.forward(&ids(&tokens[2..4])?, 2) {
        Ok(chunk) => {
            let recomputed = whole.forward(&ids(&tokens[..4])?, 0)?;
            let difference = largest(&chunk, &recomputed)?;
            println!("  actual: largest difference of a logit: {difference:.4}");
            if difference > 1e-4 {
                println!("  DEFECT: the chunk attends other keys than the whole forward");
                defect = true;
            }
        }
        Err(e) => {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            println!("  actual: the forward fails: {first}");
            println!("  DEFECT: a forward of several tokens after the first cannot build its mask");
            defect = true;
        }
    }
    if defect {
        std::process::exit(1);
    }
    println!("OK: decoding and chunks agree with the recompute");
    Ok(())
}
