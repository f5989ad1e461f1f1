//! The reference model: docs/contract.md read literally.
//!
//! Every operation works on a clone of the state and commits it only when
//! every check has passed, so "a refused operation changes nothing" holds by
//! construction. Positions live in a `BTreeMap`; there are no slots, no ring
//! arithmetic and no incremental bookkeeping to get wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::config::{Config, Quant, Trim, Variant};
use crate::error::{format_ranges, CacheError};
use crate::op::{non_negative, Op, Write};
use crate::outcome::Effect;

/// One chunk of the packed variant (docs/contract.md §6): the range of one append.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// First position.
    pub start: u64,
    /// Number of positions.
    pub len: u64,
    /// Quantized (or, with `quant = "none"`, moved to cold storage) for good.
    pub cold: bool,
}

impl Chunk {
    /// The chunk's positions.
    pub fn range(&self) -> Range<u64> {
        self.start..self.start + self.len
    }
}

/// The reference model of one cache (dense or packed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Model {
    config: Config,
    /// `C`: changes only by growth (docs/contract.md §3 write step 7).
    capacity: usize,
    /// `W`: follows `C` under growth only while it was equal to it.
    window: usize,
    /// `G`: one past the highest position ever written (docs/contract.md §2).
    global_end: u64,
    /// `R`: resident positions with the writer of each head (docs/contract.md §2).
    resident: BTreeMap<u64, Vec<Option<u64>>>,
    /// The pinned range, if any (docs/contract.md §5).
    pin: Option<Range<u64>>,
    /// Packed only: every chunk appended since the last reset or rewind
    /// below it, in ascending order (docs/contract.md §6).
    chunks: Vec<Chunk>,
    /// Packed only: index in `chunks` of the current chunk (the latest
    /// append), cleared by rewind and reset.
    current_chunk: Option<usize>,
    /// `after_read` only: the rows the latest op read and then trimmed
    /// (see [`Model::read_writers`]); empty after every other op.
    trimmed: BTreeMap<u64, Vec<Option<u64>>>,
}

impl Model {
    /// A new, empty model. Refuses a configuration that breaks docs/contract.md §1
    /// with `invalid_config` naming the field.
    pub fn new(config: &Config) -> Result<Model, CacheError> {
        config.validate()?;
        Ok(Model {
            config: config.clone(),
            capacity: config.capacity,
            window: config.effective_window(),
            global_end: 0,
            resident: BTreeMap::new(),
            pin: None,
            chunks: Vec::new(),
            current_chunk: None,
            trimmed: BTreeMap::new(),
        })
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Current capacity `C` (grows with `growth`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Current window `W`.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The global end `G`.
    pub fn global_end(&self) -> u64 {
        self.global_end
    }

    /// The pinned range, if any.
    pub fn pin_range(&self) -> Option<Range<u64>> {
        self.pin.clone()
    }

    /// Resident positions in ascending order.
    pub fn resident(&self) -> impl Iterator<Item = u64> + '_ {
        self.resident.keys().copied()
    }

    /// Number of resident positions `|R|`.
    pub fn resident_len(&self) -> usize {
        self.resident.len()
    }

    /// The writer of each head of `position`, or `None` if not resident.
    pub fn writers(&self, position: u64) -> Option<&[Option<u64>]> {
        self.resident.get(&position).map(Vec::as_slice)
    }

    /// Packed only: the chunks since the last reset, ascending.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Packed only: the current chunk (the latest append), if any.
    pub fn current_chunk(&self) -> Option<&Chunk> {
        self.current_chunk.map(|i| &self.chunks[i])
    }

    /// Whether `position` is stored in a cold chunk (packed only; always
    /// false for dense).
    pub fn is_cold(&self, position: u64) -> bool {
        self.chunks
            .iter()
            .rev()
            .find(|c| c.start <= position)
            .is_some_and(|c| c.cold && position < c.start + c.len)
    }

    /// docs/contract.md §2: `[0, S)` without a pin, `[0, GS) ∪ pin` with one. The
    /// intersection with `R` is left to the caller.
    fn is_protected_position(&self, position: u64) -> bool {
        match &self.pin {
            None => position < self.config.sink as u64,
            Some(pin) => position < self.config.global_sink as u64 || pin.contains(&position),
        }
    }

    /// docs/contract.md §2: the protected resident positions, ascending.
    pub fn protected(&self) -> Vec<u64> {
        self.resident()
            .filter(|&p| self.is_protected_position(p))
            .collect()
    }

    /// docs/contract.md §2: the evictable resident positions, ascending (eviction
    /// always takes them from the front).
    pub fn evictable(&self) -> Vec<u64> {
        self.resident()
            .filter(|&p| !self.is_protected_position(p))
            .collect()
    }

    /// docs/contract.md §4: the visible window of the current state. `recent` is
    /// `(s, r)` for a write at `s` with `recent_window = r`.
    pub fn view(&self, recent: Option<(u64, u64)>) -> Vec<u64> {
        let protected: BTreeSet<u64> = self.protected().into_iter().collect();
        let others = self.resident().filter(|p| !protected.contains(p));
        let shown: BTreeSet<u64> = match recent {
            None => {
                let keep = self.window.saturating_sub(protected.len());
                let others: Vec<u64> = others.collect();
                others[others.len().saturating_sub(keep)..]
                    .iter()
                    .copied()
                    .collect()
            }
            Some((s, r)) => others.filter(|&q| q >= s.saturating_sub(r)).collect(),
        };
        protected.union(&shown).copied().collect()
    }

    /// docs/contract.md §6: bytes the cache holds for K and V. Dense: the allocated
    /// `[B, C, H, D]` buffers. Packed: per resident (batch row, position,
    /// head) row, `D · size_of(dtype)` hot, and for cold rows `D + 4`
    /// (int8), `ceil(D / 2) + 4` (int4) or `D · size_of(dtype)` (none).
    pub fn resident_bytes(&self) -> u64 {
        let c = &self.config;
        let hot_row = (c.head_dim * c.dtype.size_bytes()) as u64;
        let rows_per_position = (c.batch * c.heads) as u64;
        match c.variant {
            Variant::Dense => 2 * rows_per_position * self.capacity as u64 * hot_row,
            Variant::Packed => {
                let cold_row = match c.packed_policy().quant {
                    Quant::None => hot_row,
                    Quant::Int8 => c.head_dim as u64 + 4,
                    Quant::Int4 => c.head_dim.div_ceil(2) as u64 + 4,
                };
                self.resident()
                    .map(|p| if self.is_cold(p) { cold_row } else { hot_row })
                    .sum::<u64>()
                    * rows_per_position
                    * 2
            }
        }
    }

    /// Applies `op`, which has index `index` in its trace (the writer id
    /// recorded for a write). On error the model is unchanged.
    pub fn apply(&mut self, index: u64, op: &Op) -> Result<Effect, CacheError> {
        match op {
            Op::Write(w) => self.write(index, w),
            Op::Rewind { to } => self.rewind(*to).map(Effect::moved),
            Op::Evict { tokens } => self.evict(*tokens).map(Effect::moved),
            Op::Pin { tokens } => self.pin(*tokens).map(Effect::moved),
            Op::Reset => Ok(Effect::moved(self.reset())),
        }
    }

    fn packed(&self) -> bool {
        self.config.variant == Variant::Packed
    }

    /// docs/contract.md §3 `write`, checks 1–9 in order.
    pub fn write(&mut self, index: u64, w: &Write) -> Result<Effect, CacheError> {
        // 1–3. Arguments: negative numbers, negative window, head range.
        let checked = w.check_arguments(self.config.heads)?;
        let (s, n, end) = (checked.start, checked.len, checked.end());
        let (recent_window, head_range, heads) = (
            checked.recent_window,
            checked.heads.clone(),
            self.config.heads,
        );
        // 4. Packed: only an append or a rewrite of exactly the current chunk (§6).
        if self.packed() {
            let append = s == self.global_end && n >= 1;
            let rewrite = self.current_chunk().is_some_and(|c| {
                c.start == s && c.len == n && c.range().all(|p| self.resident.contains_key(&p))
            });
            if !append && !rewrite {
                let current = match self.current_chunk() {
                    Some(c) => format!("the current chunk is [{}, {})", c.start, c.start + c.len),
                    None => "there is no current chunk".to_string(),
                };
                return Err(CacheError::Unsupported {
                    op: "write",
                    detail: format!(
                        "[{s}, {end}) is neither an append at the global end {} nor a rewrite of exactly the current chunk ({current})",
                        self.global_end
                    ),
                });
            }
        }
        // 5. A gap would leave unwritten positions visible.
        if s > self.global_end {
            return Err(CacheError::NonSequential {
                start: s,
                global_end: self.global_end,
            });
        }
        // 6. Rewritten positions must still be resident.
        if let Some(position) =
            (s..end.min(self.global_end)).find(|p| !self.resident.contains_key(p))
        {
            return Err(CacheError::Evicted {
                start: s,
                end,
                position,
                resident: format_ranges(self.resident()),
            });
        }
        // Trim after the read: its own order of steps 7–9 (§3, trim modes).
        if self.config.trim == Trim::AfterRead {
            return self.write_after_read(index, &checked);
        }
        // 7. Make room: grow, or evict the oldest evictable positions outside the write.
        let mut next = self.clone();
        let new_from = s.max(self.global_end);
        let total = self.resident.len() as u64 + end.saturating_sub(new_from);
        if total > next.capacity as u64 {
            let protected_outside = self
                .resident()
                .filter(|p| self.is_protected_position(*p) && !(s..end).contains(p))
                .count();
            let too_large = |capacity: usize| {
                CacheError::chunk_too_large(s, end, total, capacity, protected_outside)
            };
            if self.config.growth {
                let max = self.config.max_capacity();
                if total > max as u64 {
                    return Err(too_large(max));
                }
                let old = next.capacity;
                next.capacity = (total as usize).max(old.saturating_mul(2)).min(max);
                if next.window == old {
                    next.window = next.capacity;
                }
            } else {
                let excess = (total - next.capacity as u64) as usize;
                let victims: Vec<u64> = self
                    .evictable()
                    .into_iter()
                    .filter(|p| !(s..end).contains(p))
                    .take(excess)
                    .collect();
                if victims.len() < excess {
                    return Err(too_large(next.capacity));
                }
                for p in victims {
                    next.resident.remove(&p);
                }
            }
        }
        for p in new_from..end {
            next.resident.insert(p, vec![None; heads]);
        }
        // 8. The chunk must see itself.
        let view = next.view(recent_window.map(|r| (s, r)));
        let shown: BTreeSet<u64> = view.iter().copied().collect();
        if let Some(position) = (s..end).find(|p| !shown.contains(p)) {
            return Err(CacheError::WindowTooSmall {
                start: s,
                end,
                position,
                window: next.window,
                protected: next.protected().len(),
            });
        }
        // 9. Commit.
        next.trimmed.clear();
        next.global_end = self.global_end.max(end);
        for p in s..end {
            let writers = next
                .resident
                .get_mut(&p)
                .expect("inserted or checked resident above");
            for h in head_range.clone() {
                writers[h] = Some(index);
            }
        }
        if next.packed()
            && !(next
                .current_chunk()
                .is_some_and(|c| c.start == s && c.len == n))
        {
            next.append_chunk(s, n);
        }
        let writers = head_range
            .map(|h| view.iter().map(|p| next.resident[p][h]).collect())
            .collect();
        *self = next;
        Ok(Effect {
            global_end: self.global_end,
            visible: Some(view),
            writers: Some(writers),
        })
    }

    /// docs/contract.md §6: record an append as the current chunk, then turn cold
    /// every completed chunk outside the `keep_recent_chunks` most recent
    /// ones (and outside the sink unless `pack_sink`). Cold is permanent.
    fn append_chunk(&mut self, start: u64, len: u64) {
        self.chunks.push(Chunk {
            start,
            len,
            cold: false,
        });
        let current = self.chunks.len() - 1;
        self.current_chunk = Some(current);
        let policy = self.config.packed_policy();
        let sink = self.config.sink as u64;
        let keep_from = current.saturating_sub(policy.keep_recent_chunks);
        for chunk in &mut self.chunks[..keep_from] {
            if chunk.start >= sink || policy.pack_sink {
                chunk.cold = true;
            }
        }
    }

    /// docs/contract.md §3 `rewind`.
    pub fn rewind(&mut self, to: i64) -> Result<u64, CacheError> {
        let to = non_negative("to", to)?;
        if to > self.global_end {
            return Err(CacheError::RewindAhead {
                to,
                global_end: self.global_end,
            });
        }
        if self.packed() {
            let boundary = to == 0
                || to == self.global_end
                || self
                    .chunks
                    .iter()
                    .any(|c| c.start == to && c.range().any(|p| self.resident.contains_key(&p)));
            if !boundary {
                return Err(CacheError::Unsupported {
                    op: "rewind",
                    detail: format!(
                        "to {to} is not a chunk boundary (0, the global end {}, or the start of a resident chunk)",
                        self.global_end
                    ),
                });
            }
        }
        self.resident.retain(|&p, _| p < to);
        self.trimmed.clear();
        self.global_end = to;
        if self.pin.as_ref().is_some_and(|pin| pin.end > to) {
            self.pin = None;
        }
        self.chunks.retain(|c| c.start < to);
        self.current_chunk = None;
        Ok(self.global_end)
    }

    /// docs/contract.md §3 `evict`.
    pub fn evict(&mut self, tokens: i64) -> Result<u64, CacheError> {
        let k = non_negative("tokens", tokens)?;
        if self.packed() {
            return Err(CacheError::Unsupported {
                op: "evict",
                detail: "is not supported by the packed variant".to_string(),
            });
        }
        let evictable = self.evictable();
        if k > evictable.len() as u64 {
            return Err(CacheError::EvictTooMany {
                tokens: k,
                evictable: evictable.len(),
            });
        }
        for p in &evictable[..k as usize] {
            self.resident.remove(p);
        }
        self.trimmed.clear();
        Ok(self.global_end)
    }

    /// docs/contract.md §3 `pin` and §5.
    pub fn pin(&mut self, tokens: i64) -> Result<u64, CacheError> {
        let n = non_negative("tokens", tokens)?;
        if self.packed() {
            return Err(CacheError::Unsupported {
                op: "pin",
                detail: "is not supported by the packed variant".to_string(),
            });
        }
        if n == 0 {
            self.pin = None;
            self.trimmed.clear();
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
        if let Some(p) = pin.clone().find(|p| !self.resident.contains_key(p)) {
            return Err(CacheError::PinRange {
                tokens: n,
                detail: format!(
                    "would pin [{}, {}) but position {p} is not resident",
                    pin.start, pin.end
                ),
            });
        }
        self.pin = Some(pin);
        self.trimmed.clear();
        Ok(self.global_end)
    }

    /// docs/contract.md §3 `reset`: capacity and window keep their current values.
    pub fn reset(&mut self) -> u64 {
        self.resident.clear();
        self.trimmed.clear();
        self.global_end = 0;
        self.pin = None;
        self.chunks.clear();
        self.current_chunk = None;
        0
    }
}

mod after_read;
#[cfg(test)]
mod tests;
