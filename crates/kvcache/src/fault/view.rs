//! How a [`FaultyCache`] shows a view: owned copies of the correct view
//! and the fault's change to them.

use std::collections::BTreeSet;

use candle_core::Tensor;
use kvmodel::Quant;

use super::{rows, CacheFault};
use crate::{DenseCache, PackedCache, Result, RingCache, View};

#[allow(unused_imports)]
use super::cache::*;

pub(super) enum Inner {
    Dense(DenseCache),
    Packed(PackedCache),
    Ring(RingCache),
}

/// A view the wrapper owns (copied out of the inner cache's storage).
pub(super) struct Owned {
    pub(super) global_end: u64,
    pub(super) positions: Vec<u64>,
    pub(super) k: Tensor,
    pub(super) v: Tensor,
}

impl Owned {
    pub(super) fn of(view: View<'_>) -> Result<Owned> {
        Ok(Owned {
            global_end: view.global_end,
            positions: view.positions,
            k: view.k.copy()?,
            v: view.v.copy()?,
        })
    }

    /// The rows at `which`, in that order (indices may repeat).
    pub(super) fn select(self, which: &[usize]) -> Result<Owned> {
        Ok(Owned {
            global_end: self.global_end,
            positions: which.iter().map(|&i| self.positions[i]).collect(),
            k: rows::select(&self.k, which)?,
            v: rows::select(&self.v, which)?,
        })
    }

    /// Only the rows whose position passes `keep`.
    pub(super) fn filter(self, keep: impl Fn(u64) -> bool) -> Result<Owned> {
        let which: Vec<usize> = (0..self.positions.len())
            .filter(|&i| keep(self.positions[i]))
            .collect();
        if which.len() == self.positions.len() {
            return Ok(self);
        }
        self.select(&which)
    }

    /// Rows at `which` replaced by `f(i, row)`, K and V alike.
    pub(super) fn map(
        self,
        which: &[usize],
        f: impl Fn(usize, &Tensor) -> Result<Tensor>,
    ) -> Result<Owned> {
        if which.is_empty() {
            return Ok(self);
        }
        Ok(Owned {
            k: rows::replace(&self.k, which, &f)?,
            v: rows::replace(&self.v, which, &f)?,
            ..self
        })
    }

    pub(super) fn into_view<'a>(self) -> View<'a> {
        View::new(self.global_end, self.positions, self.k, self.v, false)
    }
}

impl FaultyCache {
    /// The view as the faulty implementation returns it.
    pub(super) fn disguise(&self, view: Owned, recent_window: bool) -> Result<Owned> {
        if !self.active() {
            return Ok(view);
        }
        let c = self.cache().config();
        let sink = c.sink as u64;
        match self.fault {
            CacheFault::WindowDropsSink
                if !recent_window && self.window() < self.storage().capacity() =>
            {
                view.filter(|p| p >= sink)
            }
            CacheFault::WindowDoubleCountsSink if !recent_window && sink > 0 => {
                self.window_budget(view, self.window(), c.sink)
            }
            CacheFault::GrowthKeepsWindow
                if !recent_window && self.storage().capacity() > self.initial.1 =>
            {
                self.window_budget(view, self.initial.0, 0)
            }
            CacheFault::PinDuplicatedInView => match self.pin_range() {
                Some(pin) => {
                    let mut which = Vec::new();
                    for (i, p) in view.positions.iter().enumerate() {
                        which.push(i);
                        if pin.contains(p) {
                            which.push(i);
                        }
                    }
                    view.select(&which)
                }
                None => Ok(view),
            },
            CacheFault::PinLostOnMisalignedRoll => match &self.lost_pin {
                Some(lost) if self.pin_range().as_ref() == Some(lost) => {
                    view.filter(|p| !lost.contains(&p))
                }
                _ => Ok(view),
            },
            CacheFault::EvictRemovesSink if self.sink_dropped => view.filter(|p| p != 0),
            CacheFault::KeepRecentCountsCurrent | CacheFault::SinkChunkPacked => {
                let cold = self.cold();
                let which: Vec<usize> = (0..view.positions.len())
                    .filter(|&i| {
                        let p = view.positions[i];
                        !cold.contains(&p) && self.extra_cold.iter().any(|r| r.contains(&p))
                    })
                    .collect();
                let quant = self.quant();
                view.map(&which, |_, row| rows::quantized(row, quant))
            }
            CacheFault::Int4NibblesSwapped if self.quant() == Quant::Int4 => {
                let which = self.cold_rows(&view);
                view.map(&which, |_, row| rows::nibbles_swapped(row))
            }
            CacheFault::ScaleReciprocal if self.quant() != Quant::None => {
                let which = self.cold_rows(&view);
                let quant = self.quant();
                view.map(&which, |_, row| rows::reciprocal_scale(row, quant))
            }
            _ => Ok(view),
        }
    }

    pub(super) fn cold_rows(&self, view: &Owned) -> Vec<usize> {
        let cold = self.cold();
        (0..view.positions.len())
            .filter(|&i| cold.contains(&view.positions[i]))
            .collect()
    }

    /// The view keeping the protected positions and the largest
    /// `window − |protected| − less` others.
    pub(super) fn window_budget(&self, view: Owned, window: usize, less: usize) -> Result<Owned> {
        let protected = view
            .positions
            .iter()
            .filter(|p| self.is_protected(**p))
            .count();
        let budget = window.saturating_sub(protected + less);
        let others: Vec<usize> = (0..view.positions.len())
            .filter(|&i| !self.is_protected(view.positions[i]))
            .collect();
        let drop = others.len().saturating_sub(budget);
        let dropped: BTreeSet<usize> = others.into_iter().take(drop).collect();
        let which: Vec<usize> = (0..view.positions.len())
            .filter(|i| !dropped.contains(i))
            .collect();
        if dropped.is_empty() {
            return Ok(view);
        }
        view.select(&which)
    }

    /// Rows a roll shifted one short: the oldest kept evictable position
    /// shows the row of the next one.
    pub(super) fn roll_one_short(&self, view: Owned) -> Result<Owned> {
        let first = (0..view.positions.len()).find(|&i| !self.is_protected(view.positions[i]));
        match first {
            Some(i) if i + 1 < view.positions.len() => {
                let (k, v) = (view.k.clone(), view.v.clone());
                Ok(Owned {
                    k: rows::replace(&view.k, &[i], |_, _| Ok(k.narrow(1, i + 1, 1)?))?,
                    v: rows::replace(&view.v, &[i], |_, _| Ok(v.narrow(1, i + 1, 1)?))?,
                    ..view
                })
            }
            _ => Ok(view),
        }
    }

    /// The oldest evictable visible row of batch row `b` replaced by that
    /// of batch row `b + 1` (the last wraps to the first).
    pub(super) fn roll_crosses_batch(&self, view: Owned) -> Result<Owned> {
        let first = (0..view.positions.len()).find(|&i| !self.is_protected(view.positions[i]));
        let batch = view.k.dim(0)?;
        let Some(i) = first.filter(|_| batch > 1) else {
            return Ok(view);
        };
        let shifted = |t: &Tensor| -> Result<Tensor> {
            let row = t.narrow(1, i, 1)?.contiguous()?;
            let order: Vec<u32> = (0..batch as u32).map(|b| (b + 1) % batch as u32).collect();
            let order = Tensor::from_vec(order, batch, t.device())?;
            Ok(row.index_select(&order, 0)?)
        };
        let (k, v) = (shifted(&view.k)?, shifted(&view.v)?);
        Ok(Owned {
            k: rows::replace(&view.k, &[i], |_, _| Ok(k.clone()))?,
            v: rows::replace(&view.v, &[i], |_, _| Ok(v.clone()))?,
            ..view
        })
    }

    /// Bytes the extra cold rows no longer hold at full precision.
    pub(super) fn extra_cold_savings(&self) -> u64 {
        if self.extra_cold.is_empty() {
            return 0;
        }
        let c = self.cache().config();
        let hot = (c.head_dim * c.dtype.size_bytes()) as u64;
        let cold = match self.quant() {
            Quant::Int8 => c.head_dim as u64 + 4,
            Quant::Int4 => c.head_dim.div_ceil(2) as u64 + 4,
            Quant::None => hot,
        };
        let cold_now = self.cold();
        let rows = self
            .resident()
            .into_iter()
            .filter(|p| !cold_now.contains(p) && self.extra_cold.iter().any(|r| r.contains(p)))
            .count() as u64;
        rows * (c.batch * c.heads) as u64 * 2 * hot.saturating_sub(cold)
    }
}
