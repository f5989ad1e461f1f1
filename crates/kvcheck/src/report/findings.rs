//! Triage findings as the reports carry them: the signature a group of
//! divergences shares, the finding of each group, their merge across
//! shards and their table. Grouping divergences is the triage engine's
//! (`engine::triage`); this is only its data.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// What a group of divergences has in common.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TriageSignature {
    /// The divergence kind (`DivergenceKind::name`).
    pub kind: String,
    /// The variant of the trace's config (`dense`, `packed`): two caches,
    /// two code paths.
    pub variant: String,
    /// The op at the divergence (`Op::name`).
    pub op: String,
    /// The shape of the first difference, kind-dependent: for an outcome
    /// `err non_sequential → ok` (with the rule of the refusal where it has
    /// several: `err head_range (zero heads) → ok`), for visible positions the role of the
    /// first position that differs (`missing sink`, `extra evicted`), for
    /// values what the first wrong row holds instead of what
    /// (`an older write where its own write`), for a shape the axes that
    /// differ; the exception type of an `exec:` subject is part of it.
    pub shape: String,
}

/// A finding as the reports carry it: the signature, how often, where
/// first, and the traces of its representative.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FindingReport {
    /// What the group has in common.
    pub signature: TriageSignature,
    /// Divergences with this signature.
    pub count: u64,
    /// Order key of the representative (what a merge compares).
    pub key: u64,
    /// Where the representative was met, in words.
    pub first: String,
    /// The representative's one-line summary.
    pub summary: String,
    /// Its length in ops (the failing prefix).
    pub ops: usize,
    /// The minimized trace's length, when minimization succeeded.
    pub minimized_ops: Option<usize>,
    /// Where the representative's trace, as met, was saved: only when it
    /// did not minimize (otherwise only the minimized trace is saved).
    pub trace: Option<String>,
    /// Where the minimized trace was saved.
    pub minimized_trace: Option<String>,
}

/// Adds the findings of another shard: counts add up, the representative
/// with the lower key wins (the one an unsharded run keeps), and the
/// result is in key order.
pub fn merge_findings(into: &mut Vec<FindingReport>, other: Vec<FindingReport>) {
    for f in other {
        match into.iter_mut().find(|g| g.signature == f.signature) {
            Some(g) => {
                let count = g.count + f.count;
                if f.key < g.key {
                    *g = f;
                }
                g.count = count;
            }
            None => into.push(f),
        }
    }
    into.sort_by_key(|f| f.key);
}

/// The table of distinct findings: count, signature, first case, length
/// and minimized length; then the minimized traces.
pub fn findings_table(findings: &[FindingReport]) -> String {
    let mut out = String::new();
    let total: u64 = findings.iter().map(|f| f.count).sum();
    let _ = writeln!(
        out,
        "{} distinct findings in {total} divergences:",
        findings.len()
    );
    if findings.is_empty() {
        return out;
    }
    let shape = |f: &FindingReport| {
        if f.signature.shape.is_empty() {
            "-".to_string()
        } else {
            f.signature.shape.clone()
        }
    };
    let width = |header: &str, cell: &dyn Fn(&FindingReport) -> String| {
        findings
            .iter()
            .map(|f| cell(f).chars().count())
            .chain([header.len()])
            .max()
            .unwrap_or(0)
    };
    let ws = width("first difference", &shape);
    let wf = width("first case", &|f| f.first.clone());
    let _ = writeln!(
        out,
        "{:>3} {:>6}  {:<10} {:<7} {:<6} {:<ws$}  {:<wf$} {:>4} {:>9}",
        "#", "count", "kind", "variant", "op", "first difference", "first case", "ops", "minimized"
    );
    for (i, f) in findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:>3} {:>6}  {:<10} {:<7} {:<6} {:<ws$}  {:<wf$} {:>4} {:>9}",
            i + 1,
            f.count,
            f.signature.kind,
            f.signature.variant,
            f.signature.op,
            shape(f),
            f.first,
            f.ops,
            f.minimized_ops.map_or("-".to_string(), |o| o.to_string())
        );
    }
    let _ = writeln!(out, "minimized traces:");
    for (i, f) in findings.iter().enumerate() {
        let path = f
            .minimized_trace
            .as_deref()
            .or(f.trace.as_deref())
            .unwrap_or("(not saved)");
        let _ = writeln!(out, "{:>3}  {path}", i + 1);
    }
    out
}
