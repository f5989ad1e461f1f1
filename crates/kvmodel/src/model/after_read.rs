//! docs/contract.md §3 write under `trim = "after_read"` (the StreamingLLM
//! / Hugging Face `SinkCache` order): read first, trim afterwards.
//!
//! Checks 1–6 are those of every write and have already passed when this
//! runs. What differs is the order of the rest:
//!
//! 1. the view is the §4 view of the state **before** the write (`V_old`)
//!    together with the whole chunk `[s, s+n)`;
//! 2. the new positions are added and committed (writers, `G`);
//! 3. while `|R| > C`, the oldest evictable position is evicted, the
//!    chunk's own positions included.
//!
//! The view is therefore never cut to make room, so `window_too_small`
//! cannot occur, and `chunk_too_large` only if the protected positions
//! alone exceed `C` (which §1, `S < C`, rules out for every reachable
//! state; the check stays so that the rule is stated where it applies).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::CacheError;
use crate::model::Model;
use crate::op::CheckedWrite;
use crate::outcome::Effect;

impl Model {
    /// The writer of each head of `position` as the latest op read it: the
    /// resident position's writers, or, under `trim = "after_read"`, those
    /// of a position the latest write read and then trimmed (its view
    /// still holds that row). `None` for a position neither resident nor
    /// trimmed by the latest op. Under `before_read` this is
    /// [`Model::writers`].
    pub fn read_writers(&self, position: u64) -> Option<&[Option<u64>]> {
        self.writers(position)
            .or_else(|| self.trimmed.get(&position).map(Vec::as_slice))
    }

    /// The write steps 7–9 under `trim = "after_read"`, for a write whose
    /// checks 1–6 passed. On error the model is unchanged.
    pub(super) fn write_after_read(
        &mut self,
        index: u64,
        w: &CheckedWrite,
    ) -> Result<Effect, CacheError> {
        let (s, end) = (w.start, w.start + w.len);
        // The read: what the state before the write shows, and the chunk.
        let mut shown: BTreeSet<u64> = self
            .view(w.recent_window.map(|r| (s, r)))
            .into_iter()
            .collect();
        shown.extend(s..end);
        let view: Vec<u64> = shown.into_iter().collect();
        // The commit: every position of the chunk gets its writer.
        let mut next = self.clone();
        for p in s.max(self.global_end)..end {
            next.resident.insert(p, vec![None; self.config.heads]);
        }
        for p in s..end {
            let writers = next
                .resident
                .get_mut(&p)
                .expect("inserted above or resident by check 6");
            for h in w.heads.clone() {
                writers[h] = Some(index);
            }
        }
        next.global_end = self.global_end.max(end);
        // The writers are reported as read, before the trim drops any row.
        let writers = w
            .heads
            .clone()
            .map(|h| view.iter().map(|p| next.resident[p][h]).collect())
            .collect();
        // The trim: the oldest evictable positions go, the chunk's included.
        let mut trimmed = BTreeMap::new();
        let total = next.resident.len();
        if total > next.capacity {
            let excess = total - next.capacity;
            let victims: Vec<u64> = next.evictable().into_iter().take(excess).collect();
            if victims.len() < excess {
                let protected = next.protected().len();
                return Err(CacheError::chunk_too_large(
                    s,
                    end,
                    total as u64,
                    next.capacity,
                    protected,
                ));
            }
            for p in victims {
                let writers = next.resident.remove(&p).expect("an evictable position");
                trimmed.insert(p, writers);
            }
        }
        next.trimmed = trimmed;
        *self = next;
        Ok(Effect {
            global_end: self.global_end,
            visible: Some(view),
            writers: Some(writers),
        })
    }
}
