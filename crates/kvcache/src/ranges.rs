//! Sets of global positions as ascending, disjoint `Range<u64>` lists: the
//! vocabulary in which the caches plan every operation before they touch a
//! byte (residency, protection, victims, the visible window).

use std::ops::Range;

/// Consecutive positions `[position, position + len)` stored in consecutive
/// slots `[slot, slot + len)`: the unit of both caches' slot maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// First position of the run.
    pub position: u64,
    /// Slot of `position`.
    pub slot: usize,
    /// Number of positions (never 0 inside a slot map).
    pub len: usize,
}

impl Run {
    /// The positions of the run.
    pub fn positions(&self) -> Range<u64> {
        self.position..self.position + self.len as u64
    }

    /// The slots of the run.
    pub fn slots(&self) -> Range<usize> {
        self.slot..self.slot + self.len
    }
}

/// `range` minus `holes` (ascending, disjoint): the pieces left, ascending.
pub fn subtract(range: Range<u64>, holes: &[Range<u64>]) -> impl Iterator<Item = Range<u64>> + '_ {
    let mut next = range.start;
    let mut holes = holes.iter();
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        for hole in holes.by_ref() {
            if hole.end <= next || hole.start >= hole.end {
                continue;
            }
            if hole.start >= range.end {
                break;
            }
            let piece = next..hole.start.max(next);
            next = hole.end;
            if piece.start < piece.end {
                return Some(piece);
            }
            if next >= range.end {
                done = true;
                return None;
            }
        }
        done = true;
        (next < range.end).then_some(next..range.end)
    })
}

/// `range` intersected with `sets` (ascending, disjoint): ascending pieces.
pub fn intersect<'a>(
    range: Range<u64>,
    sets: &'a [Range<u64>],
) -> impl Iterator<Item = Range<u64>> + 'a {
    let from = sets.partition_point(|s| s.end <= range.start);
    sets[from..]
        .iter()
        .take_while(move |s| s.start < range.end)
        .map(move |s| s.start.max(range.start)..s.end.min(range.end))
        .filter(|p| p.start < p.end)
}

/// Sorts and merges ranges into ascending, disjoint, non-empty ones.
pub fn normalize(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Total length of ranges.
pub fn count(ranges: &[Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

/// The first position of `range` missing from `set` (ascending, disjoint),
/// if any.
pub fn first_missing(set: &[Range<u64>], range: Range<u64>) -> Option<u64> {
    let mut next = range.start;
    let from = set.partition_point(|r| r.end <= next);
    for piece in &set[from..] {
        if next >= range.end {
            return None;
        }
        if piece.start > next {
            return Some(next);
        }
        next = next.max(piece.end);
    }
    (next < range.end).then_some(next)
}

/// `set` minus every range of `holes` (both ascending, disjoint).
pub fn remove_all(set: &[Range<u64>], holes: &[Range<u64>]) -> Vec<Range<u64>> {
    set.iter()
        .flat_map(|r| subtract(r.clone(), holes).collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtract_leaves_the_gaps() {
        let holes = [2..4, 6..7, 20..30];
        let pieces: Vec<_> = subtract(0..10, &holes).collect();
        assert_eq!(pieces, vec![0..2, 4..6, 7..10]);
        let pieces: Vec<_> = subtract(3..6, &holes).collect();
        assert_eq!(pieces, vec![4..6]);
        let pieces: Vec<_> = subtract(2..4, &holes).collect();
        assert!(pieces.is_empty());
        let pieces: Vec<_> = subtract(0..5, &[]).collect();
        assert_eq!(pieces, vec![0..5]);
    }

    #[test]
    fn first_missing_finds_gaps() {
        let set = [0..3, 5..8];
        assert_eq!(first_missing(&set, 0..3), None);
        assert_eq!(first_missing(&set, 1..6), Some(3));
        assert_eq!(first_missing(&set, 5..9), Some(8));
        assert_eq!(first_missing(&set, 4..4), None);
        assert_eq!(
            remove_all(&set, std::slice::from_ref(&(2..6))),
            vec![0..2, 6..8]
        );
    }
}
