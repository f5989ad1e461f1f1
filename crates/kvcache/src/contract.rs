//! The dense contract of docs/contract.md §2–§5 planned on position sets, shared by
//! every cache whose storage is one `[B, C, H, D]` buffer pair
//! ([`DenseCache`](crate::DenseCache), [`RingCache`](crate::RingCache)).
//!
//! A cache keeps its own position → slot map; this module sees only the
//! resident positions (ascending, disjoint ranges) and the scalar state
//! (`G`, `C`, `W`, the pin). Every check of docs/contract.md §3 runs here, in its
//! order, before the cache moves a byte, so a refusal leaves the cache
//! exactly as it was, and the caches cannot disagree on a rule.

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use kvmodel::{format_ranges, non_negative, CacheError, Config, Write};

use crate::ranges::{count, first_missing, intersect, normalize, remove_all, subtract};
use crate::{check_payload, Error, Result};

/// The scalar state of a dense cache: everything but its storage.
#[derive(Clone, Debug)]
pub(crate) struct Residency {
    /// The configuration the cache was built with.
    pub config: Config,
    /// `C`: the slots of each buffer.
    pub capacity: usize,
    /// `W`: follows `C` under growth only while it was equal to it.
    pub window: usize,
    /// `G`.
    pub global_end: u64,
    /// The pinned positions, if any (docs/contract.md §5).
    pub pin: Option<Range<u64>>,
}

/// The plan of a write that passed every check of docs/contract.md §3.
#[derive(Clone, Debug)]
pub(crate) struct WritePlan {
    /// First position written.
    pub start: u64,
    /// One past the last position written.
    pub end: u64,
    /// Heads written (all heads when the write has no range).
    pub heads: Range<usize>,
    /// The capacity and window to grow to, if any.
    pub grow_to: Option<(usize, usize)>,
    /// Positions to evict, ascending.
    pub victims: Vec<Range<u64>>,
    /// Positions the write adds (`[max(s, G), s + n)`, possibly empty).
    pub fresh: Range<u64>,
    /// Visible positions after the write, ascending.
    pub visible: Vec<Range<u64>>,
}

impl WritePlan {
    /// Rows written.
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
}

impl Residency {
    /// The state of a new, empty cache. Refuses a configuration that breaks
    /// docs/contract.md §1, is not of the dense variant, or trims after the
    /// read (§3, trim modes: these caches implement the default mode only,
    /// and would otherwise run it silently), naming the field.
    pub fn new(config: &Config, cache: &str) -> Result<Residency> {
        config.validate()?;
        if config.variant != kvmodel::Variant::Dense {
            return Err(CacheError::InvalidConfig {
                field: "variant",
                reason: format!("must be \"dense\" for {cache}"),
            }
            .into());
        }
        if config.trim != kvmodel::Trim::BeforeRead {
            return Err(CacheError::InvalidConfig {
                field: "trim",
                reason: format!(
                    "\"{}\" is not implemented by {cache}, which trims before the read",
                    config.trim.name()
                ),
            }
            .into());
        }
        Ok(Residency {
            config: config.clone(),
            capacity: config.capacity,
            window: config.effective_window(),
            global_end: 0,
            pin: None,
        })
    }

    /// The candle dtype of the configuration.
    pub fn dtype(&self) -> DType {
        crate::candle_dtype(self.config.dtype)
    }

    /// Zeroed `[B, capacity, H, D]` K and V buffers on `device`.
    pub fn zeroed_buffers(&self, capacity: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let c = &self.config;
        let shape = (c.batch, capacity, c.heads, c.head_dim);
        Ok((
            Tensor::zeros(shape, self.dtype(), device)?,
            Tensor::zeros(shape, self.dtype(), device)?,
        ))
    }

    /// docs/contract.md §2: the protected ranges (not yet intersected with `R`),
    /// ascending and disjoint.
    pub fn protected_ranges(&self) -> Vec<Range<u64>> {
        match &self.pin {
            None => std::iter::once(0..self.config.sink as u64).collect(),
            Some(pin) => normalize(vec![0..self.config.global_sink as u64, pin.clone()]),
        }
    }

    /// The `k` smallest evictable positions of `resident` outside `exclude`,
    /// as ascending ranges, or `Err(available)` when there are fewer.
    pub fn victims(
        &self,
        resident: &[Range<u64>],
        k: u64,
        exclude: Range<u64>,
    ) -> std::result::Result<Vec<Range<u64>>, u64> {
        let mut holes = self.protected_ranges();
        holes.push(exclude);
        let holes = normalize(holes);
        let mut victims = Vec::new();
        let mut taken = 0u64;
        for positions in resident {
            if taken == k {
                break;
            }
            for piece in subtract(positions.clone(), &holes) {
                let take = (piece.end - piece.start).min(k - taken);
                if take == 0 {
                    break;
                }
                victims.push(piece.start..piece.start + take);
                taken += take;
            }
        }
        if taken < k {
            return Err(taken);
        }
        Ok(victims)
    }

    /// docs/contract.md §4 on `resident` and the current pin: the visible positions
    /// as ascending ranges. `recent` is `(s, r)`.
    pub fn visible(
        &self,
        resident: &[Range<u64>],
        window: usize,
        recent: Option<(u64, u64)>,
    ) -> Vec<Range<u64>> {
        let holes = self.protected_ranges();
        let mut protected = Vec::new();
        let mut others = Vec::new();
        for positions in resident {
            protected.extend(intersect(positions.clone(), &holes));
            others.extend(subtract(positions.clone(), &holes));
        }
        let shown: Vec<Range<u64>> = match recent {
            None => {
                let mut keep = (window as u64).saturating_sub(count(&protected));
                let mut shown = Vec::new();
                for piece in others.iter().rev() {
                    if keep == 0 {
                        break;
                    }
                    let take = (piece.end - piece.start).min(keep);
                    shown.push(piece.end - take..piece.end);
                    keep -= take;
                }
                shown
            }
            Some((s, r)) => {
                let from = s.saturating_sub(r);
                others
                    .iter()
                    .filter(|p| p.end > from)
                    .map(|p| p.start.max(from)..p.end)
                    .collect()
            }
        };
        protected.extend(shown);
        normalize(protected)
    }

    /// The view of the current state without a recent window (docs/contract.md §4).
    pub fn current_view(&self, resident: &[Range<u64>]) -> Vec<Range<u64>> {
        self.visible(resident, self.window, None)
    }

    /// docs/contract.md §3 write checks 1–8 on `resident`; nothing is changed.
    pub fn plan_write(
        &self,
        resident: &[Range<u64>],
        request: &Write,
    ) -> std::result::Result<WritePlan, CacheError> {
        // 1–3. Arguments (shared with the model: they read no state).
        let checked = request.check_arguments(self.config.heads)?;
        let (s, n, recent, heads) = (
            checked.start,
            checked.len,
            checked.recent_window,
            checked.heads,
        );
        // 4. does not apply to the dense variant.
        let end = s + n;
        // 5. A gap would leave unwritten positions visible.
        if s > self.global_end {
            return Err(CacheError::NonSequential {
                start: s,
                global_end: self.global_end,
            });
        }
        // 6. Rewritten positions must still be resident.
        if let Some(position) = first_missing(resident, s..end.min(self.global_end)) {
            return Err(CacheError::Evicted {
                start: s,
                end,
                position,
                resident: format_ranges(resident.iter().flat_map(|r| r.clone())),
            });
        }
        // 7. Make room: grow, or evict the oldest evictable positions outside the write.
        let new_from = s.max(self.global_end);
        let fresh = new_from..end.max(new_from);
        let total = count(resident) + (fresh.end - fresh.start);
        let mut grow_to = None;
        let mut window = self.window;
        let mut victims = Vec::new();
        if total > self.capacity as u64 {
            let protected_outside = {
                let holes = normalize(self.protected_ranges());
                let protected: Vec<Range<u64>> = resident
                    .iter()
                    .flat_map(|r| intersect(r.clone(), &holes).collect::<Vec<_>>())
                    .collect();
                count(&remove_all(&protected, std::slice::from_ref(&(s..end)))) as usize
            };
            let too_large = |capacity: usize| {
                CacheError::chunk_too_large(s, end, total, capacity, protected_outside)
            };
            if self.config.growth {
                let max = self.config.max_capacity();
                if total > max as u64 {
                    return Err(too_large(max));
                }
                let grown = (total as usize)
                    .max(self.capacity.saturating_mul(2))
                    .min(max);
                if window == self.capacity {
                    window = grown;
                }
                grow_to = Some((grown, window));
            } else {
                victims = self
                    .victims(resident, total - self.capacity as u64, s..end)
                    .map_err(|_| too_large(self.capacity))?;
            }
        }
        // 8. The chunk must see itself: compute the view on the new state.
        let mut next = remove_all(resident, &victims);
        next.push(fresh.clone());
        let next = normalize(next);
        let visible = self.visible(&next, window, recent.map(|r| (s, r)));
        let mut covered = s;
        for piece in intersect(s..end, &visible) {
            if piece.start != covered {
                break;
            }
            covered = piece.end;
        }
        if covered < end {
            let holes = self.protected_ranges();
            let protected: Vec<Range<u64>> = next
                .iter()
                .flat_map(|r| intersect(r.clone(), &holes).collect::<Vec<_>>())
                .collect();
            return Err(CacheError::WindowTooSmall {
                start: s,
                end,
                position: covered,
                window,
                protected: count(&protected) as usize,
            });
        }
        Ok(WritePlan {
            start: s,
            end,
            heads,
            grow_to,
            victims,
            fresh,
            visible,
        })
    }

    /// docs/contract.md §3 `rewind` checks; the position to truncate at.
    pub fn check_rewind(&self, to: i64) -> std::result::Result<u64, CacheError> {
        let to = non_negative("to", to)?;
        if to > self.global_end {
            return Err(CacheError::RewindAhead {
                to,
                global_end: self.global_end,
            });
        }
        Ok(to)
    }

    /// Commits a rewind the cache has applied to its slot map: `G := to`,
    /// and the pin is cleared when part of it is dropped.
    pub fn commit_rewind(&mut self, to: u64) {
        self.global_end = to;
        if self.pin.as_ref().is_some_and(|pin| pin.end > to) {
            self.pin = None;
        }
    }

    /// docs/contract.md §3 `evict` checks; the positions to drop, ascending.
    pub fn plan_evict(
        &self,
        resident: &[Range<u64>],
        tokens: i64,
    ) -> std::result::Result<Vec<Range<u64>>, CacheError> {
        let k = non_negative("tokens", tokens)?;
        self.victims(resident, k, 0..0)
            .map_err(|evictable| CacheError::EvictTooMany {
                tokens: k,
                evictable: evictable as usize,
            })
    }

    /// docs/contract.md §3 `pin`, checks and commit (a pin moves no data).
    pub fn pin(
        &mut self,
        resident: &[Range<u64>],
        tokens: i64,
    ) -> std::result::Result<u64, CacheError> {
        let n = non_negative("tokens", tokens)?;
        if n == 0 {
            self.pin = None;
            return Ok(self.global_end);
        }
        let sink = self.config.sink as u64;
        if sink == 0 {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: "needs a sink, but sink is 0".to_string(),
            });
        }
        if n > self.global_end {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: format!("exceeds the global end {}", self.global_end),
            });
        }
        let from = self.global_end - n;
        let pin = from..from + sink.min(n);
        if let Some(p) = first_missing(resident, pin.clone()) {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: format!(
                    "would pin [{}, {}) but position {p} is not resident",
                    pin.start, pin.end
                ),
            });
        }
        self.pin = Some(pin);
        Ok(self.global_end)
    }

    /// docs/contract.md §3 `reset` of the scalar state (capacity and window stay).
    pub fn reset(&mut self) {
        self.global_end = 0;
        self.pin = None;
    }

    /// `2 · B · C · H · D · size_of(dtype)`: the allocated buffers.
    pub fn resident_bytes(&self) -> u64 {
        let c = &self.config;
        2 * (c.batch * c.heads * c.head_dim) as u64
            * self.capacity as u64
            * c.dtype.size_bytes() as u64
    }

    /// Checks a planned write's K and V payloads (shape, dtype, device)
    /// after every contract check, before anything moves; returns them
    /// contiguous (a clone of the handle when they already are).
    pub fn check_payloads(
        &self,
        plan: &WritePlan,
        dtype: DType,
        device: &Device,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let c = &self.config;
        let expected = [c.batch, plan.len(), plan.heads.len(), c.head_dim];
        check_payload("k", k, expected, dtype)?;
        check_payload("v", v, expected, dtype)?;
        for payload in [k, v] {
            if !payload.device().same_device(device) {
                return Err(Error::Backend(candle_core::Error::DeviceMismatchBinaryOp {
                    lhs: device.location(),
                    rhs: payload.device().location(),
                    op: "kvcache write",
                }));
            }
        }
        Ok((k.contiguous()?, v.contiguous()?))
    }
}
