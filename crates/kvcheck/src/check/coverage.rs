//! Labelled events: what a run actually exercised.
//!
//! The driver labels every step by comparing the model before and after it.
//! Suites and the explorer declare the events they must reach, so that a
//! weakened strategy fails loudly instead of passing on easy inputs.

use std::collections::BTreeMap;
use std::fmt;

use kvmodel::{Model, Op, Outcome};

/// Every event the driver can label, in report order.
pub const EVENTS: &[&str] = &[
    "append",
    "eviction",
    "eviction_beside_sink",
    "pin_during_eviction",
    "growth",
    "tail_rewrite",
    "overlap_write",
    "head_range_write",
    "recent_window",
    "window_hides_resident",
    "rewind_into_evicted",
    "pin",
    "unpin",
    "reset",
    "probe",
    "cold_chunk",
    "partly_evicted_chunk",
];

/// The kinds of judged op a run counts, as `op:KIND` labels beside the
/// events, with their names in a summary: every judged op gets its kind
/// (a write by where it lands on the state before it), an oversized chunk
/// (longer than `C − S` before it) and a refused op one more each. A user
/// reads them to see that the ops their cache serves were exercised.
pub const OP_KINDS: &[(&str, &str)] = &[
    ("op:append", "appends"),
    ("op:rewrite", "rewrites"),
    ("op:probe", "probes"),
    ("op:gap", "gaps"),
    ("op:rewind", "rewinds"),
    ("op:evict", "evicts"),
    ("op:pin", "pins"),
    ("op:reset", "resets"),
    ("op:oversized", "oversized chunks"),
    ("op:refused", "refusals"),
];

/// The label a suite counts a case under when the subject cut it short,
/// answering *outside* its domain: events the rest of the case would have
/// reached are missed for that reason, not for a weak strategy.
pub const CUT_CASE: &str = "case:cut";

/// Counts of labelled events (see [`EVENTS`], [`OP_KINDS`] and `error:KIND`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Coverage {
    counts: BTreeMap<String, u64>,
}

impl Coverage {
    /// Adds one occurrence of `event`.
    pub fn hit(&mut self, event: &str) {
        // Every step labels a few events: allocate a key only the first time.
        match self.counts.get_mut(event) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(event.to_string(), 1);
            }
        }
    }

    /// How often `event` happened.
    pub fn count(&self, event: &str) -> u64 {
        self.counts.get(event).copied().unwrap_or(0)
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Coverage) {
        for (event, n) in &other.counts {
            *self.counts.entry(event.clone()).or_default() += n;
        }
    }

    /// Events with their counts, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.counts.iter().map(|(e, n)| (e.as_str(), *n))
    }

    /// The events of `required` that never happened.
    pub fn missing<'a>(&self, required: &[&'a str]) -> Vec<&'a str> {
        required
            .iter()
            .copied()
            .filter(|e| self.count(e) == 0)
            .collect()
    }

    /// The judged ops by kind, in words: `ops judged: 12 appends, 3
    /// rewrites, …` (every kind of [`OP_KINDS`], zeros included, so that a
    /// kind never drawn shows).
    pub fn op_summary(&self) -> String {
        let kinds: Vec<String> = OP_KINDS
            .iter()
            .map(|(label, name)| format!("{} {name}", self.count(label)))
            .collect();
        format!("ops judged: {}", kinds.join(", "))
    }

    /// Counts the kind of one judged op (see [`OP_KINDS`]) from the state
    /// before it.
    fn count_op(&mut self, before: &Before, sink: usize, op: &Op, outcome: &Outcome) {
        let kind = match op {
            Op::Write(w) if w.len == 0 => "op:probe",
            Op::Write(w) if w.start >= 0 && (w.start as u64) < before.global_end => "op:rewrite",
            Op::Write(w) if w.start >= 0 && w.start as u64 == before.global_end => "op:append",
            Op::Write(_) => "op:gap",
            Op::Rewind { .. } => "op:rewind",
            Op::Evict { .. } => "op:evict",
            Op::Pin { .. } => "op:pin",
            Op::Reset => "op:reset",
        };
        self.hit(kind);
        if let Op::Write(w) = op {
            if w.len > 0 && w.len as u64 > before.capacity.saturating_sub(sink) as u64 {
                self.hit("op:oversized");
            }
        }
        if matches!(outcome, Outcome::Err(_)) {
            self.hit("op:refused");
        }
    }

    /// Labels one step from the model before and after it.
    pub fn observe(&mut self, before: &Model, after: &Model, op: &Op, outcome: &Outcome) {
        self.observe_from(&Before::of(before), after, op, outcome)
    }

    /// [`Coverage::observe`] from a [`Before`] snapshot instead of a clone
    /// of the whole model (the driver takes one per step).
    pub fn observe_from(&mut self, before: &Before, after: &Model, op: &Op, outcome: &Outcome) {
        self.count_op(before, after.config().sink, op, outcome);
        let effect = match outcome {
            Outcome::Err(kind) => {
                self.hit(&format!("error:{}", kind.name()));
                return;
            }
            Outcome::Ok(effect) => effect,
        };
        let mut evicted = before
            .resident
            .iter()
            .copied()
            .filter(|p| after.writers(*p).is_none() && *p < after.global_end())
            .peekable();
        let evicting = evicted.peek().is_some() && !matches!(op, Op::Rewind { .. } | Op::Reset);
        if evicting {
            self.hit("eviction");
            if evicted.any(|p| p > 0 && before.protected.binary_search(&(p - 1)).is_ok()) {
                self.hit("eviction_beside_sink");
            }
            if before.pinned {
                self.hit("pin_during_eviction");
            }
        }
        if after.capacity() > before.capacity {
            self.hit("growth");
        }
        match op {
            Op::Write(w) => {
                let (s, end, g) = (w.start as u64, (w.start + w.len) as u64, before.global_end);
                if w.len == 0 {
                    self.hit("probe");
                } else if s == g {
                    self.hit("append");
                } else if end <= g {
                    self.hit("tail_rewrite");
                } else {
                    self.hit("overlap_write");
                }
                if w.heads.is_some() {
                    self.hit("head_range_write");
                }
                if w.recent_window.is_some() {
                    self.hit("recent_window");
                }
                let shown = effect.visible.as_ref().map_or(0, Vec::len);
                if shown < after.resident_len() {
                    self.hit("window_hides_resident");
                }
            }
            Op::Rewind { to } => {
                // Some position below `to` was not resident.
                let to = *to as u64;
                let below = before.resident.partition_point(|&p| p < to);
                if (below as u64) < to {
                    self.hit("rewind_into_evicted");
                }
            }
            Op::Pin { tokens } => self.hit(if *tokens == 0 { "unpin" } else { "pin" }),
            Op::Evict { .. } => {}
            Op::Reset => self.hit("reset"),
        }
        if cold_chunks(after) > before.cold_chunks {
            self.hit("cold_chunk");
        }
        if after.chunks().iter().any(|c| {
            c.range().any(|p| after.writers(p).is_some())
                && c.range().any(|p| after.writers(p).is_none())
        }) {
            self.hit("partly_evicted_chunk");
        }
    }
}

fn cold_chunks(model: &Model) -> usize {
    model.chunks().iter().filter(|c| c.cold).count()
}

/// What labelling a step needs of the model before it: a few positions
/// and counts rather than a clone of every writer.
#[derive(Clone, Debug)]
pub struct Before {
    resident: Vec<u64>,
    protected: Vec<u64>,
    pinned: bool,
    capacity: usize,
    global_end: u64,
    cold_chunks: usize,
}

impl Before {
    /// The snapshot of `model`.
    pub fn of(model: &Model) -> Before {
        Before {
            resident: model.resident().collect(),
            protected: model.protected(),
            pinned: model.pin_range().is_some(),
            capacity: model.capacity(),
            global_end: model.global_end(),
            cold_chunks: cold_chunks(model),
        }
    }
}

impl fmt::Display for Coverage {
    /// One `event count` pair per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (event, n) in self.iter() {
            writeln!(f, "{event:<24} {n}")?;
        }
        Ok(())
    }
}
