//! The paged cache's zoo against the prefix judges: for every planted
//! fault and each judge (the model, the invariants of §17), whether a
//! campaign catches it, after how many cases, and how short its minimized
//! trace is; and the shipped cache under both judges, the control row,
//! where any failure is a false alarm.

use std::collections::BTreeSet;

use kvcache::fault::PrefixFault;

use super::campaign::{self, PagedSubject, PrefixRunSettings};
use super::drive::Judge;

/// One cell of the table: a subject under a judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerCell {
    /// The fault (`None`: the control row, the shipped cache).
    pub fault: Option<PrefixFault>,
    /// `model` or `invariants`.
    pub judge: &'static str,
    /// Cases run, the failing one included.
    pub cases: u64,
    /// Ops judged.
    pub ops: u64,
    /// Whether a case failed.
    pub caught: bool,
    /// The minimized trace's length, when one failed and was minimized.
    pub minimized: Option<usize>,
    /// The (minimized) failure: its kind, its op and what was expected.
    pub what: Option<String>,
}

/// Runs every fault and the control row under both judges, `cases` cases
/// each from `seed`.
pub fn measure(cases: u64, seed: u64) -> Vec<PowerCell> {
    let subjects = PrefixFault::ALL
        .into_iter()
        .map(Some)
        .chain(std::iter::once(None));
    let mut cells = Vec::new();
    for fault in subjects {
        for (name, judge) in [
            ("model", Judge::Model),
            ("invariants", Judge::Invariants(BTreeSet::new())),
        ] {
            let settings = PrefixRunSettings {
                seed,
                cases: Some(cases),
                judge: Some(judge),
                ..PrefixRunSettings::default()
            };
            let report = campaign::run(&mut PagedSubject { fault }, &settings, &mut |_| {});
            let failure = report.failure.as_ref();
            cells.push(PowerCell {
                fault,
                judge: name,
                cases: report.cases,
                ops: report.ops,
                caught: failure.is_some(),
                minimized: failure.and_then(|f| f.minimized.as_ref().ok().map(|m| m.after)),
                what: failure.map(|f| {
                    let d = f
                        .minimized
                        .as_ref()
                        .map_or(&f.divergence, |m| &m.divergence);
                    format!("{} at {}: {}", d.kind, d.op, d.expected)
                }),
            });
        }
    }
    cells
}
