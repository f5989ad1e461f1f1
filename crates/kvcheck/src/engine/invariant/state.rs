//! What the contract says about one run's state, derived from the ops, the
//! outcomes a caller saw (accepted or refused) and the configuration
//! alone: no model is asked. Only what is certain is derived; where the
//! contract's exact retention would need the resident set, the state says
//! "unknown" rather than guess (the window domain ends at a pin, a packed
//! chunk's temperature becomes unknown after a rewind).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use kvmodel::{Config, Op, Quant, Variant, Write};

use crate::check::record::Payload;

/// The resident set where the ops alone decide it: with no pin since the
/// last reset, the resident positions are the sinks `[0, min(S, G))`
/// (never evicted, cut only by a rewind) and a contiguous tail
/// `[tail, G)` above them (evictions take its bottom, rewinds its top,
/// appends extend it). Capacity and window follow growth (§3 step 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The current capacity `C`.
    pub capacity: usize,
    /// The current window `W`.
    pub window: usize,
    /// The lowest resident position at or above the sink (`≥ S`).
    pub tail: u64,
}

/// One packed chunk (the range of one append, §6) and whether its rows
/// certainly hold the written values (hot, or cold with `quant = none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    start: u64,
    len: u64,
    exact: bool,
}

/// A write's arguments after the contract's checks 1–3 (§3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// First position.
    pub start: u64,
    /// One past the last position.
    pub end: u64,
    /// The heads written.
    pub heads: Range<usize>,
    /// The recent window, if given.
    pub recent: Option<u64>,
}

/// A write's arguments as the contract reads them, or `None` when checks
/// 1–3 of §3 refuse it whatever the state (a negative start, length or
/// window; a head range outside `[0, H)` or of no head).
pub fn checked(w: &Write, heads: usize) -> Option<Checked> {
    let start = u64::try_from(w.start).ok()?;
    let len = u64::try_from(w.len).ok()?;
    let recent = match w.recent_window {
        Some(r) => Some(u64::try_from(r).ok()?),
        None => None,
    };
    let heads = match w.heads {
        None => 0..heads,
        Some([first, count]) => {
            if first < 0 || count < 1 || first.checked_add(count)? > heads as i64 {
                return None;
            }
            first as usize..(first + count) as usize
        }
    };
    Some(Checked {
        start,
        end: start.checked_add(len)?,
        heads,
        recent,
    })
}

/// The state one run's ops and outcomes imply (see the module docs).
#[derive(Clone, Debug)]
pub struct Derived {
    config: Config,
    /// `G`: the global end the contract gives after the accepted ops.
    pub global_end: u64,
    /// The pinned range while a pin stands (§5).
    pub pin: Option<Range<u64>>,
    /// Sink positions certainly resident and protected: written, in
    /// `[0, GS)`, or in `[0, S)` with no pin standing since they were
    /// written or last protected again (a pin makes `[GS, S)` evictable).
    pub sinks: BTreeSet<u64>,
    /// The resident set while the ops alone decide it (none from the first
    /// accepted pin to the next reset).
    pub retention: Option<Retention>,
    /// Capacity and window while known (lost when a pin hides the
    /// resident count from growth).
    sized: Option<(usize, usize)>,
    /// Per position, per head: the payload of the latest accepted write
    /// since the position was last added (none: zeros, §7).
    pub writers: BTreeMap<u64, Vec<Option<Payload>>>,
    chunks: Vec<Chunk>,
    current: Option<usize>,
}

impl Derived {
    /// The state of a fresh cache built with `config`.
    pub fn new(config: &Config) -> Derived {
        let sized = (config.capacity, config.effective_window());
        Derived {
            config: config.clone(),
            global_end: 0,
            pin: None,
            sinks: BTreeSet::new(),
            retention: Some(Retention {
                capacity: sized.0,
                window: sized.1,
                tail: config.sink as u64,
            }),
            sized: Some(sized),
            writers: BTreeMap::new(),
            chunks: Vec::new(),
            current: None,
        }
    }

    fn sink(&self) -> u64 {
        self.config.sink as u64
    }

    /// Whether the contract refuses `op` in every state that agrees with
    /// what this run showed so far (§3): checks 1–3 and 5 of a write, the
    /// packed variant's unsupported requests (§6), a rewind past `G`, more
    /// evictions than positions that can be evictable, a pin past `G` or
    /// without a sink. `Some(why)` names the rule.
    pub fn must_refuse(&self, op: &Op) -> Option<String> {
        let g = self.global_end;
        let packed = self.config.variant == Variant::Packed;
        match op {
            Op::Write(w) => {
                let Some(c) = checked(w, self.config.heads) else {
                    return Some("a negative argument or a head range outside the heads".into());
                };
                if packed && !(c.start == g && c.end > c.start) && !self.rewrites_current(&c) {
                    return Some(
                        "packed: neither an append nor a rewrite of the current chunk".into(),
                    );
                }
                (c.start > g).then(|| format!("it starts past the global end {g}"))
            }
            Op::Rewind { to } => (*to < 0 || *to as u64 > g)
                .then(|| format!("rewind to {to} with the global end at {g}")),
            Op::Evict { tokens } => {
                let evictable = match (&self.retention, self.config.variant) {
                    (_, Variant::Packed) => return Some("packed: evict is unsupported".into()),
                    (Some(r), _) => g.saturating_sub(r.tail),
                    (None, _) => g,
                };
                (*tokens < 0 || *tokens as u64 > evictable)
                    .then(|| format!("evict {tokens} with at most {evictable} evictable"))
            }
            Op::Pin { tokens } => {
                if packed {
                    return Some("packed: pin is unsupported".into());
                }
                let bad = *tokens < 0 || (*tokens > 0 && (self.sink() == 0 || *tokens as u64 > g));
                bad.then(|| format!("pin {tokens} with S = {} and G = {g}", self.sink()))
            }
            Op::Reset => None,
        }
    }

    fn rewrites_current(&self, c: &Checked) -> bool {
        self.current
            .map(|i| self.chunks[i])
            .is_some_and(|chunk| chunk.start == c.start && chunk.start + chunk.len == c.end)
    }

    /// The global end the contract returns for `op` if it is accepted.
    pub fn end_after(&self, op: &Op) -> u64 {
        match op {
            Op::Write(w) => self
                .global_end
                .max(w.start.saturating_add(w.len).max(0) as u64),
            Op::Rewind { to } => (*to).max(0) as u64,
            Op::Evict { .. } | Op::Pin { .. } => self.global_end,
            Op::Reset => 0,
        }
    }

    /// Applies `op`, which the subject accepted and the contract allows
    /// ([`Derived::must_refuse`] is none), with `payload` for a write.
    pub fn accept(&mut self, op: &Op, payload: Payload) {
        match op {
            Op::Write(w) => {
                if let Some(c) = checked(w, self.config.heads) {
                    self.write(&c, payload);
                }
            }
            Op::Rewind { to } => self.rewind(*to as u64),
            Op::Evict { tokens } => {
                if let Some(r) = self.retention.as_mut() {
                    r.tail += *tokens as u64;
                }
            }
            Op::Pin { tokens } => self.pin(*tokens as u64),
            Op::Reset => self.reset(),
        }
    }

    fn write(&mut self, c: &Checked, payload: Payload) {
        let (s, g) = (self.sink(), self.global_end);
        let fresh = c.start.max(g)..c.end.max(g);
        if let Some(r) = self.retention.as_mut() {
            let resident = s.min(g) + g.saturating_sub(r.tail);
            let total = resident + (fresh.end - fresh.start);
            if total > r.capacity as u64 {
                if self.config.growth {
                    // §3 step 7: C := max(|R|, 2C) under the size rule; W
                    // follows C only while it was equal to it.
                    let old = r.capacity;
                    r.capacity = (total as usize)
                        .max(old.saturating_mul(2))
                        .min(self.config.max_capacity());
                    if r.window == old {
                        r.window = r.capacity;
                    }
                    self.sized = Some((r.capacity, r.window));
                } else {
                    // The oldest evictable positions are the tail's bottom.
                    r.tail += total - r.capacity as u64;
                }
            }
        }
        let gs = self.config.global_sink as u64;
        for p in fresh.clone() {
            self.writers.insert(p, vec![None; self.config.heads]);
            if p < gs || (p < s && self.pin.is_none()) {
                self.sinks.insert(p);
            }
        }
        for p in c.start..c.end {
            if let Some(heads) = self.writers.get_mut(&p) {
                for h in c.heads.clone() {
                    heads[h] = Some(payload);
                }
            }
        }
        self.global_end = g.max(c.end);
        if self.config.variant == Variant::Packed && !self.rewrites_current(c) {
            self.append_chunk(c.start, c.end - c.start);
        }
    }

    /// §6: the append is the current chunk; every completed chunk outside
    /// the `keep_recent_chunks` most recent ones goes cold, unless it
    /// starts below `S` without `pack_sink`.
    fn append_chunk(&mut self, start: u64, len: u64) {
        self.chunks.push(Chunk {
            start,
            len,
            exact: true,
        });
        let current = self.chunks.len() - 1;
        self.current = Some(current);
        let keep_from = current.saturating_sub(self.config.packed_policy().keep_recent_chunks);
        let s = self.sink();
        let pack_sink = self.config.packed_policy().pack_sink;
        for chunk in &mut self.chunks[..keep_from] {
            if chunk.start >= s || pack_sink {
                chunk.exact = false;
            }
        }
    }

    fn rewind(&mut self, to: u64) {
        self.global_end = to;
        self.writers.retain(|&p, _| p < to);
        self.sinks.retain(|&p| p < to);
        let s = self.sink();
        if let Some(r) = self.retention.as_mut() {
            // Positions in [S, tail) were evicted and stay gone; the tail
            // loses its top, and appends from `to` rebuild it.
            r.tail = r.tail.min(to).max(s);
        }
        if let Some(pin) = self.pin.clone().filter(|pin| pin.end > to) {
            // The pin is cleared (§3 rewind); its positions below `to` are
            // still resident, and those below S are sinks again (§5).
            self.pin = None;
            self.sinks.extend(pin.filter(|&p| p < s.min(to)));
        }
        // Whether chunks past `to` still count among the most recent is
        // not the contract's to say: a surviving chunk's temperature is
        // unknown from here on, unless the sink keeps it hot.
        let pack_sink = self.config.packed_policy().pack_sink;
        self.chunks.retain(|c| c.start < to);
        for chunk in &mut self.chunks {
            chunk.exact &= chunk.start < s && !pack_sink;
        }
        self.current = None;
    }

    fn pin(&mut self, tokens: u64) {
        let s = self.sink();
        if tokens == 0 {
            if let Some(pin) = self.pin.take() {
                self.sinks.extend(pin.filter(|&p| p < s));
            }
            return;
        }
        let g = self.global_end;
        let start = g - tokens;
        self.pin = Some(start..start + tokens.min(s));
        let gs = self.config.global_sink as u64;
        self.sinks.retain(|&p| p < gs);
        // The resident count is no longer the ops' to say (the evictable
        // part of the sink goes first); growth then hides C and W.
        self.retention = None;
        if self.config.growth {
            self.sized = None;
        }
    }

    fn reset(&mut self) {
        self.global_end = 0;
        self.pin = None;
        self.sinks.clear();
        self.writers.clear();
        self.chunks.clear();
        self.current = None;
        self.retention = self.sized.map(|(capacity, window)| Retention {
            capacity,
            window,
            tail: self.config.sink as u64,
        });
    }

    /// Whether the rows of `position` certainly hold the values written
    /// (dense, `quant = none`, or a packed chunk that is certainly hot): a
    /// quantized cold row's values are the model's to judge.
    pub fn exact(&self, position: u64) -> bool {
        if self.config.variant == Variant::Dense || self.config.packed_policy().quant == Quant::None
        {
            return true;
        }
        self.chunks
            .iter()
            .rev()
            .find(|c| c.start <= position)
            .is_some_and(|c| c.exact && position < c.start + c.len)
    }

    /// Under `trim = "after_read"` (§3, trim modes): the number of recent
    /// (non-sink) positions the view of write `c` must show, asked of the
    /// state **before** the write: the recent part of that state's §4 view
    /// (a contiguous top `[a, G)` of the tail) together with the chunk's
    /// positions at or above `S`, counted once where they overlap.
    pub fn recent_shown_read(&self, c: &Checked) -> Option<u64> {
        let r = self.retention?;
        let (s, g) = (self.sink(), self.global_end);
        let held = g.saturating_sub(r.tail);
        let old = match c.recent {
            None => held.min((r.window as u64).saturating_sub(s.min(g))),
            Some(recent) => g.saturating_sub(r.tail.max(c.start.saturating_sub(recent))),
        };
        let from = g - old;
        let chunk = c.start.max(s)..c.end.max(c.start.max(s));
        let overlap = g.min(chunk.end).saturating_sub(from.max(chunk.start));
        Some(old + (chunk.end - chunk.start) - overlap)
    }

    /// The number of recent (non-sink) positions the view of write `c`
    /// must show (§4), while the ops alone decide the resident set.
    pub fn recent_shown(&self, c: &Checked) -> Option<u64> {
        let r = self.retention?;
        let (s, g) = (self.sink(), self.global_end);
        let held = g.saturating_sub(r.tail);
        Some(match c.recent {
            None => held.min((r.window as u64).saturating_sub(s.min(g))),
            Some(recent) => g.saturating_sub(r.tail.max(c.start.saturating_sub(recent))),
        })
    }
}
