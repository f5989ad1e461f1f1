//! The bounds of a fuzz case and of what the targets replay.

/// Ops decoded at most for the lockstep targets.
pub const MAX_OPS: usize = 256;
/// Ops decoded at most for `model_invariants` (the model alone is fast).
pub const MAX_MODEL_OPS: usize = 4096;
/// Largest capacity a fuzz case gets.
pub const MAX_CAPACITY: usize = 64;
/// Bytes per encoded op.
pub const OP_BYTES: usize = 4;
/// `trace_load` replays a loaded trace only when its buffers and payloads
/// stay below this many elements (libFuzzer's rss limit is 2 GiB).
pub const TRACE_LOAD_ELEMENTS: u64 = 1 << 16;
/// `trace_load` replays at most this many ops.
pub const TRACE_LOAD_OPS: usize = 1024;
