//! The slot map of [`RingCache`](super::RingCache): which buffer slot holds
//! which global position, and where the next append goes.
//!
//! A resident position never changes slot until growth re-lays the buffer
//! out. The map is a short list of [`Run`]s (consecutive positions in
//! consecutive slots) sorted by position; slots are *not* sorted with
//! them: the ring wraps. Fresh positions take the free slots that follow
//! the newest row in cyclic slot order, skipping occupied ones (the sink,
//! a pin). Eviction always frees the oldest evictable rows, which are the
//! ones right after the newest in that order, so in the rolling steady
//! state an append lands in one slot range, or two when it wraps past the
//! top of the buffer. Every query and update is O(runs), never O(capacity).

use std::ops::Range;

use crate::ranges::{intersect, normalize, subtract, Run};
use crate::{RingLayout, Slot};

/// The position → slot map of a ring of `capacity` slots.
#[derive(Clone, Debug)]
pub(crate) struct RingMap {
    /// Runs sorted by position.
    runs: Vec<Run>,
    capacity: usize,
    /// Where an append starts when the position before it is not resident.
    cursor: usize,
}

impl RingMap {
    /// An empty map of `capacity` slots.
    pub fn new(capacity: usize) -> RingMap {
        RingMap {
            runs: Vec::new(),
            capacity,
            cursor: 0,
        }
    }

    /// The resident positions, ascending and merged.
    pub fn positions(&self) -> Vec<Range<u64>> {
        normalize(self.runs.iter().map(Run::positions).collect())
    }

    /// The slot holding `position`.
    pub fn slot_of(&self, position: u64) -> Option<usize> {
        let i = self.runs.partition_point(|r| r.positions().end <= position);
        let run = self.runs.get(i)?;
        run.positions()
            .contains(&position)
            .then(|| run.slot + (position - run.position) as usize)
    }

    /// `positions` (ascending, disjoint, all resident) as `(positions,
    /// first slot)` pieces in position order, each stored in consecutive
    /// slots, merged where both positions and slots continue.
    pub fn pieces(&self, positions: &[Range<u64>]) -> Vec<(Range<u64>, usize)> {
        let mut out: Vec<(Range<u64>, usize)> = Vec::new();
        for run in &self.runs {
            for piece in intersect(run.positions(), positions) {
                let slot = run.slot + (piece.start - run.position) as usize;
                match out.last_mut() {
                    Some((last, last_slot))
                        if last.end == piece.start
                            && *last_slot + (last.end - last.start) as usize == slot =>
                    {
                        last.end = piece.end
                    }
                    _ => out.push((piece, slot)),
                }
            }
        }
        out
    }

    /// The `len` free slots an append takes, as slot ranges in the order
    /// its rows fill them: cyclically from the slot after the newest
    /// resident row (`newest`, when resident) or from the cursor, skipping
    /// occupied slots. The caller guarantees `len` free slots exist.
    pub fn allocate(&self, len: usize, newest: Option<u64>) -> Vec<Range<usize>> {
        let start = newest
            .and_then(|p| self.slot_of(p))
            .map_or(self.cursor, |slot| (slot + 1) % self.capacity.max(1));
        let mut occupied: Vec<Range<u64>> = self
            .runs
            .iter()
            .map(|r| r.slot as u64..(r.slot + r.len) as u64)
            .collect();
        occupied = normalize(occupied);
        let mut out = Vec::new();
        let mut left = len;
        let order = [start..self.capacity, 0..start];
        for span in order {
            for free in subtract(span.start as u64..span.end as u64, &occupied) {
                if left == 0 {
                    return out;
                }
                let take = ((free.end - free.start) as usize).min(left);
                out.push(free.start as usize..free.start as usize + take);
                left -= take;
            }
        }
        out
    }

    /// Records fresh positions (above every resident one) in `slots`, as
    /// [`RingMap::allocate`] returned them; the cursor moves past them.
    pub fn insert(&mut self, positions: Range<u64>, slots: &[Range<usize>]) {
        let mut position = positions.start;
        for range in slots {
            let len = range.len();
            match self.runs.last_mut() {
                Some(last)
                    if last.positions().end == position && last.slots().end == range.start =>
                {
                    last.len += len
                }
                _ => self.runs.push(Run {
                    position,
                    slot: range.start,
                    len,
                }),
            }
            position += len as u64;
            self.cursor = range.end % self.capacity.max(1);
        }
    }

    /// Drops `victims` (ascending, disjoint, all resident); nothing moves.
    pub fn remove(&mut self, victims: &[Range<u64>]) {
        let mut runs = Vec::with_capacity(self.runs.len() + victims.len());
        for run in &self.runs {
            for piece in subtract(run.positions(), victims) {
                runs.push(Run {
                    position: piece.start,
                    slot: run.slot + (piece.start - run.position) as usize,
                    len: (piece.end - piece.start) as usize,
                });
            }
        }
        self.runs = runs;
    }

    /// Drops every position `>= to`; nothing moves.
    pub fn truncate(&mut self, to: u64) {
        let keep = self.runs.partition_point(|r| r.position < to);
        self.runs.truncate(keep);
        if let Some(last) = self.runs.last_mut() {
            last.len = last.len.min((to - last.position) as usize);
        }
    }

    /// Drops everything; the next append starts at slot 0.
    pub fn clear(&mut self) {
        self.runs.clear();
        self.cursor = 0;
    }

    /// Re-lays the map out for `capacity` slots, resident positions
    /// compacted in ascending order from slot 0; returns the copies that
    /// takes as `(old slot, new slot, len)`.
    pub fn relayout(&mut self, capacity: usize) -> Vec<(usize, usize, usize)> {
        let mut copies = Vec::with_capacity(self.runs.len());
        let mut next = 0;
        for run in &mut self.runs {
            copies.push((run.slot, next, run.len));
            run.slot = next;
            next += run.len;
        }
        self.capacity = capacity;
        self.cursor = next % capacity.max(1);
        // Consecutive positions now sit in consecutive slots: merge.
        let mut merged: Vec<Run> = Vec::with_capacity(self.runs.len());
        for run in self.runs.drain(..) {
            match merged.last_mut() {
                Some(last) if last.positions().end == run.position => last.len += run.len,
                _ => merged.push(run),
            }
        }
        self.runs = merged;
        copies
    }

    /// Every slot, in storage order.
    pub fn slots(&self) -> Vec<Slot> {
        let mut slots = vec![Slot::Free; self.capacity];
        for run in &self.runs {
            for (i, slot) in run.slots().enumerate() {
                slots[slot] = Slot::Hot(run.position + i as u64);
            }
        }
        slots
    }

    /// Head, tail and wrap point; `oldest` is the oldest evictable
    /// resident position, if any, and `newest` the position before `G`.
    pub fn ring(&self, oldest: Option<u64>, newest: Option<u64>) -> RingLayout {
        let tail = newest
            .and_then(|p| self.slot_of(p))
            .map_or(self.cursor, |slot| (slot + 1) % self.capacity.max(1));
        let wrap = self
            .runs
            .windows(2)
            .find(|pair| pair[1].slot < pair[0].slot)
            .map(|pair| pair[1].position);
        RingLayout {
            head: oldest.and_then(|p| self.slot_of(p)),
            tail,
            wrap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_after_eviction_wraps_once_past_the_sink() {
        // Capacity 8, sink 2: [0, 8) fills the buffer, then [2, 5) is
        // evicted and [8, 11) appended.
        let mut map = RingMap::new(8);
        let slots = map.allocate(8, None);
        assert_eq!(slots, vec![0..8]);
        map.insert(0..8, &slots);
        map.remove(std::slice::from_ref(&(2..5)));
        let slots = map.allocate(3, Some(7));
        assert_eq!(slots, vec![2..5]);
        map.insert(8..11, &slots);
        assert_eq!(map.slot_of(10), Some(4));
        assert_eq!(map.positions(), vec![0..2, 5..11]);
        assert_eq!(
            map.pieces(&[0..2, 5..11]),
            vec![(0..2, 0), (5..8, 5), (8..11, 2)]
        );
        let ring = map.ring(Some(5), Some(10));
        assert_eq!(ring.tail, 5);
        assert_eq!(ring.head, Some(5));
        assert_eq!(ring.wrap, Some(8));
        // Evict [5, 7) and append three: slots 5, 6 then nothing free
        // above 7 until the sink, so the ring wraps to... slot 7 is
        // occupied by position 7; the free ones are 5 and 6 only.
        map.remove(std::slice::from_ref(&(5..7)));
        assert_eq!(map.allocate(2, Some(10)), vec![5..7]);
        map.truncate(9);
        assert_eq!(map.positions(), vec![0..2, 7..9]);
        let copies = map.relayout(16);
        assert_eq!(copies, vec![(0, 0, 2), (7, 2, 1), (2, 3, 1)]);
        assert_eq!(map.slot_of(8), Some(3));
        assert_eq!(map.allocate(2, Some(8)), vec![4..6]);
    }
}
