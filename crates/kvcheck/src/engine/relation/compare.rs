//! Two runs compared on what a caller sees, pair of steps by pair of steps.

use std::ops::Range;

use kvmodel::Config;

use super::transform::{Pair, Part};
use crate::check::record::{Seen, Transcript, ViewBytes};

/// What is compared beyond outcomes, global ends and visible positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compared {
    /// View bytes (both subjects return values).
    pub values: bool,
    /// Refusal kinds (both subjects give docs/contract.md kinds; otherwise every
    /// refusal agrees with every refusal).
    pub exact: bool,
}

/// The first pair of steps whose observations differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Index of the step in the original plan.
    pub original: usize,
    /// Index of the step in the transformed plan.
    pub transformed: usize,
    /// The original run's side, in words.
    pub expected: String,
    /// The transformed run's side, in words.
    pub actual: String,
}

/// The first pair (in the order given) whose observations differ; pairs
/// past the end of either transcript are not compared.
pub fn first_mismatch(
    config: &Config,
    original: &Transcript,
    transformed: &Transcript,
    pairs: &[Pair],
    compared: Compared,
) -> Option<Mismatch> {
    pairs.iter().find_map(|pair| {
        let a = original.seen.get(pair.original)?;
        let b = transformed.seen.get(pair.transformed)?;
        differ(config, a, b, &pair.part, compared).map(|(expected, actual)| Mismatch {
            original: pair.original,
            transformed: pair.transformed,
            expected,
            actual,
        })
    })
}

fn differ(
    config: &Config,
    a: &Seen,
    b: &Seen,
    part: &Part,
    compared: Compared,
) -> Option<(String, String)> {
    let apart = || Some((a.describe(), b.describe()));
    match (a, b) {
        (Seen::Refused { kind: x, .. }, Seen::Refused { kind: y, .. }) => {
            (compared.exact && x != y).then(|| (a.describe(), b.describe()))
        }
        (Seen::Ok { global_end: x, .. }, Seen::Ok { global_end: y, .. }) if x != y => apart(),
        (Seen::Ok { view: x, .. }, Seen::Ok { view: y, .. }) => match (x, y) {
            (None, None) => None,
            (Some(x), Some(y)) => views_differ(config, x, y, part, compared.values),
            _ => apart(),
        },
        _ => apart(),
    }
}

fn positions(view: &ViewBytes) -> String {
    format!(
        "ok G={} visible {}",
        view.global_end,
        kvmodel::format_ranges(view.positions.iter().copied())
    )
}

fn views_differ(
    config: &Config,
    x: &ViewBytes,
    y: &ViewBytes,
    part: &Part,
    values: bool,
) -> Option<(String, String)> {
    if x.global_end != y.global_end || x.positions != y.positions {
        return Some((positions(x), positions(y)));
    }
    let heads = match part {
        Part::Heads(heads) => heads.clone(),
        _ => x.heads.clone(),
    };
    let covers = |view: &ViewBytes| view.heads.start <= heads.start && heads.end <= view.heads.end;
    if !covers(x) || !covers(y) || (*part != Part::Heads(heads.clone()) && x.heads != y.heads) {
        return Some((
            format!("{} heads {:?}", positions(x), x.heads),
            format!("{} heads {:?}", positions(y), y.heads),
        ));
    }
    if !values {
        return None;
    }
    let width = config.head_dim * config.dtype.size_bytes();
    let len = x.positions.len();
    // The heads a view's bytes hold: those it reports, or every head when
    // that is their size (a library that returns every head of a
    // head-range write; the heads compared are among them either way).
    let held = |view: &ViewBytes, bytes: &[u8]| {
        let rows = config.batch * len * width;
        if bytes.len() == rows * view.heads.len() {
            Some(view.heads.clone())
        } else if bytes.len() == rows * config.heads {
            Some(0..config.heads)
        } else {
            None
        }
    };
    for (name, xs, ys) in [("K", &x.k, &y.k), ("V", &x.v, &y.v)] {
        let inside = |held: &Range<usize>| held.start <= heads.start && heads.end <= held.end;
        let picked = match (held(x, xs), held(y, ys)) {
            (Some(xh), Some(yh)) if inside(&xh) && inside(&yh) => Some((xh, yh)),
            _ => None,
        };
        let Some((xh, yh)) = picked else {
            // Not a shape the compared rows can be picked out of (a write
            // the contract refuses, answered with other heads): the runs
            // agree if every byte does, and on a part of the bytes (M2,
            // M3, M4) nothing can be said about which differ.
            if xs == ys || *part != Part::Whole {
                continue;
            }
            return Some((
                format!("{} with {name} of {} bytes", positions(x), xs.len()),
                format!("{} with {name} of {} bytes", positions(y), ys.len()),
            ));
        };
        let row = |held: &Range<usize>, bytes: &'_ [u8], batch: usize, i: usize, head: usize| {
            let at = ((batch * len + i) * held.len() + head - held.start) * width;
            bytes[at..at + width].to_vec()
        };
        for batch in 0..config.batch {
            if *part == Part::ExceptBatch(batch) {
                continue;
            }
            for (i, position) in x.positions.iter().enumerate() {
                for head in heads.clone() {
                    if *part == Part::ExceptHead(head) {
                        continue;
                    }
                    if row(&xh, xs, batch, i, head) != row(&yh, ys, batch, i, head) {
                        let place = format!(
                            "{name} row {i} (position {position}, head {head}, batch {batch})"
                        );
                        return Some((
                            format!("{}, {place}", positions(x)),
                            format!("{}, but {place} holds other bytes", positions(y)),
                        ));
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(k: Vec<u8>) -> Seen {
        Seen::Ok {
            global_end: 1,
            view: Some(ViewBytes {
                global_end: 1,
                positions: vec![0],
                heads: 0..1,
                k: k.clone(),
                v: k,
            }),
        }
    }

    /// A view whose bytes are not the shape its request names (a library
    /// answering a zero-head write with zero heads) agrees with the same
    /// view of the other run, and differs from another one.
    #[test]
    fn views_of_another_shape_are_compared_as_bytes() {
        let config = Config::dense(1);
        let compared = Compared {
            values: true,
            exact: true,
        };
        let empty = seen(Vec::new());
        assert_eq!(
            differ(&config, &empty, &empty, &Part::Whole, compared),
            None
        );
        let full = seen(vec![0, 0, 128, 63]);
        assert!(differ(&config, &empty, &full, &Part::Whole, compared).is_some());
        assert_eq!(differ(&config, &full, &full, &Part::Whole, compared), None);
    }
}
