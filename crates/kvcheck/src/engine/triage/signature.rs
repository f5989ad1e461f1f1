//! The signature a divergence is grouped by in triage: what disagreed, on
//! which kind of op, and the shape of the first difference.
//!
//! Like the stack hash of crash triage, a signature is coarse on purpose:
//! two divergences with the same cause should get the same signature
//! whatever the lengths, positions and payloads of their traces, and two
//! causes that look different to a person reading the report should not.
//! The shape is read from the divergence's own report and its trace (the
//! model is replayed to tell a sink position from a pinned or a rolling
//! one), so every engine and every subject, in-process or `exec:`, is
//! grouped the same way.

use std::fmt;

use kvmodel::{Config, Model, Op, Outcome};

use crate::check::divergence::{Divergence, DivergenceKind, RowSource};

use crate::report::findings::TriageSignature;

impl TriageSignature {
    /// The signature of `divergence`.
    pub fn of(divergence: &Divergence) -> TriageSignature {
        TriageSignature {
            kind: divergence.kind.name().to_string(),
            variant: match divergence.trace.config.variant {
                kvmodel::Variant::Dense => "dense",
                kvmodel::Variant::Packed => "packed",
            }
            .to_string(),
            op: divergence.op.name().to_string(),
            shape: shape(divergence),
        }
    }
}

impl fmt::Display for TriageSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} {}", self.kind, self.variant, self.op)?;
        if !self.shape.is_empty() {
            write!(f, ": {}", self.shape)?;
        }
        Ok(())
    }
}

fn shape(d: &Divergence) -> String {
    match d.kind {
        DivergenceKind::Outcome | DivergenceKind::Exception => {
            format!("{} → {}", expected_outcome(d), outcome_class(&d.actual))
        }
        DivergenceKind::GlobalEnd => match (number_after(&d.expected), number_after(&d.actual)) {
            (Some(e), Some(a)) if a > e => "ahead".to_string(),
            (Some(e), Some(a)) if a < e => "behind".to_string(),
            _ => String::new(),
        },
        DivergenceKind::Visible => visible_shape(d),
        DivergenceKind::Shape => shape_axes(&d.actual),
        DivergenceKind::Values => d.rows.first().map(row_shape).unwrap_or_default(),
        DivergenceKind::Probe => probe_shape(d),
        // Crashes, timeouts, protocol and backend errors, aliasing, and
        // kinds added later: the kind and the op say it all.
        _ => String::new(),
    }
}

/// The model's outcome class, with the rule that refused where one error
/// kind covers several rules that implementations get wrong separately.
fn expected_outcome(d: &Divergence) -> String {
    let class = outcome_class(&d.expected);
    let expected = d.trace.expect.as_ref().and_then(|e| e.get(d.step)).cloned();
    let rule = match (&expected, &d.op) {
        (Some(Outcome::Err(kind)), Op::Write(w)) => match kind.name() {
            "head_range" => w.heads.map(|[first, count]| {
                if count == 0 {
                    "zero heads"
                } else if first < 0 {
                    "negative start"
                } else if count < 0 {
                    "negative count"
                } else if first >= d.trace.config.heads as i64 {
                    "start past the last head"
                } else {
                    "end past the last head"
                }
            }),
            "non_sequential" if w.len == 0 => Some("zero length"),
            _ => None,
        },
        _ => None,
    };
    match rule {
        Some(rule) => format!("{class} ({rule})"),
        None => class,
    }
}

/// `ok`, `err KIND` or `exception TYPE` from a side of a report.
fn outcome_class(text: &str) -> String {
    let mut words = text.split_whitespace();
    match words.next() {
        Some("ok") => "ok".to_string(),
        Some("err") => format!("err {}", words.next().unwrap_or("")),
        Some("exception") => format!(
            "exception {}",
            words.next().unwrap_or("").trim_end_matches(':')
        ),
        _ if text.starts_with("unchanged after the refusal") => "ok".to_string(),
        _ => text.split(':').next().unwrap_or("").trim().to_string(),
    }
}

/// The first number after `G=` or `global end ` in a report side.
fn number_after(text: &str) -> Option<u64> {
    let rest = text
        .split_once("G=")
        .or_else(|| text.split_once("global end "))?
        .1;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Positions of `a..b` ranges after `visible ` in a report side.
fn visible_positions(text: &str) -> Vec<u64> {
    let Some((_, rest)) = text.split_once("visible ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for range in rest.split_whitespace() {
        let Some((lo, hi)) = range.split_once("..") else {
            break;
        };
        match (lo.parse::<u64>(), hi.parse::<u64>()) {
            (Ok(lo), Ok(hi)) => out.extend(lo..hi),
            _ => break,
        }
    }
    out
}

/// The model after the divergent step (the trace is the failing prefix).
fn model_after(config: &Config, ops: &[Op]) -> Option<Model> {
    let mut model = Model::new(config).ok()?;
    for (i, op) in ops.iter().enumerate() {
        let _ = model.apply(i as u64, op);
    }
    Some(model)
}

/// `missing ROLE` or `extra ROLE` for the lowest position the two views
/// disagree on.
fn visible_shape(d: &Divergence) -> String {
    let expected = match d.trace.expect.as_ref().and_then(|e| e.get(d.step)) {
        Some(Outcome::Ok(effect)) => effect.visible.clone().unwrap_or_default(),
        _ => visible_positions(&d.expected),
    };
    let actual = visible_positions(&d.actual);
    let first_missing = expected.iter().find(|p| !actual.contains(p)).copied();
    let first_extra = actual.iter().find(|p| !expected.contains(p)).copied();
    let model = model_after(&d.trace.config, &d.trace.ops);
    let chunk = match &d.op {
        Op::Write(w) if w.start >= 0 && w.len > 0 => w.start as u64..(w.start + w.len) as u64,
        _ => 0..0,
    };
    let role = |p: u64| -> &'static str {
        let Some(m) = &model else { return "position" };
        if m.pin_range().is_some_and(|pin| pin.contains(&p)) {
            "pin"
        } else if m.protected().contains(&p) {
            "sink"
        } else if chunk.contains(&p) {
            "own chunk"
        } else if p >= m.global_end() {
            "unwritten"
        } else if m.writers(p).is_none() {
            "evicted"
        } else {
            "rolling"
        }
    };
    let shown = |word: &str, p: u64| format!("{word} {}", role(p));
    match (first_missing, first_extra) {
        (Some(m), Some(e)) if e < m => shown("extra", e),
        (Some(m), _) => shown("missing", m),
        (None, Some(e)) => shown("extra", e),
        (None, None) if actual.len() > expected.len() => "duplicated".to_string(),
        (None, None) => "order".to_string(),
    }
}

/// The axes that differ in `K has shape [..] DT, expected [..] DT` (or
/// `K segments [..] declare [..] and hold N rows, expected [..] DT`): the
/// last two bracketed lists are the found and the expected shape.
fn shape_axes(actual: &str) -> String {
    let lists: Vec<Vec<&str>> = actual
        .split('[')
        .filter_map(|s| s.split_once(']'))
        .map(|(inside, _)| inside.split(',').map(str::trim).collect())
        .collect();
    let [.., found, wanted] = lists.as_slice() else {
        return String::new();
    };
    if found.len() != wanted.len() {
        return "rank".to_string();
    }
    const AXES: [&str; 4] = ["batch", "tokens", "heads", "head_dim"];
    let mut axes: Vec<&str> = found
        .iter()
        .zip(wanted)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| AXES.get(i).copied().unwrap_or("axis"))
        .collect();
    let dtypes: Vec<&str> = actual
        .split(']')
        .skip(1)
        .filter_map(|s| s.split_whitespace().next())
        .map(|s| s.trim_end_matches(','))
        .collect();
    if dtypes.len() == 2 && !dtypes[0].eq_ignore_ascii_case(dtypes[1]) {
        axes.push("dtype");
    }
    axes.join(", ")
}

/// What the first wrong row holds, relative to what it should hold.
fn row_shape(row: &crate::check::divergence::RowMismatch) -> String {
    let found = match (&row.expected, &row.found) {
        (_, RowSource::Zeros) => "zeros",
        (_, RowSource::Unknown) => "values written by no op",
        (RowSource::Payload { id: e, cold: ec }, RowSource::Payload { id: f, cold: fc }) => {
            if f.position != e.position {
                "another position's write"
            } else if f.head != e.head {
                "another head's write"
            } else if f.batch != e.batch {
                "another batch row's write"
            } else if f.writer < e.writer {
                "an older write"
            } else if f.writer > e.writer {
                "a later write"
            } else if fc != ec {
                if *fc {
                    "its write, cold"
                } else {
                    "its write, hot"
                }
            } else {
                "its write"
            }
        }
        (_, RowSource::Payload { .. }) => "a write",
    };
    let expected = match &row.expected {
        RowSource::Zeros => "zeros",
        RowSource::Unknown => "unknown values",
        RowSource::Payload { cold: true, .. } => "its cold write",
        RowSource::Payload { .. } => "its write",
    };
    format!("{found} where {expected}")
}

/// What the read-only probe after a refusal found changed.
fn probe_shape(d: &Divergence) -> String {
    if d.actual.contains("probe failed") {
        return "probe refused".to_string();
    }
    if let Some(row) = d.rows.first() {
        return format!("values: {}", row_shape(row));
    }
    match (number_after(&d.expected), number_after(&d.actual)) {
        (Some(e), Some(a)) if e != a => "global end moved".to_string(),
        _ if d.actual.contains("visible") => "visible changed".to_string(),
        _ => outcome_class(d.actual.trim_start_matches("probe shows ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_classes_keep_the_kind_and_the_exception_type() {
        assert_eq!(outcome_class("ok G=3 visible 0..3"), "ok");
        assert_eq!(outcome_class("err head_range (bad)"), "err head_range");
        assert_eq!(
            outcome_class("exception RuntimeError: Invalid write range"),
            "exception RuntimeError"
        );
    }

    #[test]
    fn visible_ranges_and_global_ends_parse() {
        assert_eq!(visible_positions("ok G=7 visible 0..1 3..5"), vec![0, 3, 4]);
        assert_eq!(visible_positions("ok G=0"), Vec::<u64>::new());
        assert_eq!(number_after("ok G=12 visible 0..2"), Some(12));
        assert_eq!(number_after("global end 4"), Some(4));
    }

    #[test]
    fn shape_names_the_axes_that_differ() {
        assert_eq!(
            shape_axes("K has shape [1, 1, 2, 1] F32, expected [1, 1, 1, 1] F32"),
            "heads"
        );
        assert_eq!(
            shape_axes("V has shape [1, 3, 2, 1] F16, expected [1, 2, 2, 1] F32"),
            "tokens, dtype"
        );
        assert_eq!(
            shape_axes("K segments [[1, 1, 2, 1] F32] declare [1, 1, 2, 1] and hold 1 rows, expected [1, 1, 1, 1] F32"),
            "heads"
        );
    }
}
