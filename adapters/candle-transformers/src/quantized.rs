//! The quantized models at their front door: a GGUF file written in
//! memory (tiny, weights fixed by their names) and loaded through the
//! model's own `ModelWeights::from_gguf`, as candle's quantized examples
//! load a downloaded file. What is checked is the model file's own KV
//! cache and masks; the matrices are stored as `F16`, which `QMatMul`
//! multiplies in f32. With `Q8_0` matrices the activations are rounded to
//! 8 bits before every product, and a chunked forward and a whole one then
//! differ by up to 0.03 in a logit with no cache involved (a tiny model,
//! [`MATRIX`]'s comment): a judge of the cache must not see that.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Result, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama};
use kvcheck::subject::Factory;
use kvmodel::Config;

use crate::{fixed_values, front_door_capabilities, Decoder, FrontDoor};

const VOCAB: usize = 64;
const HIDDEN: usize = 32;
const FFN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 8;
const LAYERS: usize = 2;

/// The type of every matrix in the file. `F16` (a GGUF type of its own,
/// as in `*-f16.gguf` files) keeps the judge exact. With `Q8_0` here,
/// `quantized-llama`'s check (seed 1) stops at a chunked forward 0.0267
/// off its whole one, the same greedy token, from the rounding of
/// activations alone.
const MATRIX: GgmlDType = GgmlDType::F16;

/// A GGUF file under construction: its metadata and tensors.
struct Gguf {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, QTensor)>,
}

impl Gguf {
    fn new(architecture: &str) -> Self {
        Gguf {
            metadata: vec![(
                "general.architecture".into(),
                Value::String(architecture.into()),
            )],
            tensors: Vec::new(),
        }
    }

    fn meta(&mut self, key: &str, value: Value) {
        self.metadata.push((key.into(), value));
    }

    /// A weight matrix of `rows × cols`, stored as [`MATRIX`].
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<()> {
        let values = Tensor::from_vec(fixed_values(name, rows * cols), (rows, cols), &Device::Cpu)?;
        let tensor = QTensor::quantize(&values, MATRIX)?;
        self.tensors.push((name.into(), tensor));
        Ok(())
    }

    /// A norm's weight of `n`, in f32 as converters keep them, around 1
    /// so that the signal neither vanishes nor saturates.
    fn norm(&mut self, name: &str, n: usize) -> Result<()> {
        let values: Vec<f32> = fixed_values(name, n).iter().map(|v| 1. + v).collect();
        let values = Tensor::from_vec(values, n, &Device::Cpu)?;
        let tensor = QTensor::quantize(&values, GgmlDType::F32)?;
        self.tensors.push((name.into(), tensor));
        Ok(())
    }

    /// The file's bytes.
    fn bytes(&self) -> Result<Vec<u8>> {
        let metadata: Vec<(&str, &Value)> =
            self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensors: Vec<(&str, &QTensor)> =
            self.tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let mut file = Cursor::new(Vec::new());
        gguf_file::write(&mut file, &metadata, &tensors)?;
        Ok(file.into_inner())
    }
}

/// Loads a model from a GGUF file's bytes through its `from_gguf`.
type Load = fn(&[u8], &Device) -> Result<Box<dyn Decoder>>;

/// A subject named `name` whose two models `load` reads from the GGUF
/// file that `write` makes for a config.
fn gguf_front_door(name: &str, write: fn(&Config) -> Result<Gguf>, load: Load) -> Factory {
    Factory::new(name, front_door_capabilities(), move |config, device| {
        let file = write(config)?.bytes()?;
        let cached = load(&file, device)?;
        let fresh = load(&file, device)?;
        Ok(Box::new(FrontDoor::new(
            config,
            cached,
            fresh,
            VOCAB as u32,
            device,
        )))
    })
}

/// The tensors every llama.cpp-converted decoder has: embeddings, the
/// final norm and, per block, attention and a gated MLP.
fn decoder_tensors(gguf: &mut Gguf) -> Result<()> {
    gguf.matrix("token_embd.weight", VOCAB, HIDDEN)?;
    gguf.norm("output_norm.weight", HIDDEN)?;
    gguf.matrix("output.weight", VOCAB, HIDDEN)?;
    for layer in 0..LAYERS {
        let blk = format!("blk.{layer}");
        gguf.matrix(&format!("{blk}.attn_q.weight"), HEADS * HEAD_DIM, HIDDEN)?;
        gguf.matrix(&format!("{blk}.attn_k.weight"), KV_HEADS * HEAD_DIM, HIDDEN)?;
        gguf.matrix(&format!("{blk}.attn_v.weight"), KV_HEADS * HEAD_DIM, HIDDEN)?;
        gguf.matrix(
            &format!("{blk}.attn_output.weight"),
            HIDDEN,
            HEADS * HEAD_DIM,
        )?;
        gguf.matrix(&format!("{blk}.ffn_gate.weight"), FFN, HIDDEN)?;
        gguf.matrix(&format!("{blk}.ffn_up.weight"), FFN, HIDDEN)?;
        gguf.matrix(&format!("{blk}.ffn_down.weight"), HIDDEN, FFN)?;
        gguf.norm(&format!("{blk}.attn_norm.weight"), HIDDEN)?;
        gguf.norm(&format!("{blk}.ffn_norm.weight"), HIDDEN)?;
    }
    Ok(())
}

impl Decoder for quantized_llama::ModelWeights {
    fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        quantized_llama::ModelWeights::forward(self, input_ids, seqlen_offset)
    }

    fn clear_kv_cache(&mut self) {
        quantized_llama::ModelWeights::clear_kv_cache(self)
    }
}

/// A quantized Llama (GGUF architecture `llama`), as candle's
/// `quantized` example runs one: no sliding window.
pub fn quantized_llama() -> Factory {
    gguf_front_door(
        "candle-transformers:quantized-llama",
        |_: &Config| {
            let mut gguf = Gguf::new("llama");
            gguf.meta("llama.attention.head_count", Value::U32(HEADS as u32));
            gguf.meta("llama.attention.head_count_kv", Value::U32(KV_HEADS as u32));
            gguf.meta("llama.block_count", Value::U32(LAYERS as u32));
            gguf.meta("llama.embedding_length", Value::U32(HIDDEN as u32));
            gguf.meta("llama.rope.dimension_count", Value::U32(HEAD_DIM as u32));
            gguf.meta("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
            decoder_tensors(&mut gguf)?;
            Ok(gguf)
        },
        |file, device| {
            let mut reader = Cursor::new(file);
            let content = gguf_file::Content::read(&mut reader)?;
            let model = quantized_llama::ModelWeights::from_gguf(content, &mut reader, device)?;
            Ok(Box::new(model))
        },
    )
}

/// `quantized_gemma3::ModelWeights` has no `clear_kv_cache`: a forward
/// at offset 0 replaces each layer's cache, which is how a new
/// conversation starts there.
struct QuantizedGemma3(quantized_gemma3::ModelWeights);

impl Decoder for QuantizedGemma3 {
    fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        self.0.forward(input_ids, seqlen_offset)
    }

    fn clear_kv_cache(&mut self) {}
}

/// A quantized Gemma 3 (GGUF architecture `gemma3`): every layer but
/// each `sliding_window_type`-th slides over a window of the config's
/// capacity (here layer 0 slides, layer 1 is global).
pub fn quantized_gemma3() -> Factory {
    gguf_front_door(
        "candle-transformers:quantized-gemma3",
        |config: &Config| {
            let mut gguf = Gguf::new("gemma3");
            gguf.meta("gemma3.attention.head_count", Value::U32(HEADS as u32));
            gguf.meta(
                "gemma3.attention.head_count_kv",
                Value::U32(KV_HEADS as u32),
            );
            gguf.meta("gemma3.block_count", Value::U32(LAYERS as u32));
            gguf.meta("gemma3.embedding_length", Value::U32(HIDDEN as u32));
            gguf.meta("gemma3.attention.key_length", Value::U32(HEAD_DIM as u32));
            gguf.meta("gemma3.attention.value_length", Value::U32(HEAD_DIM as u32));
            gguf.meta("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6));
            let window = u32::try_from(config.capacity).unwrap_or(u32::MAX);
            gguf.meta("gemma3.attention.sliding_window", Value::U32(window));
            gguf.meta("gemma3.attention.sliding_window_type", Value::U32(2));
            decoder_tensors(&mut gguf)?;
            for layer in 0..LAYERS {
                let blk = format!("blk.{layer}");
                gguf.norm(&format!("{blk}.attn_q_norm.weight"), HEAD_DIM)?;
                gguf.norm(&format!("{blk}.attn_k_norm.weight"), HEAD_DIM)?;
                gguf.norm(&format!("{blk}.post_attention_norm.weight"), HIDDEN)?;
                gguf.norm(&format!("{blk}.post_ffw_norm.weight"), HIDDEN)?;
            }
            Ok(gguf)
        },
        |file, device| {
            let mut reader = Cursor::new(file);
            let content = gguf_file::Content::read(&mut reader)?;
            let model = quantized_gemma3::ModelWeights::from_gguf(content, &mut reader, device)?;
            Ok(Box::new(QuantizedGemma3(model)))
        },
    )
}
