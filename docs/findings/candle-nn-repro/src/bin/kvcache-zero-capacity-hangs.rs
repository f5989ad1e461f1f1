//! KvCache::new(dim, 0) (or Cache::new(dim, 0)) never returns from its first append:
//! `grow_by` is set to the initial max_seq_len, 0, and `Cache::append` grows in a
//! `while current_seq_len + seq_len > max_seq_len` loop by `grow_by` (since #3035), which
//! then spins forever. Every other size grows as documented by #2810.
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::kv_cache::KvCache;
use std::sync::mpsc;
use std::time::Duration;

fn main() -> Result<()> {
    println!("candle-core 0.11.1, candle-nn 0.11.1");
    // Control: a cache of 2 slots grows to hold 5 tokens.
    let mut c = KvCache::new(2, 2);
    for _ in 0..5 {
        c.append(&Tensor::ones((1, 1, 1, 1), DType::F32, &Device::Cpu)?, &Tensor::ones((1, 1, 1, 1), DType::F32, &Device::Cpu)?)?;
    }
    println!("KvCache::new(2, 2): 5 appends of 1 token -> current_seq_len {}, capacity {}", c.current_seq_len(), c.k_cache().max_seq_len());

    // The same with an initial size of 0, on a thread so that we can give up on it.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut c = KvCache::new(2, 0);
        let t = Tensor::ones((1, 1, 1, 1), DType::F32, &Device::Cpu).unwrap();
        let r = c.append(&t, &t).map(|(k, _)| k.dims().to_vec());
        tx.send(r.map_err(|e| e.to_string())).ok();
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(r) => {
            println!("KvCache::new(2, 0): first append of 1 token returned {r:?}");
            println!("OK: the append returned (grown, or refused with an error)");
            Ok(())
        }
        Err(_) => {
            println!("KvCache::new(2, 0): first append of 1 token has not returned after 5 s (expected: grow to 1, or an error)");
            println!("DEFECT: Cache::append loops forever when grow_by is 0");
            std::process::exit(1);
        }
    }
}
