//! Two runs side by side: every step of each, corresponding steps on one
//! line, and the first step where they part.

use std::fmt::Write as _;

use super::finding::{Finding, Side};
use crate::check::divergence::describe_config;

/// Width of one run's column.
const COLUMN: usize = 52;

fn cell(side: &Side, index: usize) -> String {
    let op = side.plan.steps[index].op.to_string();
    let seen = side
        .run
        .seen
        .get(index)
        .map(|s| s.describe())
        .or_else(|| {
            (index == side.run.seen.len())
                .then(|| side.run.failure.as_ref().map(|(kind, _)| format!("{kind}")))
                .flatten()
        })
        .unwrap_or_else(|| "not run".to_string());
    let text = format!("{index:>3} {op:<18} {seen}");
    if text.chars().count() > COLUMN {
        let cut: String = text.chars().take(COLUMN - 1).collect();
        format!("{cut}…")
    } else {
        text
    }
}

/// The side-by-side walk of a finding: a header naming both runs, one line
/// per step (corresponding steps together, a step without counterpart
/// alone), `✗` on the first pair that differs, then the divergence.
pub fn render(finding: &Finding) -> String {
    let (left, right) = (&finding.left, &finding.right);
    let mut out = String::new();
    let d = &finding.divergence;
    let _ = writeln!(out, "──── kvcheck: {} ────", d.summary());
    let _ = writeln!(out, "config:   {}", describe_config(&left.plan.config));
    if right.plan.config != left.plan.config {
        let _ = writeln!(
            out,
            "          right side: {}",
            describe_config(&right.plan.config)
        );
    }
    let _ = writeln!(out, "left:     {}", left.title);
    let _ = writeln!(out, "right:    {}", right.title);
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<COLUMN$} │ {}", left.title, right.title);
    let parted = finding
        .mismatch
        .as_ref()
        .map(|m| (m.original, m.transformed));
    let (mut l, mut r) = (0, 0);
    let line = |out: &mut String, a: Option<usize>, b: Option<usize>| {
        let mark = match (a, b) {
            (Some(a), Some(b)) if parted == Some((a, b)) => "✗",
            _ => " ",
        };
        let a = a.map(|i| cell(left, i)).unwrap_or_default();
        let b = b.map(|i| cell(right, i)).unwrap_or_default();
        let _ = writeln!(out, "{mark} {a:<COLUMN$} │ {b}");
    };
    for pair in &finding.pairs {
        while l < pair.original {
            line(&mut out, Some(l), None);
            l += 1;
        }
        while r < pair.transformed {
            line(&mut out, None, Some(r));
            r += 1;
        }
        line(&mut out, Some(pair.original), Some(pair.transformed));
        l = l.max(pair.original + 1);
        r = r.max(pair.transformed + 1);
    }
    for i in l..left.plan.steps.len() {
        line(&mut out, Some(i), None);
    }
    for i in r..right.plan.steps.len() {
        line(&mut out, None, Some(i));
    }
    let _ = writeln!(out);
    match &finding.mismatch {
        Some(m) => {
            let _ = writeln!(
                out,
                "first step where they part: left op {} / right op {}",
                m.original, m.transformed
            );
        }
        None => {
            let _ = writeln!(out, "a run ended early: the subject misbehaved");
        }
    }
    let _ = writeln!(out, "left:     {}", d.expected);
    let _ = writeln!(out, "right:    {}", d.actual);
    out
}
