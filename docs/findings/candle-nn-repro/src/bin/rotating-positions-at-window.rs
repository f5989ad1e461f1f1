//! RotatingKvCache::positions(seq_len) is documented as "the positions corresponding to all
//! the elements that will be returned *after* adding `seq_len` to the cache". For
//! seq_len == max_seq_len with a write offset other than 0 it describes a rotated buffer,
//! but `append` takes its `seq_len >= max_seq_len` branch and returns the chunk itself,
//! in order (and `attn_mask` uses its absolute mask there): positions() disagrees.
use candle_core::{Device, IndexOp, Result, Tensor};
use candle_nn::kv_cache::RotatingKvCache;

const W: usize = 4;

// K/V of shape (b=1, h=1, n, d=1) whose values are the token positions.
fn kv(start: usize, n: usize) -> Result<Tensor> {
    let p: Vec<f32> = (start..start + n).map(|p| p as f32).collect();
    Tensor::from_vec(p, (1, 1, n, 1), &Device::Cpu)
}

fn main() -> Result<()> {
    println!("candle-core 0.11.1, candle-nn 0.11.1; RotatingKvCache::new(2, {W})");
    let mut c = RotatingKvCache::new(2, W);
    // A prompt of 2 tokens (offset 2), then a chunk of exactly W tokens.
    c.append(&kv(0, 2)?, &kv(0, 2)?)?;
    println!("after 2 tokens: current_seq_len {}, offset {}", c.current_seq_len(), c.offset());
    let predicted = c.positions(W);
    let (k, _v) = c.append(&kv(2, W)?, &kv(2, W)?)?;
    let returned: Vec<usize> =
        k.i((0, 0))?.flatten_all()?.to_vec1::<f32>()?.iter().map(|&x| x as usize).collect();
    println!("positions({W}) before the append: {predicted:?}");
    println!("positions of the K rows append returned: {returned:?}");
    // A chunk of W-1 or W+1 agrees; only seq_len == max_seq_len (with offset != 0) does not.
    if predicted != returned {
        println!("DEFECT: positions() does not describe what append returns (rotary phases or a mask built from it would be wrong)");
        std::process::exit(1);
    }
    println!("OK: positions() matches the returned rows");
    Ok(())
}
