//! Allocations per steady-state append, counted by a global allocator (its
//! own test binary, so that no other test allocates concurrently).
//!
//! A rolling append evicts and shifts the whole tail; on the generic path
//! that shift goes through the scratch allocated with the cache, so the
//! bytes allocated per append must not grow with the capacity `C`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{Device, Tensor};
use kvcache::{DenseCache, KvCache, Path};
use kvmodel::{Config, Write};

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const HEADS: usize = 4;
const HEAD_DIM: usize = 16;
const CHUNK: usize = 8;

/// Mean bytes allocated by one rolling append of `CHUNK` tokens, at
/// capacity `capacity`, once the cache is full.
fn bytes_per_append(capacity: usize, path: Path) -> usize {
    let mut config = Config::dense(capacity);
    config.heads = HEADS;
    config.head_dim = HEAD_DIM;
    config.sink = 4;
    let mut cache = DenseCache::with_path(&config, &Device::Cpu, path).unwrap();
    let payload = Tensor::ones(
        (1, CHUNK, HEADS, HEAD_DIM),
        candle_core::DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    let mut start = 0i64;
    let mut append = |cache: &mut DenseCache| {
        let request = Write::new(start, CHUNK as i64);
        cache.write(&request, &payload, &payload).unwrap();
        start += CHUNK as i64;
    };
    // Fill, then roll a while so every lazy allocation has happened.
    for _ in 0..capacity / CHUNK + 4 {
        append(&mut cache);
    }
    let rounds = 32;
    let before = BYTES.load(Ordering::Relaxed);
    for _ in 0..rounds {
        append(&mut cache);
    }
    (BYTES.load(Ordering::Relaxed) - before) / rounds
}

#[test]
fn steady_state_appends_allocate_nothing_proportional_to_capacity() {
    let row = HEADS * HEAD_DIM * 4;
    let (small_c, large_c) = (256, 4096);
    let mut large_in_place = 0;
    for path in Path::ALL {
        let small = bytes_per_append(small_c, path);
        let large = bytes_per_append(large_c, path);
        println!("{path}: {small} B per append at C={small_c}, {large} B at C={large_c}");
        // The view's position list (8 bytes per visible position) is the
        // only thing allowed to grow with C: at most 16 bytes per extra
        // slot, against the 256-byte rows a copy of the buffer would take.
        assert!(
            large - small <= 16 * (large_c - small_c),
            "{path}: {large} B per append at C={large_c} vs {small} B at C={small_c}"
        );
        assert!(
            large < large_c * row / 16,
            "{path}: {large} B per append is a sizeable part of a buffer"
        );
        match path {
            Path::InPlace => large_in_place = large,
            // The shift through the scratch adds bookkeeping per block, not
            // per row.
            Path::Generic => assert!(
                large <= large_in_place + 64 * row,
                "generic {large} B vs in-place {large_in_place} B per append"
            ),
        }
    }
}
