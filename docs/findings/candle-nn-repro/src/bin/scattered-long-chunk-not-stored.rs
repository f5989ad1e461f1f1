//! ScatteredKvCache::append with a chunk of at least `context` tokens returns the chunk but
//! writes nothing to the cache, while ScatteredCacheBuilder::indices_and_mask (its branch
//! for such chunks) has already advanced the positions. The next step's mask marks every
//! slot as written, so decoding after a long prompt attends zero rows (or, after
//! `reset()`, the previous sequence's rows) in place of the prompt's last tokens.
use candle_core::{DType, Device, IndexOp, Result, Tensor};
use candle_nn::kv_cache::ScatteredCacheBuilder;

const CONTEXT: usize = 4;
const PROMPT: usize = 5; // >= CONTEXT

// K/V of shape (b=1, h=1, n, d=1) whose values are the token positions plus one (0 = never written).
fn kv(start: usize, n: usize) -> Result<Tensor> {
    let p: Vec<f32> = (start..start + n).map(|p| p as f32 + 1.0).collect();
    Tensor::from_vec(p, (1, 1, n, 1), &Device::Cpu)
}
fn rows(k: &Tensor) -> Result<Vec<Option<usize>>> {
    let v = k.i((0, 0))?.flatten_all()?.to_vec1::<f32>()?;
    Ok(v.iter().map(|&x| if x == 0.0 { None } else { Some(x as usize - 1) }).collect())
}

fn main() -> Result<()> {
    println!("candle-core 0.11.1, candle-nn 0.11.1; ScatteredCacheBuilder::new(1, {CONTEXT}, F32, cpu)");
    let mut builder = ScatteredCacheBuilder::new(1, CONTEXT, DType::F32, &Device::Cpu)?;
    let mut cache = builder.make_cache(1, 1)?;
    // Prefill a 5-token prompt, as a model's forward does: indices_and_mask, then append.
    let iam = builder.indices_and_mask(PROMPT, &[true])?;
    let (k, _v) = cache.append(&kv(0, PROMPT)?, &kv(0, PROMPT)?, &iam)?;
    println!("prefill of {PROMPT}: append returned K rows {:?}; builder positions {:?}", rows(&k)?, builder.positions());
    // First decode step: position 5.
    let iam = builder.indices_and_mask(1, &[true])?;
    let (k, _v) = cache.append(&kv(PROMPT, 1)?, &kv(PROMPT, 1)?, &iam)?;
    let mask = iam.mask().flatten_all()?.to_vec1::<f32>()?;
    let slots = rows(&k)?;
    println!("decode at position {PROMPT}: cache slots hold {slots:?} (None = never written)");
    println!("decode mask over the slots: {mask:?} (0 = attended)");
    println!("expected: slots hold positions 2..=5 ([4, 5, 2, 3]), all attended");
    let attended_unwritten = slots.iter().zip(&mask).filter(|(s, m)| s.is_none() && **m == 0.0).count();
    if attended_unwritten > 0 {
        println!("DEFECT: the decode step attends {attended_unwritten} slots that were never written (the prompt was not stored)");
        std::process::exit(1);
    }
    println!("OK: the decode step attends the prompt's last tokens");
    Ok(())
}
