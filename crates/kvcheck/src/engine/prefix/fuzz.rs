//! The body of the `prefix_lockstep` fuzz target (feature `arbitrary`):
//! fuzzer bytes decoded into a small pool config and ops over few
//! requests and a tiny token alphabet, so that prefixes are shared, hit,
//! forked and evicted often, then run in lockstep on the model and the
//! shipped `PagedCache`.

use arbitrary::{Arbitrary, Unstructured};
use candle_core::Device;
use kvcache::PagedCache;
use kvmodel::prefix::{HitRule, PrefixConfig, PrefixOp, PrefixTrace};

use super::lockstep::PrefixLockstep;

/// Requests are named `0..REQUESTS`.
pub const REQUESTS: u8 = 3;
/// Tokens are drawn from `0..TOKENS`.
pub const TOKENS: u8 = 3;
/// At most this many ops per input.
pub const MAX_OPS: usize = 64;

/// One op as the fuzzer draws it: request ids, tokens and counts folded
/// into small ranges by [`FuzzPrefixOp::op`].
#[derive(Clone, Debug, Arbitrary)]
pub enum FuzzPrefixOp {
    /// `start` of request `r` with 1–6 tokens, spelled by the second byte
    /// (two digits in base [`TOKENS`], then zeros: often a prefix of
    /// another prompt).
    Start(u8, u8, u8),
    /// `compute` of `count` positions (-1..=6).
    Compute(u8, u8),
    /// `extend` with 1–3 tokens, spelled likewise.
    Extend(u8, u8, u8),
    /// `fork` of one request into another.
    Fork(u8, u8),
    /// `rollback` of `count` tokens (-1..=6).
    Rollback(u8, u8),
    /// `finish`.
    Finish(u8),
    /// `preempt`.
    Preempt(u8),
    /// `resume`.
    Resume(u8),
    /// `read`.
    Read(u8),
    /// `evict` of `blocks` blocks (-1..=6).
    Evict(u8),
    /// `clear`.
    Clear,
}

fn count(c: u8) -> i64 {
    i64::from(c % 8) - 1
}

/// `len` tokens: the two lowest digits of `spelling` in base [`TOKENS`],
/// lowest first, then zeros.
fn tokens(spelling: u8, len: usize) -> Vec<u32> {
    // Two digits at most: prompts share their prefixes most of the time.
    let mut rest = u32::from(spelling % (TOKENS * TOKENS));
    (0..len)
        .map(|_| {
            let t = rest % u32::from(TOKENS);
            rest /= u32::from(TOKENS);
            t
        })
        .collect()
}

impl FuzzPrefixOp {
    /// The contract op it stands for.
    pub fn op(&self) -> PrefixOp {
        let r = |r: &u8| u32::from(r % REQUESTS);
        match self {
            FuzzPrefixOp::Start(q, spelling, len) => PrefixOp::Start {
                request: r(q),
                tokens: tokens(*spelling, 1 + usize::from(len % 6)),
            },
            FuzzPrefixOp::Compute(q, c) => PrefixOp::Compute {
                request: r(q),
                count: count(*c),
            },
            FuzzPrefixOp::Extend(q, spelling, len) => PrefixOp::Extend {
                request: r(q),
                tokens: tokens(*spelling, 1 + usize::from(len % 3)),
            },
            FuzzPrefixOp::Fork(q, into) => PrefixOp::Fork {
                request: r(q),
                into: r(into),
            },
            FuzzPrefixOp::Rollback(q, c) => PrefixOp::Rollback {
                request: r(q),
                count: count(*c),
            },
            FuzzPrefixOp::Finish(q) => PrefixOp::Finish { request: r(q) },
            FuzzPrefixOp::Preempt(q) => PrefixOp::Preempt { request: r(q) },
            FuzzPrefixOp::Resume(q) => PrefixOp::Resume { request: r(q) },
            FuzzPrefixOp::Read(q) => PrefixOp::Read { request: r(q) },
            FuzzPrefixOp::Evict(c) => PrefixOp::Evict { blocks: count(*c) },
            FuzzPrefixOp::Clear => PrefixOp::Clear,
        }
    }
}

/// The trace `data` decodes to: a pool of 2–9 blocks of 1–3 slots, 1–2
/// layers, rows of 1–2 elements, either hit rule, then at most
/// [`MAX_OPS`] ops. Every input decodes (short input: fewer ops).
pub fn decode(data: &[u8]) -> PrefixTrace {
    let mut u = Unstructured::new(data);
    let mut byte = || u8::arbitrary(&mut u).unwrap_or(0);
    let config = PrefixConfig {
        layers: 1 + usize::from(byte() % 2),
        row_width: 1 + usize::from(byte() % 2),
        hit: if byte() % 2 == 0 {
            HitRule::LeaveOne
        } else {
            HitRule::Whole
        },
        seed: u64::from(byte()),
        ..PrefixConfig::new(2 + usize::from(byte() % 8), 1 + usize::from(byte() % 3))
    };
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match FuzzPrefixOp::arbitrary(&mut u) {
            Ok(op) => ops.push(op.op()),
            Err(_) => break,
        }
    }
    PrefixTrace::new(config, ops)
}

/// Decodes `data` ([`decode`]) and runs it in lockstep on the model and a
/// CPU `PagedCache` (op `i` under index `i`). `Err` is the divergence
/// report followed by the trace's kvtrace JSON, which `kvcheck replay`
/// reproduces once saved.
pub fn check(data: &[u8]) -> Result<(), String> {
    let trace = decode(data);
    let cache = PagedCache::new(&trace.config, &Device::Cpu)
        .map_err(|e| format!("the paged cache refused a valid config: {e}"))?;
    let mut lockstep = PrefixLockstep::new(cache).map_err(|e| e.to_string())?;
    match lockstep.run(&trace.ops, |i| i as u64) {
        Ok(_) => Ok(()),
        Err(divergence) => {
            let json = serde_json::to_string_pretty(
                &trace.with_model_outcomes().map_err(|e| e.to_string())?,
            )
            .unwrap_or_default();
            Err(format!("{divergence}\n{json}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_decodes_and_the_paged_cache_agrees() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut ops = 0;
        for len in 0..400 {
            let data: Vec<u8> = (0..len % 200)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let trace = decode(&data);
            assert!(trace.ops.len() <= MAX_OPS);
            assert!(trace.validate().is_ok());
            check(&data).unwrap_or_else(|report| panic!("{report}"));
            ops += trace.ops.len();
        }
        assert!(ops > 5000, "{ops} ops");
    }
}
