//! candle-nn's KV caches (`candle_nn::kv_cache`, 0.11.1) as kvcheck
//! subjects. Each subject drives one cache through its public API as a
//! candle-transformers model does (K and V in `(batch, heads, seq,
//! head_dim)`, appended along dim 2) and answers every write with what
//! candle returns: the K/V tensors and, where the cache says which
//! positions they hold and which of them the newest query may attend
//! (`positions`, `attn_mask`), those. It keeps no bookkeeping of its own
//! that could hide a defect.
//!
//! - [`rotating`]: `RotatingKvCache`, the sliding window of Mistral-style
//!   models (`window = capacity`, no sink), drawn in the contract's default
//!   trim mode with chunks that fit the window;
//! - [`growing`]: `KvCache`, `ConcatKvCache`, `InterleavedKvCache` and
//!   `RawInterleavedKvCache`, which keep every row and grow (the
//!   contract's `growth` without a sink; the interleaved ones for one
//!   sequence, K and V side by side per head);
//! - [`scattered`]: `ScatteredKvCache` and its builder, a ring per batch
//!   entry, drawn as the sliding window is.
//!
//! `kvcheck::check` runs them (`tests/candle.rs`); `docs/candle.md` has the
//! campaign and the findings.

pub mod growing;
pub mod rotating;
pub mod scattered;

use candle_core::Tensor;
use kvcache::View;
use kvcheck::subject::domain::{ConfigLimits, Probes, Rewrites};
use kvcheck::subject::{Capabilities, Domain, Feature, OpKind};
use kvcheck::Variant;
use kvmodel::Config;

/// `Outside` for a write a model never makes: anything but an append at
/// the cache's own end (`global_end`, what the cache says). Once a cache
/// has accepted a chunk the contract refuses (a long prefill), the
/// contract's end and the cache's part; the cache's own is what a model
/// appends at.
pub fn appends_at(global_end: u64, request: &kvmodel::Write) -> kvcache::Result<()> {
    if request.start != global_end as i64 {
        return Err(kvcache::Error::Outside {
            reason: format!(
                "a model appends at the end ({global_end}), never at {}",
                request.start
            ),
        });
    }
    Ok(())
}

/// A write's payload, `[B, len, H, D]`, in candle's `(B, H, len, D)`.
pub fn to_candle(payload: &Tensor) -> candle_core::Result<Tensor> {
    payload.transpose(1, 2)?.contiguous()
}

/// The view of what candle returned, `(B, H, rows, D)` K and V whose row
/// `i` holds `positions[i]`: the rows with `masked[i] == 0`, in position
/// order, as `[B, rows, H, D]`. Fewer or more rows than positions is the
/// cache's failure, named.
pub fn view_of(
    global_end: u64,
    (k, v): (&Tensor, &Tensor),
    positions: &[usize],
    masked: &[u8],
) -> kvcache::Result<View<'static>> {
    let rows = k.dim(2)?;
    if rows != positions.len() || masked.len() != rows {
        return Err(kvcache::Error::External(
            format!(
                "append returned {rows} rows for {} positions and {} mask entries",
                positions.len(),
                masked.len()
            )
            .into(),
        ));
    }
    let mut seen: Vec<(u64, u32)> = (0..rows)
        .filter(|&row| masked[row] == 0)
        .map(|row| (positions[row] as u64, row as u32))
        .collect();
    seen.sort_unstable();
    let order: Vec<u32> = seen.iter().map(|&(_, row)| row).collect();
    let index = Tensor::from_vec(order, seen.len(), k.device())?;
    // A cache may return a narrowed view of its buffer.
    let pick = |t: &Tensor| -> candle_core::Result<Tensor> {
        t.contiguous()?
            .index_select(&index, 2)?
            .transpose(1, 2)?
            .contiguous()
    };
    let visible = seen.into_iter().map(|(position, _)| position).collect();
    Ok(View::new(global_end, visible, pick(k)?, pick(v)?, false))
}

/// The contract's configuration a candle cache of `capacity` rows is
/// built for: dense, no sink, every dtype, batch and head count.
fn requests(domain: Domain) -> Capabilities {
    Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Reset],
        features: Vec::new(),
        // No read-only view: a model reads the cache through `append`.
        view: false,
        // Neither cache reports its storage (no `internals`).
        domain: Some(Domain {
            // A model appends its tokens: it never rewrites, skips ahead,
            // appends nothing or sends a malformed request.
            rewrites: Rewrites::None,
            gaps: false,
            probes: Probes::None,
            malformed: false,
            ..domain
        }),
        ..Capabilities::full()
    }
}

/// `ConfigLimits` with no sink and `growth` as given.
fn no_sink(growth: bool) -> Box<ConfigLimits> {
    Box::new(ConfigLimits {
        max_sink: Some(0),
        growth: Some(growth),
        ..ConfigLimits::default()
    })
}

/// What the sliding-window cache is asked: chunks up to its window
/// (a longer one returns the chunk alone, another contract, which the
/// relations judge: `docs/candle.md`).
pub fn rotating_capabilities() -> Capabilities {
    requests(Domain {
        oversized: false,
        configs: no_sink(false),
        ..Domain::default()
    })
}

/// [`rotating_capabilities`] with chunks longer than the window too: the
/// long prefill, whose answer (the chunk alone, under a mask) no trim
/// mode of the contract describes, for the relations and invariants to
/// judge (`--oracle self`, never the model). The contract refuses such a
/// chunk and the cache takes it, so the ops drawn after it (at the
/// contract's end) are no longer appends at the cache's: the cache
/// answers them *outside* and the case is cut after the long prefill,
/// which is judged.
pub fn rotating_long_prefill_capabilities() -> Capabilities {
    requests(Domain {
        configs: no_sink(false),
        ..Domain::default()
    })
}

/// What a cache that keeps every row is asked.
pub fn growing_capabilities() -> Capabilities {
    Capabilities {
        features: vec![Feature::Growth],
        ..requests(Domain {
            configs: no_sink(true),
            ..Domain::default()
        })
    }
}

/// The capacity a candle cache is built with for `config`.
pub fn max_seq_len(config: &Config) -> usize {
    config.capacity
}
