//! The packed cache of docs/contract.md §6: storage by chunks, cold chunks quantized.
//!
//! **Residency in two numbers.** The packed variant only appends at the
//! global end, rewrites the current chunk in place, and rewinds. Protected
//! positions `[0, S)` are never evicted and eviction takes the smallest
//! evictable positions first, so the resident set is always
//! `[0, min(S, G)) ∪ [evicted_to, G)` with `S ≤ evicted_to`: the cache keeps
//! `G` and `evicted_to` instead of a set of positions, and every check of
//! docs/contract.md §3 becomes interval arithmetic.
//!
//! **Storage by chunk.** Each chunk (the range of one append) holds its
//! resident rows as one or two *pieces* (two only when eviction cut a hole
//! into a chunk that straddles the sink boundary). A piece is either hot,
//! `[B, len, H, D]` K and V tensors in the cache dtype, or cold: int8 / int4
//! codes plus one f32 scale per (batch row, position, head), or, with
//! `quant = "none"`, the exact tensors tagged cold. Eviction trims pieces
//! (with a copy, so the dropped rows are freed); it never re-quantizes.
//!
//! **The view** is assembled in ascending position order in one output
//! tensor per K and V: hot rows are copied in, cold rows are dequantized
//! straight into their slice of the output ([`quant::dequantize_into`]).

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use kvmodel::{
    format_ranges, non_negative, CacheError, Config, PackedPolicy, Quant, Variant, Write,
};

use crate::quant;
use crate::{candle_dtype, check_payload, Internals, KvCache, Layout, Path, Result, Slot, View};

mod storage;

use storage::{overlap, Chunk, Piece, Rows};

/// The packed cache of docs/contract.md §6. See the module docs for the design.
#[derive(Clone, Debug)]
pub struct PackedCache {
    config: Config,
    policy: PackedPolicy,
    device: Device,
    dtype: DType,
    /// `S`.
    sink: u64,
    /// `W`.
    window: u64,
    /// `G`.
    global_end: u64,
    /// Positions `[S, evicted_to)` are evicted; `evicted_to ≥ S`.
    evicted_to: u64,
    /// Chunks since the last reset or rewind below them, ascending.
    chunks: Vec<Chunk>,
    /// Whether the last chunk is the current one (cleared by rewind, reset).
    has_current: bool,
    /// Which quantizer and dequantizer run (every other op of this cache
    /// is built from candle's public tensor ops already).
    path: Path,
}

impl PackedCache {
    /// A new, empty packed cache on `device`. Refuses a configuration that
    /// breaks docs/contract.md §1 (and a dense one) with `invalid_config`.
    pub fn new(config: &Config, device: &Device) -> Result<PackedCache> {
        PackedCache::with_path(config, device, Path::default_for(device))
    }

    /// [`PackedCache::new`] with an explicit [`Path`]: `InPlace` quantizes
    /// with the CPU kernels of [`quant`], `Generic` with
    /// [`quant::generic`] (any device).
    pub fn with_path(config: &Config, device: &Device, path: Path) -> Result<PackedCache> {
        config.validate()?;
        if config.variant != Variant::Packed {
            return Err(CacheError::InvalidConfig {
                field: "variant",
                reason: "PackedCache needs variant \"packed\"".to_string(),
            }
            .into());
        }
        Ok(PackedCache {
            config: config.clone(),
            policy: config.packed_policy(),
            device: device.clone(),
            dtype: candle_dtype(config.dtype),
            sink: config.sink as u64,
            window: config.effective_window() as u64,
            global_end: 0,
            evicted_to: config.sink as u64,
            chunks: Vec::new(),
            has_current: false,
            path,
        })
    }

    /// The implementation this cache runs.
    pub fn path(&self) -> Path {
        self.path
    }

    /// The resident sink positions `[0, min(S, G))` for a global end `g`.
    fn sink_range(&self, g: u64) -> Range<u64> {
        0..self.sink.min(g)
    }

    /// The resident positions past the sink, `[evicted_to, G)`.
    fn recent_range(evicted_to: u64, g: u64) -> Range<u64> {
        evicted_to..g.max(evicted_to)
    }

    /// `|R|`.
    fn resident_len(&self) -> u64 {
        let g = self.global_end;
        self.sink_range(g).end + (Self::recent_range(self.evicted_to, g).end - self.evicted_to)
    }

    fn is_resident(&self, p: u64) -> bool {
        p < self.global_end && (p < self.sink || p >= self.evicted_to)
    }

    /// The first position of `range` that is not resident.
    ///
    /// The cache itself only asks about the current chunk, `[c.start, G)`,
    /// and about empty ranges (step 6 of an append), and the current chunk
    /// is always wholly resident: an append evicts only positions below its
    /// own start, and nothing else evicts. So every call [`KvCache::write`]
    /// makes answers `None`, and the checks below are the definition of
    /// residency on the interval state, kept for the order of the contract
    /// (docs/contract.md §6: a rewrite of the current chunk "while still
    /// fully resident"). No op sequence tells a wrong answer on any other
    /// range apart, so `tests::first_missing_is_the_first_non_resident_position`
    /// pins the function on every range directly (docs/mutants.md).
    fn first_missing(&self, range: Range<u64>) -> Option<u64> {
        if range.is_empty() {
            return None;
        }
        if range.start >= self.global_end {
            return Some(range.start);
        }
        if range.start >= self.sink && range.start < self.evicted_to {
            return Some(range.start);
        }
        if range.start < self.sink && range.end > self.sink && self.evicted_to > self.sink {
            return Some(self.sink);
        }
        (range.end > self.global_end).then_some(self.global_end)
    }

    fn current(&self) -> Option<&Chunk> {
        if self.has_current {
            self.chunks.last()
        } else {
            None
        }
    }

    /// docs/contract.md §4 on the state `(evicted_to, g)`: the two contiguous runs of
    /// visible positions (sink, then the window), ascending and disjoint.
    fn visible(&self, evicted_to: u64, g: u64, recent: Option<(u64, u64)>) -> [Range<u64>; 2] {
        let protected = self.sink_range(g);
        let others = Self::recent_range(evicted_to, g);
        let from = match recent {
            None => {
                let keep = self.window.saturating_sub(protected.end);
                others.end.saturating_sub(keep)
            }
            Some((s, r)) => s.saturating_sub(r),
        };
        [protected, from.max(others.start)..others.end]
    }

    fn unsupported_write(&self, s: u64, end: u64) -> CacheError {
        let current = match self.current() {
            Some(c) => format!("the current chunk is [{}, {})", c.start, c.start + c.len),
            None => "there is no current chunk".to_string(),
        };
        CacheError::Unsupported {
            op: "write",
            detail: format!(
                "[{s}, {end}) is neither an append at the global end {} nor a rewrite of exactly the current chunk ({current})",
                self.global_end
            ),
        }
    }
}

impl KvCache for PackedCache {
    fn config(&self) -> &Config {
        &self.config
    }

    fn global_end(&self) -> u64 {
        self.global_end
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        // 1–3: arguments (shared with the model: they read no state).
        let checked = request.check_arguments(self.config.heads)?;
        let (s, n, end) = (checked.start, checked.len, checked.end());
        let (recent_window, head_range) = (checked.recent_window, checked.heads);
        // 4: only an append or a rewrite of exactly the current chunk.
        let g = self.global_end;
        let append = s == g && n >= 1;
        let rewrite = self
            .current()
            .is_some_and(|c| c.start == s && c.len == n && self.first_missing(c.range()).is_none());
        if !append && !rewrite {
            return Err(self.unsupported_write(s, end).into());
        }
        // 5–6: never fire for an append or a rewrite of the current chunk,
        // kept so the order of docs/contract.md §3 reads off the code.
        if s > g {
            return Err(CacheError::NonSequential {
                start: s,
                global_end: g,
            }
            .into());
        }
        if let Some(position) = self.first_missing(s..end.min(g)) {
            return Err(CacheError::Evicted {
                start: s,
                end,
                position,
                resident: format_ranges(
                    self.sink_range(g)
                        .chain(Self::recent_range(self.evicted_to, g))
                        .filter(|&p| self.is_resident(p)),
                ),
            }
            .into());
        }
        // 7: make room. Only an append adds positions, all at or past G, so
        // the victims are the oldest of [evicted_to, G).
        let added = end - s.max(g);
        let total = self.resident_len() + added;
        let capacity = self.config.capacity as u64;
        let mut evicted_to = self.evicted_to;
        if total > capacity {
            let excess = total - capacity;
            let evictable = Self::recent_range(evicted_to, g).end - evicted_to;
            if excess > evictable || s < g {
                let protected = self.sink_range(g).end as usize;
                return Err(CacheError::chunk_too_large(
                    s,
                    end,
                    total,
                    self.config.capacity,
                    protected,
                )
                .into());
            }
            evicted_to += excess;
        }
        // 8: the chunk must see itself.
        let new_end = g.max(end);
        let runs = self.visible(evicted_to, new_end, recent_window.map(|r| (s, r)));
        let unseen = (s..end).find(|p| !runs.iter().any(|r| r.contains(p)));
        if let Some(position) = unseen {
            return Err(CacheError::WindowTooSmall {
                start: s,
                end,
                position,
                window: self.config.effective_window(),
                protected: self.sink_range(new_end).end as usize,
            }
            .into());
        }
        // 9: commit. Every check has passed; only backend failures remain.
        let c = &self.config;
        let expected = [c.batch, n as usize, head_range.len(), c.head_dim];
        check_payload("k", k, expected, self.dtype)?;
        check_payload("v", v, expected, self.dtype)?;
        if rewrite {
            let chunk = self.chunks.last_mut().expect("a current chunk exists");
            let piece = &mut chunk.pieces[0];
            if head_range.len() == self.config.heads {
                piece.rows = Rows::Hot {
                    k: k.force_contiguous()?,
                    v: v.force_contiguous()?,
                };
            } else if let Rows::Hot { k: hot_k, v: hot_v } = &piece.rows {
                hot_k.slice_set(&k.contiguous()?, 2, head_range.start)?;
                hot_v.slice_set(&v.contiguous()?, 2, head_range.start)?;
            }
        } else {
            let mut chunks = self.chunks.clone();
            Self::drop_rows(&mut chunks, self.evicted_to..evicted_to)?;
            let rows = self.hot_rows(n as usize, &head_range, k, v)?;
            chunks.push(Chunk {
                start: s,
                len: n,
                cold: false,
                pieces: vec![Piece {
                    start: s,
                    len: n as usize,
                    rows,
                }],
            });
            let current = chunks.len() - 1;
            let keep_from = current.saturating_sub(self.policy.keep_recent_chunks);
            for chunk in &mut chunks[..keep_from] {
                if !chunk.cold && (chunk.start >= self.sink || self.policy.pack_sink) {
                    Self::freeze(chunk, self.policy.quant, self.path)?;
                }
            }
            self.chunks = chunks;
            self.has_current = true;
            self.evicted_to = evicted_to;
            self.global_end = new_end;
        }
        let (positions, k, v) = self.assemble(&runs, head_range)?;
        Ok(View::new(self.global_end, positions, k, v, false))
    }

    fn view(&self) -> Result<View<'_>> {
        let runs = self.visible(self.evicted_to, self.global_end, None);
        let (positions, k, v) = self.assemble(&runs, 0..self.config.heads)?;
        Ok(View::new(self.global_end, positions, k, v, false))
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        let to = non_negative("to", to)?;
        let g = self.global_end;
        if to > g {
            return Err(CacheError::RewindAhead { to, global_end: g }.into());
        }
        let boundary = to == 0
            || to == g
            || self.chunks.iter().any(|c| {
                let range = c.range();
                c.start == to
                    && (overlap(&range, &self.sink_range(g)) > 0
                        || overlap(&range, &Self::recent_range(self.evicted_to, g)) > 0)
            });
        if !boundary {
            return Err(CacheError::Unsupported {
                op: "rewind",
                detail: format!(
                    "to {to} is not a chunk boundary (0, the global end {g}, or the start of a resident chunk)"
                ),
            }
            .into());
        }
        let mut chunks: Vec<Chunk> = self
            .chunks
            .iter()
            .filter(|c| c.start < to)
            .cloned()
            .collect();
        Self::drop_rows(&mut chunks, to..g)?;
        self.chunks = chunks;
        self.evicted_to = self.evicted_to.min(to.max(self.sink));
        self.global_end = to;
        self.has_current = false;
        Ok(to)
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        non_negative("tokens", tokens)?;
        Err(CacheError::Unsupported {
            op: "evict",
            detail: "is not supported by the packed variant".to_string(),
        }
        .into())
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        non_negative("tokens", tokens)?;
        Err(CacheError::Unsupported {
            op: "pin",
            detail: "is not supported by the packed variant".to_string(),
        }
        .into())
    }

    fn reset(&mut self) -> Result<u64> {
        self.chunks.clear();
        self.has_current = false;
        self.global_end = 0;
        self.evicted_to = self.sink;
        Ok(0)
    }

    fn internals(&self) -> Option<&dyn Internals> {
        Some(self)
    }
}

impl Internals for PackedCache {
    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn resident_bytes(&self) -> u64 {
        let c = &self.config;
        let hot_row = (c.head_dim * c.dtype.size_bytes()) as u64;
        let cold_row = match self.policy.quant {
            Quant::None => hot_row,
            q => (quant::code_bytes(q, c.head_dim) + 4) as u64,
        };
        let rows: u64 = self
            .chunks
            .iter()
            .flat_map(|ch| &ch.pieces)
            .map(|p| p.len as u64 * if p.rows.is_cold() { cold_row } else { hot_row })
            .sum();
        rows * (c.batch * c.heads) as u64 * 2
    }

    fn layout(&self) -> Layout {
        let slots = self
            .chunks
            .iter()
            .flat_map(|ch| &ch.pieces)
            .flat_map(|p| {
                let cold = p.rows.is_cold();
                p.range()
                    .map(move |q| if cold { Slot::Cold(q) } else { Slot::Hot(q) })
            })
            .collect();
        Layout { slots }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/contract.md §3 write: step 4 comes before step 6, so a rewrite of
    /// a current chunk with an evicted position is `unsupported`. No op
    /// sequence evicts part of the current chunk (only an append evicts,
    /// and never its own positions), so the state is set directly, on
    /// both paths.
    #[test]
    fn rewrite_of_a_partly_evicted_current_chunk_is_unsupported() {
        let mut config = Config::packed(8);
        config.head_dim = 2;
        let rows = |n: usize| Tensor::ones((1, n, 1, 2), DType::F32, &Device::Cpu).unwrap();
        for path in Path::ALL {
            let mut cache = PackedCache::with_path(&config, &Device::Cpu, path).unwrap();
            cache.write(&Write::new(0, 2), &rows(2), &rows(2)).unwrap();
            cache.write(&Write::new(2, 3), &rows(3), &rows(3)).unwrap();
            assert!(cache.write(&Write::new(2, 3), &rows(3), &rows(3)).is_ok());
            cache.evicted_to = 3;
            let err = cache
                .write(&Write::new(2, 3), &rows(3), &rows(3))
                .unwrap_err();
            assert_eq!(
                err.kind(),
                Some(kvmodel::ErrorKind::Unsupported),
                "{path}: {err}"
            );
            assert_eq!(cache.global_end, 5);
        }
    }

    /// `first_missing` on every range over every interval state the cache
    /// can reach (`S ≤ evicted_to ≤ max(S, G)`), against the resident set
    /// of the module docs, `[0, min(S, G)) ∪ [evicted_to, G)`. Through the
    /// public API the function only ever sees the current chunk, which is
    /// wholly resident, so a comparison that is off by one on any other
    /// range (`range.end >= S` for `range.end > S`: a range that ends
    /// exactly at the sink, after an eviction) is caught here only.
    #[test]
    fn first_missing_is_the_first_non_resident_position() {
        for sink in 0..=3u64 {
            let mut config = Config::packed(16);
            config.sink = sink as usize;
            let mut cache = PackedCache::new(&config, &Device::Cpu).unwrap();
            for g in 0..=8u64 {
                for evicted_to in sink..=sink.max(g) {
                    cache.global_end = g;
                    cache.evicted_to = evicted_to;
                    let resident =
                        |p: &u64| (0..sink.min(g)).contains(p) || (evicted_to..g).contains(p);
                    for start in 0..=g + 2 {
                        for end in start..=g + 2 {
                            assert_eq!(
                                cache.first_missing(start..end),
                                (start..end).find(|p| !resident(p)),
                                "S={sink} G={g} evicted_to={evicted_to} range {start}..{end}"
                            );
                        }
                    }
                }
            }
        }
    }
}
