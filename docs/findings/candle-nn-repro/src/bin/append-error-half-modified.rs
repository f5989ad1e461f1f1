//! A failed append leaves the caches half-modified. RotatingCache::append counts the chunk
//! (current_seq_len += n) before writing it; KvCache, RotatingKvCache and ConcatKvCache
//! write K before V. After the error, K and V no longer line up: the next forward reads
//! a row that was never written, or fails on a K/V length mismatch, until `reset()`.
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::kv_cache::{ConcatKvCache, KvCache, RotatingKvCache};

// K/V of shape (b, h=1, n, d=1).
fn kv(b: usize, n: usize) -> Result<Tensor> {
    Tensor::ones((b, 1, n, 1), DType::F32, &Device::Cpu)
}
fn first_line(e: candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}
fn lens(k: &Tensor, v: &Tensor) -> String {
    format!("K {} rows, V {} rows", k.dim(2).unwrap(), v.dim(2).unwrap())
}

fn main() -> Result<()> {
    println!("candle-core 0.11.1, candle-nn 0.11.1");
    let mut defects = 0;

    // 1. RotatingKvCache (gemma3, gemma4, mimi): a call with another batch size fails.
    let mut c = RotatingKvCache::new(2, 8);
    c.append(&kv(1, 2)?, &kv(1, 2)?)?;
    let err = c.append(&kv(2, 1)?, &kv(2, 1)?).unwrap_err();
    println!("RotatingKvCache: batch-2 append after 2 tokens: error \"{}\"", first_line(err));
    println!("  then current_seq_len() = {} (2 rows stored)", c.current_seq_len());
    // The caller retries with the right batch size:
    match c.append(&kv(1, 1)?, &kv(1, 1)?) {
        Ok((k, v)) => println!("  retry returns {} (expected 3 and 3)", lens(&k, &v)),
        Err(e) => println!("  retry fails: {}", first_line(e)),
    }
    if c.k_cache().current_seq_len() != c.v_cache().current_seq_len() || c.current_seq_len() != 3 {
        defects += 1;
    }

    // 2. KvCache: V refused after K was written (here a non-contiguous V, as a forward that
    //    transposes V without `.contiguous()`; an allocation failure does the same).
    let kv2 = |n: usize| Tensor::ones((1, 1, n, 2), DType::F32, &Device::Cpu);
    let mut c = KvCache::new(2, 8);
    c.append(&kv2(2)?, &kv2(2)?)?;
    let v_t = Tensor::ones((1, 1, 2, 3), DType::F32, &Device::Cpu)?.transpose(2, 3)?; // (1,1,3,2)
    match c.append(&kv2(3)?, &v_t) {
        Err(e) => println!("KvCache: append of 3 with a non-contiguous V: error \"{}\"", first_line(e)),
        Ok((k, v)) => println!("KvCache: append of 3 with a non-contiguous V: accepted, {}", lens(&k, &v)),
    }
    let (k, v) = c.append(&kv2(1)?, &kv2(1)?)?;
    println!("  next append returns {} (expected as many K rows as V rows)", lens(&k, &v));
    if k.dim(2)? != v.dim(2)? {
        defects += 1;
    }

    // 3. ConcatKvCache (qwen3): V of another dtype than K's cache.
    let mut c = ConcatKvCache::new(2);
    c.append(&kv(1, 2)?, &kv(1, 2)?)?;
    let err = c.append(&kv(1, 1)?, &kv(1, 1)?.to_dtype(DType::F16)?).unwrap_err();
    println!("ConcatKvCache: V of dtype f16: error \"{}\"", first_line(err));
    let (k, v) = (c.k().unwrap().clone(), c.v().unwrap().clone());
    println!("  cache now holds {} (expected 2 and 2)", lens(&k, &v));
    if k.dim(2)? != v.dim(2)? {
        defects += 1;
    }

    if defects > 0 {
        println!("DEFECT: {defects} of 3 caches were modified by a failed append");
        std::process::exit(1);
    }
    println!("OK: a failed append leaves every cache as it was");
    Ok(())
}
