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

/// Counts of labelled events (see [`EVENTS`] and `error:KIND`).
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

    /// Labels one step from the model before and after it.
    pub fn observe(&mut self, before: &Model, after: &Model, op: &Op, outcome: &Outcome) {
        self.observe_from(&Before::of(before), after, op, outcome)
    }

    /// [`Coverage::observe`] from a [`Before`] snapshot instead of a clone
    /// of the whole model (the driver takes one per step).
    pub fn observe_from(&mut self, before: &Before, after: &Model, op: &Op, outcome: &Outcome) {
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
