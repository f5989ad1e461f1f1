//! RotatingKvCache::attn_mask (and ScatteredCacheBuilder's mask) for a chunk of at least
//! `max_seq_len` tokens lets each query see `max_seq_len + 1` keys, where the same cache
//! shows `max_seq_len` keys when the same tokens arrive one by one or in shorter chunks.
//! Mimi (candle-transformers) runs this path for any input longer than its context
//! (250 steps = 10 s of audio); Moshi's reference masks with `delta < context`.
use candle_core::{DType, Device, IndexOp, Result, Tensor};
use candle_nn::kv_cache::{RotatingKvCache, ScatteredCacheBuilder};

const W: usize = 4; // window (`max_seq_len`, mimi's `context`)
const T: usize = 6; // tokens 0..6; we look at the last query, position 5

// K/V of shape (b=1, h=1, n, d=1) whose values are the token positions.
fn kv(start: usize, n: usize) -> Result<Tensor> {
    let p: Vec<f32> = (start..start + n).map(|p| p as f32).collect();
    Tensor::from_vec(p, (1, 1, n, 1), &Device::Cpu)
}
fn rows(k: &Tensor) -> Result<Vec<usize>> {
    Ok(k.i((0, 0))?.flatten_all()?.to_vec1::<f32>()?.iter().map(|&x| x as usize).collect())
}
// Positions the last query may attend: keys whose mask entry is 0 (u8: 1 = masked).
fn visible(keys: &[usize], mask_row: Option<Vec<u8>>) -> Vec<usize> {
    let mut v: Vec<usize> = match mask_row {
        None => keys.to_vec(),
        Some(m) => keys.iter().zip(m).filter(|(_, m)| *m == 0).map(|(k, _)| *k).collect(),
    };
    v.sort();
    v
}

fn main() -> Result<()> {
    println!("candle-core 0.11.1, candle-nn 0.11.1; window {W}, tokens 0..{T}, query at position {}", T - 1);
    let dev = Device::Cpu;
    // 1. One token at a time, as in generation (attn_mask(1) is None: the whole buffer).
    let mut c = RotatingKvCache::new(2, W);
    let mut keys = vec![];
    for p in 0..T {
        keys = rows(&c.append(&kv(p, 1)?, &kv(p, 1)?)?.0)?;
    }
    let one_by_one = visible(&keys, None);
    // 2. Chunks of 3 (< window): the relative mask.
    let mut c = RotatingKvCache::new(2, W);
    c.append(&kv(0, 3)?, &kv(0, 3)?)?;
    let m = c.attn_mask(3, &dev)?.unwrap();
    let keys = rows(&c.append(&kv(3, 3)?, &kv(3, 3)?)?.0)?;
    let chunks_of_3 = visible(&keys, Some(m.i(2)?.to_vec1::<u8>()?));
    // 3. One chunk of 6 (>= window), e.g. mimi's `encode`/`decode` of a whole file.
    let c = RotatingKvCache::new(2, W);
    let m = c.attn_mask(T, &dev)?.unwrap();
    let one_chunk = visible(&(0..T).collect::<Vec<_>>(), Some(m.i(T - 1)?.to_vec1::<u8>()?));
    // 4. ScatteredCacheBuilder, one chunk of 6 (additive f32 mask, -inf = masked).
    let mut b = ScatteredCacheBuilder::new(1, W, DType::F32, &dev)?;
    let m = b.indices_and_mask(T, &[true])?.mask().i(T - 1)?.to_vec1::<f32>()?;
    let scattered: Vec<usize> = (0..T).filter(|&j| m[j] == 0.0).collect();

    let expected: Vec<usize> = (T - W..T).collect(); // delta = 5 - k < 4
    println!("expected (the cache's own decode path; Moshi: delta < context): {expected:?}");
    println!("RotatingKvCache, one token at a time:   {one_by_one:?}");
    println!("RotatingKvCache, chunks of 3:           {chunks_of_3:?}");
    println!("RotatingKvCache, one chunk of {T}:        {one_chunk:?}");
    println!("ScatteredCacheBuilder, one chunk of {T}:  {scattered:?}");
    if one_chunk != expected || scattered != expected {
        println!("DEFECT: a chunk of >= {W} tokens attends {} keys per query, one more than the window", W + 1);
        std::process::exit(1);
    }
    println!("OK: every path attends the same {W} keys");
    Ok(())
}
