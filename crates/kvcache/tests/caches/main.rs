//! The caches' CPU suites, one binary: each module holds one cache or
//! kernel family (`cargo test -p kvcache --test caches ring::`). The device
//! suites (`devices`, `throughput`) stay binaries of their own because the
//! GPU check ships exactly those two, and `alloc` because it installs a
//! counting global allocator for its whole process.

mod answers;
mod attention;
mod dense;
mod packed;
mod paged;
#[cfg(feature = "faults")]
mod paged_faults;
mod paged_props;
mod quant;
mod ring;
#[path = "../vector_config/mod.rs"]
mod vector_config;
