//! Triage: every divergence of a campaign, grouped by signature, one
//! minimized representative per group.
//!
//! An engine normally stops at its first divergence. A library with a
//! contract of its own diverges in many ways at once, and the first one
//! hides the rest. In triage mode (`--keep-going` on `run` and `explore`,
//! `from-fuzz --keep-going` over fuzz inputs) the engine records every
//! divergence into a [`Triage`], which keeps a count per
//! [`TriageSignature`] and the representative met first (lowest case index
//! for `run`, breadth-first order for `explore`: the same for any number of
//! workers). [`settle`] then minimizes each representative keeping its
//! signature and saves the minimized trace; the findings become
//! [`FindingReport`]s, which the `--json` reports carry and
//! [`merge_findings`](crate::report::findings::merge_findings) combines across shards, the way crash triage
//! deduplicates a fuzzer's crashes.

mod signature;

use std::path::Path;

use crate::report::findings::{FindingReport, TriageSignature};

use crate::check::divergence::Divergence;
use crate::engine::minimize::minimize_keeping;
use crate::engine::oracle::Oracle;
use crate::subject::SubjectSpec;

/// One group of divergences with the same signature.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What the group has in common.
    pub signature: TriageSignature,
    /// Divergences recorded with this signature.
    pub count: u64,
    /// Order key of the representative: lower is met first.
    pub key: u64,
    /// Where the representative was met, in words (`profile pins case 12`).
    pub first: String,
    /// The representative: the first divergence met with this signature.
    pub divergence: Box<Divergence>,
}

/// The findings of a campaign so far.
#[derive(Clone, Debug, Default)]
pub struct Triage {
    findings: Vec<Finding>,
}

impl Triage {
    /// An empty triage.
    pub fn new() -> Triage {
        Triage::default()
    }

    /// Records `divergence`, met at order `key` (described by `first`).
    /// Returns its signature when it is new. A divergence with a lower key
    /// than the representative of its signature replaces it, so the result
    /// does not depend on the order workers record in.
    pub fn record(
        &mut self,
        key: u64,
        first: impl FnOnce() -> String,
        divergence: Box<Divergence>,
    ) -> Option<TriageSignature> {
        let signature = TriageSignature::of(&divergence);
        let new = self.insert(Finding {
            signature: signature.clone(),
            count: 1,
            key,
            first: first(),
            divergence,
        });
        new.then_some(signature)
    }

    fn insert(&mut self, finding: Finding) -> bool {
        match self
            .findings
            .iter_mut()
            .find(|f| f.signature == finding.signature)
        {
            Some(f) => {
                f.count += finding.count;
                if finding.key < f.key {
                    f.key = finding.key;
                    f.first = finding.first;
                    f.divergence = finding.divergence;
                }
                false
            }
            None => {
                self.findings.push(finding);
                true
            }
        }
    }

    /// Adds `by` to every key: how findings of several searches (the
    /// expansions of a frontier, the configs of a grid) are put in one
    /// order.
    pub fn offset(&mut self, by: u64) {
        for f in &mut self.findings {
            f.key = f.key.saturating_add(by);
        }
    }

    /// Puts `prefix` before where each representative was met (a grid
    /// names the config).
    pub fn prefix_first(&mut self, prefix: &str) {
        for f in &mut self.findings {
            f.first = format!("{prefix}{}", f.first);
        }
    }

    /// Adds every finding of `other` (counts add, lower keys win).
    pub fn absorb(&mut self, other: Triage) {
        for finding in other.findings {
            self.insert(finding);
        }
    }

    /// The findings, in the order their representatives were met.
    pub fn findings(&self) -> Vec<&Finding> {
        let mut out: Vec<&Finding> = self.findings.iter().collect();
        out.sort_by_key(|f| f.key);
        out
    }

    /// Divergences recorded, over every signature.
    pub fn total(&self) -> u64 {
        self.findings.iter().map(|f| f.count).sum()
    }

    /// Distinct signatures.
    pub fn len(&self) -> usize {
        self.findings.len()
    }

    /// Whether nothing diverged.
    pub fn is_empty(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Minimizes each finding's representative against `oracle` (the one the
/// campaign checked against; a trace that names its own is minimized
/// against that when `oracle` is the model) in at most `max_tests`
/// candidates, keeping its signature, and saves one trace per finding
/// under `dir`: the minimized one, or the representative as met when it
/// does not minimize. Two traces of one finding would replay as two
/// failures. `progress` gets one line per finding as it is minimized.
pub fn settle(
    triage: &Triage,
    subject: &SubjectSpec,
    oracle: &Oracle,
    dir: &Path,
    max_tests: usize,
    mut progress: impl FnMut(String),
) -> Vec<FindingReport> {
    let findings = triage.findings();
    let n = findings.len();
    let mut out = Vec::with_capacity(n);
    for (i, finding) in findings.into_iter().enumerate() {
        let mut divergence = finding.divergence.clone();
        let wanted = finding.signature.clone();
        let started = std::time::Instant::now();
        let minimized = minimize_keeping(
            &divergence.trace,
            subject.clone(),
            oracle,
            max_tests,
            move |d| TriageSignature::of(d) == wanted,
        );
        let (minimized_ops, minimized_trace, trace) = match minimized {
            Ok(m) => {
                let mut small = m.divergence;
                let path = small.save_in(dir).map(|p| p.display().to_string()).ok();
                (Some(m.after.ops), path, None)
            }
            Err(_) => {
                let path = divergence.save_in(dir).map(|p| p.display().to_string());
                (None, None, path.ok())
            }
        };
        progress(format!(
            "minimized finding {}/{n} ({}): {} -> {} ops in {:.1} s",
            i + 1,
            finding.signature,
            divergence.trace.ops.len(),
            minimized_ops.map_or("?".to_string(), |o| o.to_string()),
            started.elapsed().as_secs_f64()
        ));
        out.push(FindingReport {
            signature: finding.signature.clone(),
            count: finding.count,
            key: finding.key,
            first: finding.first.clone(),
            summary: divergence.summary(),
            ops: divergence.trace.ops.len(),
            minimized_ops,
            trace,
            minimized_trace,
        });
    }
    out
}
