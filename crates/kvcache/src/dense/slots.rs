//! The slot map of [`DenseCache`](super::DenseCache): which buffer slot holds
//! which global position.
//!
//! Resident positions are kept **compacted and ascending**: they occupy
//! slots `[0, |R|)` and a larger position always sits in a larger slot. The
//! map is therefore a short list of [`Run`]s (consecutive positions in
//! consecutive slots), sorted by position and by slot at once. Every query
//! and update is O(runs), never O(capacity).

use std::ops::Range;

use crate::ranges::{intersect, subtract, Run};

/// A move of `len` rows from slot `from` down to slot `to` (`to < from`).
/// A list of moves in ascending order can be executed front to back with
/// memmove: each destination ends at or before the next source starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

/// The explicit position → slot map (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotMap {
    runs: Vec<Run>,
    resident: usize,
}

impl SlotMap {
    /// `|R|`, which is also the first free slot.
    pub fn resident(&self) -> usize {
        self.resident
    }

    /// The runs, ascending.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The slot holding `position`.
    pub fn slot_of(&self, position: u64) -> Option<usize> {
        let i = self.runs.partition_point(|r| r.positions().end <= position);
        let run = self.runs.get(i)?;
        run.positions()
            .contains(&position)
            .then(|| run.slot + (position - run.position) as usize)
    }

    /// Appends `positions` (all above every resident position) at the first
    /// free slot.
    pub fn push(&mut self, positions: Range<u64>) {
        let len = (positions.end - positions.start) as usize;
        if len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(last) if last.positions().end == positions.start => last.len += len,
            _ => self.runs.push(Run {
                position: positions.start,
                slot: self.resident,
                len,
            }),
        }
        self.resident += len;
    }

    /// Drops every position `>= to`. Their slots sit at the top (ascending
    /// order), so nothing moves.
    pub fn truncate(&mut self, to: u64) {
        let keep = self.runs.partition_point(|r| r.position < to);
        self.runs.truncate(keep);
        if let Some(last) = self.runs.last_mut() {
            last.len = last.len.min((to - last.position) as usize);
        }
        self.resident = self.runs.last().map_or(0, |r| r.slot + r.len);
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.runs.clear();
        self.resident = 0;
    }

    /// Removes `victims` (ascending, disjoint, all resident) and compacts the
    /// survivors down; returns the row moves that compaction needs, in the
    /// order they must run.
    pub fn remove(&mut self, victims: &[Range<u64>]) -> Vec<Move> {
        let mut moves = Vec::new();
        let mut runs = Vec::with_capacity(self.runs.len() + victims.len());
        let mut cursor = 0usize;
        for run in &self.runs {
            for piece in subtract(run.positions(), victims) {
                let len = (piece.end - piece.start) as usize;
                let from = run.slot + (piece.start - run.position) as usize;
                if from != cursor {
                    match moves.last_mut() {
                        Some(Move {
                            from: f,
                            to,
                            len: l,
                        }) if *f + *l == from && *to + *l == cursor => *l += len,
                        _ => moves.push(Move {
                            from,
                            to: cursor,
                            len,
                        }),
                    }
                }
                match runs.last_mut() {
                    Some(Run {
                        position, len: l, ..
                    }) if *position + *l as u64 == piece.start => *l += len,
                    _ => runs.push(Run {
                        position: piece.start,
                        slot: cursor,
                        len,
                    }),
                }
                cursor += len;
            }
        }
        self.runs = runs;
        self.resident = cursor;
        moves
    }

    /// The slots of `positions` (ascending, disjoint, all resident), merged
    /// into the fewest ascending slot ranges.
    pub fn slot_ranges(&self, positions: &[Range<u64>]) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for run in &self.runs {
            for piece in intersect(run.positions(), positions) {
                let start = run.slot + (piece.start - run.position) as usize;
                let end = start + (piece.end - piece.start) as usize;
                match out.last_mut() {
                    Some(last) if last.end == start => last.end = end,
                    _ => out.push(start..end),
                }
            }
        }
        out
    }

    /// The position stored in each slot `[0, |R|)`, in slot order.
    pub fn positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().flat_map(Run::positions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_compacts_with_ordered_moves() {
        let mut map = SlotMap::default();
        map.push(0..10);
        let moves = map.remove(&[2..4, 6..7]);
        assert_eq!(
            moves,
            vec![
                Move {
                    from: 4,
                    to: 2,
                    len: 2
                },
                Move {
                    from: 7,
                    to: 4,
                    len: 3
                }
            ]
        );
        assert_eq!(
            map.positions().collect::<Vec<_>>(),
            vec![0, 1, 4, 5, 7, 8, 9]
        );
        assert_eq!(map.slot_of(7), Some(4));
        map.truncate(5);
        assert_eq!(map.resident(), 3);
        assert_eq!(map.slot_ranges(&[0..1, 4..5]), vec![0..1, 2..3]);
    }

    /// Survivors are merged into one move when their sources and
    /// destinations are both adjacent, even across runs: the merged move
    /// covers the rows of both pieces.
    #[test]
    fn remove_merges_adjacent_moves_across_runs() {
        let mut map = SlotMap::default();
        map.push(0..8);
        map.remove(std::slice::from_ref(&(2..5)));
        assert_eq!(map.runs().len(), 2);
        let moves = map.remove(std::slice::from_ref(&(0..1)));
        assert_eq!(
            moves,
            vec![Move {
                from: 1,
                to: 0,
                len: 4
            }]
        );
        assert_eq!(map.positions().collect::<Vec<_>>(), vec![1, 5, 6, 7]);
        assert_eq!(map.resident(), 4);
    }
}
