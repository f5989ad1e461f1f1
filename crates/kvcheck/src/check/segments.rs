//! Segmented views under check: the driver receives every view as
//! [`SegmentedView`] segments, proves that each segment claiming to alias
//! the cache's buffers really is a `narrow` of one buffer at the slots the
//! cache's layout gives for its positions, and materializes the
//! concatenation with [`Segments::to_contiguous_into`] so that it is
//! compared bit for bit like any view.

use std::ops::Range;

use candle_core::{Device, Tensor};
use kvcache::{Layout, SegmentedView, Segments, Slot, View};
use kvmodel::Config;

use crate::check::divergence::DivergenceKind;
use crate::codec::Kv;

/// A segment's claim that view rows `[row, row + len)` of `kv` are slots
/// `[slot, slot + len)` of the cache's buffers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    kv: Kv,
    row: usize,
    len: usize,
    slot: usize,
}

/// A segmented view reduced to what the driver compares: the
/// concatenation as a contiguous view and the aliasing claims (checked
/// against the layout once the view's borrow of the cache has ended).
pub(crate) struct Materialized {
    /// The concatenation of the segments.
    pub view: View<'static>,
    /// Every aliasing claim of the segments.
    pub claims: Vec<Claim>,
}

type Failure = (DivergenceKind, String);

/// Checks the segments' shapes and storage, then writes their
/// concatenation into fresh `[B, len, heads, D]` tensors. `zero_copy`
/// demands that every segment alias the buffers (a cache laid out as a
/// ring never needs to copy).
pub(crate) fn materialize(
    view: &SegmentedView<'_>,
    config: &Config,
    heads: Range<usize>,
    device: &Device,
    zero_copy: bool,
) -> Result<Materialized, Failure> {
    let claims = check_segments(view, config, heads.clone(), zero_copy)?;
    let shape = [
        config.batch,
        view.positions.len(),
        heads.len(),
        config.head_dim,
    ];
    let dtype = kvcache::candle_dtype(config.dtype);
    let mut tensors = Vec::new();
    for (kv, side) in [(Kv::K, &view.k), (Kv::V, &view.v)] {
        let mut dst = Tensor::zeros(shape.to_vec(), dtype, device)
            .map_err(|e| (DivergenceKind::Backend, format!("allocating {kv:?}: {e}")))?;
        side.to_contiguous_into(&mut dst).map_err(|e| {
            (
                DivergenceKind::Backend,
                format!("materializing the {kv:?} segments failed: {e}"),
            )
        })?;
        tensors.push(dst);
    }
    let v = tensors.pop().expect("two sides");
    let k = tensors.pop().expect("two sides");
    Ok(Materialized {
        view: View::new(view.global_end, view.positions.clone(), k, v, false),
        claims,
    })
}

/// Checks both sides' segment shapes and storage, K then V, without
/// copying (what [`materialize`] checks before it copies): the aliasing
/// claims, or what failed. The values are compared in place by [`crate::check::viewcheck`].
pub(crate) fn check_segments(
    view: &SegmentedView<'_>,
    config: &Config,
    heads: Range<usize>,
    zero_copy: bool,
) -> Result<Vec<Claim>, Failure> {
    let shape = [
        config.batch,
        view.positions.len(),
        heads.len(),
        config.head_dim,
    ];
    let dtype = kvcache::candle_dtype(config.dtype);
    let mut claims = Vec::new();
    for (kv, side) in [(Kv::K, &view.k), (Kv::V, &view.v)] {
        check_shapes(kv, side, shape, dtype)?;
        claims.extend(check_storage(kv, side, config, heads.start, zero_copy)?);
    }
    Ok(claims)
}

fn check_shapes(
    kv: Kv,
    side: &Segments,
    shape: [usize; 4],
    dtype: candle_core::DType,
) -> Result<(), Failure> {
    let total: usize = side.parts.iter().map(|p| p.len()).sum();
    let bad = side.shape != shape
        || total != shape[1]
        || side.parts.iter().any(|p| {
            let d = p.rows.dims();
            d.len() != 4
                || d[0] != shape[0]
                || d[2] != shape[2]
                || d[3] != shape[3]
                || p.rows.dtype() != dtype
        });
    if bad {
        let parts: Vec<String> = side
            .parts
            .iter()
            .map(|p| format!("{:?} {:?}", p.rows.dims(), p.rows.dtype()))
            .collect();
        return Err((
            DivergenceKind::Shape,
            format!(
                "{kv:?} segments [{}] declare {:?} and hold {total} rows, expected {shape:?} {dtype:?}",
                parts.join(", "),
                side.shape
            ),
        ));
    }
    Ok(())
}

/// The address of a tensor's storage, to tell whether two tensors share it.
fn storage_address(tensor: &Tensor) -> usize {
    let (storage, _) = tensor.storage_and_layout();
    &*storage as *const candle_core::Storage as usize
}

/// Every aliasing segment must be a token-axis `narrow` of one `[B, C, H,
/// D]` buffer shared by all of them: its rows start at the claimed slot's
/// offset with the buffer's row stride.
fn check_storage(
    kv: Kv,
    side: &Segments,
    config: &Config,
    head_start: usize,
    zero_copy: bool,
) -> Result<Vec<Claim>, Failure> {
    let row = config.heads * config.head_dim;
    let mut claims = Vec::new();
    let mut storage = None;
    let mut at = 0;
    for (i, part) in side.parts.iter().enumerate() {
        let len = part.len();
        let fail = |why: String| {
            Err((
                DivergenceKind::Aliasing,
                format!("{kv:?} segment {i} (rows {at}..{}): {why}", at + len),
            ))
        };
        match part.slot {
            None if zero_copy && len > 0 => {
                return fail("a copy where the ring layout allows a zero-copy view".into())
            }
            None => {}
            Some(slot) => {
                let layout = part.rows.layout();
                let expected = slot * row + head_start * config.head_dim;
                if layout.start_offset() != expected || (len > 1 && layout.stride()[1] != row) {
                    return fail(format!(
                        "claims slot {slot} but starts at element {} with token stride {:?}, a narrow of slot {slot} starts at {expected} with stride {row}",
                        layout.start_offset(),
                        layout.stride().get(1)
                    ));
                }
                let address = storage_address(&part.rows);
                if *storage.get_or_insert(address) != address {
                    return fail("claims to alias the buffer but has storage of its own".into());
                }
                claims.push(Claim {
                    kv,
                    row: at,
                    len,
                    slot,
                });
            }
        }
        at += len;
    }
    Ok(claims)
}

/// Each claim against the cache's layout: slot `slot + i` must hold the
/// position of view row `row + i`.
pub(crate) fn check_claims(
    claims: &[Claim],
    positions: &[u64],
    layout: &Layout,
) -> Result<(), Failure> {
    for claim in claims {
        for i in 0..claim.len {
            let (slot, position) = (claim.slot + i, positions[claim.row + i]);
            let holds = layout.slots.get(slot).copied().unwrap_or(Slot::Free);
            if holds != Slot::Hot(position) {
                return Err((
                    DivergenceKind::Aliasing,
                    format!(
                        "{:?} view row {} (position {position}) aliases slot {slot}, which the layout says holds {holds:?}",
                        claim.kv,
                        claim.row + i
                    ),
                ));
            }
        }
    }
    Ok(())
}
