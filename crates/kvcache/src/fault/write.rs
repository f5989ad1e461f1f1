//! How a [`FaultyCache`] writes: the correct write with the fault's change
//! to what is stored, and its bookkeeping afterwards.

use candle_core::Tensor;
use kvmodel::{CacheError, ErrorKind, Quant, Write};

use super::{rows, CacheFault};
use crate::{Error, Result};

#[allow(unused_imports)]
use super::cache::*;

impl FaultyCache {
    /// The write as the faulty implementation performs it.
    pub(super) fn faulty_write(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<Owned> {
        if !self.active() {
            return self.write_owned(request, k, v);
        }
        let g = self.cache().global_end();
        let c = self.cache().config().clone();
        let (start, len) = (request.start, request.len);
        let valid = start >= 0 && len >= 0;
        match self.fault {
            CacheFault::GapWriteAccepted | CacheFault::ZeroLengthAdvances
                if valid
                    && start as u64 > g
                    && start as u64 - g <= MAX_GAP
                    && (len == 0) == (self.fault == CacheFault::ZeroLengthAdvances)
                    && request.recent_window.is_none_or(|r| r >= 0) =>
            {
                let gap = start as u64 - g;
                let zeros = self.zeros(gap, k.device())?;
                self.write_owned(&Write::new(g as i64, gap as i64), &zeros, &zeros)?;
                self.write_owned(request, k, v)
            }
            CacheFault::ProbeMakesRoom
                if valid
                    && len == 0
                    && start as u64 == g
                    && self.resident().len() >= self.storage().capacity() =>
            {
                // Room for max(n, 1) rows; nothing evictable leaves it full.
                let _ = self.cache_mut().evict(1);
                self.write_owned(request, k, v)
            }
            CacheFault::MutateThenRaise => match request.recent_window {
                Some(r) if r < 0 && valid => {
                    let landed = Write {
                        recent_window: None,
                        ..*request
                    };
                    let _ = self.write_owned(&landed, k, v);
                    Err(Error::Contract(CacheError::NegativeWindow {
                        recent_window: r,
                    }))
                }
                _ => self.write_owned(request, k, v),
            },
            CacheFault::HeadStartIgnored => match request.heads {
                Some([first, count]) if first > 0 && count >= 1 && count as usize <= c.heads => {
                    let from_zero = Write {
                        heads: Some([0, count]),
                        ..*request
                    };
                    self.write_owned(&from_zero, k, v)
                }
                _ => self.write_owned(request, k, v),
            },
            CacheFault::EvictedRewriteOnSink => match self.write_owned(request, k, v) {
                Err(e) if e.kind() == Some(ErrorKind::Evicted) && c.sink > 0 && len > 0 => {
                    let m = (len as usize).min(c.sink);
                    let onto_sink = Write {
                        start: 0,
                        len: m as i64,
                        heads: request.heads,
                        recent_window: None,
                    };
                    self.write_owned(&onto_sink, &k.narrow(1, 0, m)?, &v.narrow(1, 0, m)?)
                }
                other => other,
            },
            CacheFault::ChunkOverProtected => match self.write_owned(request, k, v) {
                Err(e) if e.kind() == Some(ErrorKind::ChunkTooLarge) => self.view_owned(),
                other => other,
            },
            CacheFault::RefusalRolls => match self.write_owned(request, k, v) {
                Err(e)
                    if matches!(
                        e.kind(),
                        Some(
                            ErrorKind::Evicted
                                | ErrorKind::ChunkTooLarge
                                | ErrorKind::WindowTooSmall
                        )
                    ) =>
                {
                    if self.cache_mut().evict(len.max(1)).is_err() {
                        let _ = self.cache_mut().evict(1);
                    }
                    Err(e)
                }
                other => other,
            },
            CacheFault::SlotIgnoresSink
                if valid
                    && c.sink > 0
                    && len > 0
                    && start as u64 >= c.sink as u64
                    && (start + len) as u64 <= g
                    && (self.resident().len() as u64) < g =>
            {
                let early = Write {
                    start: start - c.sink as i64,
                    ..*request
                };
                match self.write_owned(&early, k, v) {
                    Ok(view) => Ok(view),
                    Err(_) => self.write_owned(request, k, v),
                }
            }
            CacheFault::PackedReturnsEveryHead if request.heads.is_some() => {
                let written = self.write_owned(request, k, v)?;
                let all = self.view_owned()?;
                let which: Option<Vec<usize>> = written
                    .positions
                    .iter()
                    .map(|p| all.positions.iter().position(|q| q == p))
                    .collect();
                match which {
                    Some(which) => all.select(&which).map(|o| Owned {
                        global_end: written.global_end,
                        ..o
                    }),
                    None => Ok(written),
                }
            }
            CacheFault::StaleViewAfterRewrite
                if valid && len > 0 && (start as u64) < g && request.heads.is_none() =>
            {
                let before = self.view_owned()?;
                let after = self.write_owned(request, k, v)?;
                let end = (start + len) as u64;
                let stale: Vec<(usize, usize)> = after
                    .positions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| (start as u64..end).contains(p))
                    .filter_map(|(i, p)| Some((i, before.positions.iter().position(|q| q == p)?)))
                    .collect();
                let which: Vec<usize> = stale.iter().map(|s| s.0).collect();
                let old_k = before.k.clone();
                let old_v = before.v.clone();
                let source = |i: usize| stale.iter().find(|s| s.0 == i).map(|s| s.1);
                Ok(Owned {
                    k: rows::replace(&after.k, &which, |i, row| match source(i) {
                        Some(j) => Ok(old_k.narrow(1, j, 1)?),
                        None => Ok(row.clone()),
                    })?,
                    v: rows::replace(&after.v, &which, |i, row| match source(i) {
                        Some(j) => Ok(old_v.narrow(1, j, 1)?),
                        None => Ok(row.clone()),
                    })?,
                    ..after
                })
            }
            _ => self.write_owned(request, k, v),
        }
    }

    /// Bookkeeping after a successful write: chunks of the packed cache and
    /// what a roll did to the pin.
    pub(super) fn after_write(&mut self, request: &Write, g_before: u64, rolled: bool) {
        let len = request.len.max(0) as u64;
        if let Inner::Packed(_) = self.inner {
            if len > 0 && request.start.max(0) as u64 == g_before {
                let start = g_before;
                self.chunks.push(start..start + len);
                self.freeze_extra();
            }
        }
        if self.fault == CacheFault::PinLostOnMisalignedRoll && rolled && len > 0 {
            if let Some(pin) = self.pin_range() {
                let sink = self.cache().config().sink as u64;
                if pin.start.saturating_sub(sink) % len != 0 {
                    self.lost_pin = Some(pin);
                }
            }
        }
    }

    /// The chunks the faulty coldness rule freezes after an append.
    pub(super) fn freeze_extra(&mut self) {
        let policy = self.cache().config().packed_policy();
        let sink = self.cache().config().sink as u64;
        if policy.quant == Quant::None {
            return;
        }
        let completed = &self.chunks[..self.chunks.len().saturating_sub(1)];
        let n = completed.len();
        let keep = policy.keep_recent_chunks;
        let mut frozen = Vec::new();
        for (i, chunk) in completed.iter().enumerate() {
            let rank = n - 1 - i;
            let cold = match self.fault {
                CacheFault::KeepRecentCountsCurrent => {
                    rank + 1 >= keep && (chunk.start >= sink || policy.pack_sink)
                }
                CacheFault::SinkChunkPacked => rank >= keep,
                _ => false,
            };
            if cold && !self.extra_cold.contains(chunk) {
                frozen.push(chunk.clone());
            }
        }
        self.extra_cold.extend(frozen);
    }
}
