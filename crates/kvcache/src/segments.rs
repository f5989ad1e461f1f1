//! Segmented views: the visible window as a short list of zero-copy pieces
//! of the cache's buffers, so a consumer that can attend over pieces (see
//! [`crate::attention`]) never pays for a contiguous copy, and one that
//! cannot copies once into a buffer it owns ([`Segments::to_contiguous_into`]).
//!
//! ```
//! use candle_core::{DType, Device, Tensor};
//! use kvcache::attention::{attention, attention_contiguous};
//! use kvcache::{KvCache, RingCache};
//! use kvmodel::{Config, Write};
//!
//! let mut config = Config::dense(8);
//! config.sink = 2;
//! let device = Device::Cpu;
//! let mut cache = RingCache::new(&config, &device)?;
//! for i in 0..4 {
//!     let chunk = Tensor::full(i as f32, (1, 3, 1, 1), &device)?;
//!     cache.write(&Write::new(3 * i, 3), &chunk, &chunk)?;
//! }
//! // The sink [0, 2), then the ring's tail [6, 12), which wraps.
//! let view = cache.view_segments()?;
//! assert_eq!(view.positions, [0, 1, 6, 7, 8, 9, 10, 11]);
//! assert!(view.k.parts.len() > 1 && view.k.zero_copy());
//!
//! // Attend over the segments without a copy...
//! let q = Tensor::ones((1, 1, 1, 1), DType::F32, &device)?;
//! let segmented = attention(&q, &view.k, &view.v, 1.0)?;
//! // ...or copy once into buffers the consumer owns.
//! let mut k = Tensor::zeros(view.k.shape.to_vec(), DType::F32, &device)?;
//! let mut v = Tensor::zeros(view.v.shape.to_vec(), DType::F32, &device)?;
//! view.k.to_contiguous_into(&mut k)?;
//! view.v.to_contiguous_into(&mut v)?;
//! let contiguous = attention_contiguous(&q, &k, &v, 1.0)?;
//! let gap = (segmented - contiguous)?.abs()?.max_all()?.to_scalar::<f32>()?;
//! assert!(gap < 1e-5);
//! # Ok::<(), kvcache::Error>(())
//! ```

use std::marker::PhantomData;

use candle_core::Tensor;

use crate::{Error, Result, View};

/// One piece of a view: `[B, len, heads, D]` rows of consecutive visible
/// positions.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The rows, `[B, len, heads, D]`.
    pub rows: Tensor,
    /// The first buffer slot these rows alias, when the segment is a
    /// zero-copy `narrow` of the cache's buffers (slot `slot + i` holds row
    /// `i`); `None` when it is a copy.
    pub slot: Option<usize>,
}

impl Segment {
    /// Rows in the segment.
    pub fn len(&self) -> usize {
        self.rows.dims().get(1).copied().unwrap_or(0)
    }

    /// Whether the segment holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The K or V side of a [`SegmentedView`]: segments in ascending position
/// order; their concatenation along the token axis is the view.
#[derive(Clone, Debug)]
pub struct Segments {
    /// The shape of the concatenation, `[B, len, heads, D]`.
    pub shape: [usize; 4],
    /// The pieces, positions ascending across them.
    pub parts: Vec<Segment>,
}

impl Segments {
    /// One segment holding the whole view (a copy, or a view of unknown
    /// provenance). `shape` is the tensor's (missing dimensions read 0,
    /// so a tensor of another rank never matches a view's shape).
    pub fn single(rows: Tensor) -> Segments {
        let dims = rows.dims();
        let at = |i: usize| dims.get(i).copied().unwrap_or(0);
        Segments {
            shape: [at(0), at(1), at(2), at(3)],
            parts: vec![Segment { rows, slot: None }],
        }
    }

    /// Writes the concatenation of the segments into `dst`, which must be a
    /// contiguous `[B, len, heads, D]` tensor of the segments' dtype on
    /// their device ([`Error::Destination`] otherwise, `dst` untouched).
    /// Allocates nothing when each segment's rows of one batch row are
    /// contiguous (every segment of a view of all heads); a head-range
    /// segment is copied once to make it so.
    pub fn to_contiguous_into(&self, dst: &mut Tensor) -> Result<()> {
        let Some(first) = self.parts.first() else {
            return Err(Error::Destination {
                reason: "a view without segments has no dtype or device to match".to_string(),
            });
        };
        let (dtype, device) = (first.rows.dtype(), first.rows.device());
        if dst.dims() != self.shape
            || dst.dtype() != dtype
            || !dst.device().same_device(device)
            || !dst.is_contiguous()
        {
            return Err(Error::Destination {
                reason: format!(
                    "the view needs a contiguous {:?} {dtype:?} tensor on {:?}, got {:?} {:?} on {:?}{}",
                    self.shape,
                    device.location(),
                    dst.dims(),
                    dst.dtype(),
                    dst.device().location(),
                    if dst.is_contiguous() { "" } else { " (not contiguous)" }
                ),
            });
        }
        let mut offset = 0;
        for part in &self.parts {
            set_rows(dst, offset, &part.rows)?;
            offset += part.len();
        }
        Ok(())
    }

    /// The concatenation as one new tensor: a zero-copy handle when there
    /// is one segment, otherwise one `cat`.
    pub fn to_contiguous(&self) -> Result<Tensor> {
        Ok(match self.parts.as_slice() {
            [only] => only.rows.clone(),
            many => {
                let rows: Vec<&Tensor> = many.iter().map(|p| &p.rows).collect();
                Tensor::cat(&rows, 1)?
            }
        })
    }

    /// Whether every segment aliases the cache's buffers.
    pub fn zero_copy(&self) -> bool {
        self.parts.iter().all(|p| p.slot.is_some())
    }
}

/// The visible window as segments (see the module docs). Like [`View`] it
/// borrows the cache: the segments alias its buffers and are valid until
/// the next call that mutates it.
#[derive(Clone, Debug)]
pub struct SegmentedView<'cache> {
    /// The global end after the operation.
    pub global_end: u64,
    /// Visible global positions, ascending.
    pub positions: Vec<u64>,
    /// Keys.
    pub k: Segments,
    /// Values.
    pub v: Segments,
    _cache: PhantomData<&'cache ()>,
}

impl<'cache> SegmentedView<'cache> {
    /// Assembles a view from its K and V segments.
    pub fn new(global_end: u64, positions: Vec<u64>, k: Segments, v: Segments) -> Self {
        SegmentedView {
            global_end,
            positions,
            k,
            v,
            _cache: PhantomData,
        }
    }

    /// One contiguous [`View`] (one `cat` per tensor when there are several
    /// segments; zero-copy when there is one).
    pub fn into_view(self) -> Result<View<'cache>> {
        let zero_copy = self.k.parts.len() <= 1 && self.k.zero_copy();
        Ok(View::new(
            self.global_end,
            self.positions,
            self.k.to_contiguous()?,
            self.v.to_contiguous()?,
            zero_copy,
        ))
    }
}

impl<'cache> From<View<'cache>> for SegmentedView<'cache> {
    /// A contiguous view as one segment each for K and V.
    fn from(view: View<'cache>) -> SegmentedView<'cache> {
        SegmentedView::new(
            view.global_end,
            view.positions,
            Segments::single(view.k),
            Segments::single(view.v),
        )
    }
}

/// The segmented view of a `[B, C, H, D]` buffer pair: one zero-copy
/// `narrow` per `(slot, len)` run, in the order given (ascending
/// positions), restricted to `heads`. No run gives one empty segment.
pub(crate) fn buffer_view<'cache>(
    buffers: [&Tensor; 2],
    runs: &[(usize, usize)],
    heads: std::ops::Range<usize>,
    global_end: u64,
    positions: Vec<u64>,
) -> Result<SegmentedView<'cache>> {
    let mut sides = Vec::with_capacity(2);
    for buffer in buffers {
        let (batch, _, all_heads, head_dim) = buffer.dims4()?;
        let buffer = if heads.len() == all_heads {
            buffer.clone()
        } else {
            buffer.narrow(2, heads.start, heads.len())?
        };
        let mut parts = Vec::with_capacity(runs.len().max(1));
        for &(slot, len) in runs {
            parts.push(Segment {
                rows: buffer.narrow(1, slot, len)?,
                slot: Some(slot),
            });
        }
        if parts.is_empty() {
            parts.push(Segment {
                rows: buffer.narrow(1, 0, 0)?,
                slot: Some(0),
            });
        }
        sides.push(Segments {
            shape: [batch, positions.len(), heads.len(), head_dim],
            parts,
        });
    }
    let v = sides.pop().expect("two sides");
    let k = sides.pop().expect("two sides");
    Ok(SegmentedView::new(global_end, positions, k, v))
}

/// Copies `rows` (`[B, n, heads, D]`) into rows `[offset, offset + n)` of
/// the contiguous `dst` (`[B, len, heads, D]`) with `slice_set`, one call
/// per batch row when `B > 1` (a batch row of a token-axis `narrow` is
/// contiguous). A source whose batch row is not contiguous (a head range)
/// is copied first. `rows` must not share storage with `dst`.
pub(crate) fn set_rows(dst: &Tensor, offset: usize, rows: &Tensor) -> Result<()> {
    let batch = rows.dims().first().copied().unwrap_or(0);
    if rows.dims().get(1).copied().unwrap_or(0) == 0 {
        return Ok(());
    }
    if batch == 1 || rows.is_contiguous() {
        dst.slice_set(&rows.contiguous()?, 1, offset)?;
        return Ok(());
    }
    for b in 0..batch {
        let row = rows.narrow(0, b, 1)?.contiguous()?;
        dst.narrow(0, b, 1)?.slice_set(&row, 1, offset)?;
    }
    Ok(())
}
