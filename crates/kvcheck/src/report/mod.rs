//! JSON reports of `run`, `explore` and `power` (`--json FILE`) and their
//! merge.
//!
//! A report holds the counts a table is printed from, never rates alone,
//! so that [`Report::merge`] of the shards of a campaign gives the totals
//! one unsharded run prints: cases, ops, states and event counts add up,
//! missing events are computed again from the merged coverage, the rows of
//! a power table are put back in fault order, and wall time is the longest
//! shard's (shards run side by side).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::coverage::Coverage;
use findings::FindingReport;
use shard::Shard;

mod divergence;
mod domain;
pub mod findings;
mod merge;
mod power;
pub mod shard;

pub use divergence::DivergenceReport;
pub use domain::{DomainTally, OUTSIDE_WARNING};
pub use power::{Catch, PowerReport, PowerRow};

/// The version tag of the report format.
pub const REPORT_FORMAT: &str = "kvcheck-report/1";

/// A JSON report of one command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Report {
    /// `kvcheck run`.
    Run(RunReport),
    /// `kvcheck explore` (one config or a grid).
    Explore(ExploreSummary),
    /// `kvcheck power` (the zoo against the engines).
    Power(PowerReport),
}

/// What `kvcheck run` checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// [`REPORT_FORMAT`].
    pub format: String,
    /// The campaign's seed.
    pub seed: u64,
    /// Longest op sequence.
    pub max_ops: usize,
    /// The subject's name.
    pub subject: String,
    /// The shards this report covers (one, or several once merged).
    pub shards: Vec<Shard>,
    /// Per profile, in table order.
    pub profiles: Vec<ProfileReport>,
    /// Wall time in seconds (the longest shard's once merged).
    pub elapsed_s: f64,
    /// Paths of the traces of divergences.
    pub divergences: Vec<String>,
    /// The divergence that stopped the run (none in triage mode, whose
    /// findings carry theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<DivergenceReport>,
    /// Triage mode (`--keep-going`): the distinct findings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingReport>,
    /// `--min-judged`: the fewest judged ops served with state a run whose
    /// subject answered *outside* may pass with ([`RunReport::too_few_judged`]).
    #[serde(default)]
    pub min_judged: u64,
    /// The run's warnings, as printed after `warning: `.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One profile's row of the `run` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    /// Profile name.
    pub name: String,
    /// `dense` or `packed`.
    pub cache: String,
    /// Cases checked.
    pub cases: u64,
    /// Ops checked.
    pub ops: u64,
    /// Worker seconds spent on its cases.
    pub busy_s: f64,
    /// Divergences found.
    pub divergences: u64,
    /// Events the profile must reach.
    pub required: Vec<String>,
    /// Events labelled.
    pub coverage: Coverage,
    /// Against `self`: per relation, the cases it judged and the ops it
    /// compared (empty against the model or another subject).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judged: Vec<RelationJudged>,
    /// Drawn ops and those outside the subject's domain.
    #[serde(default, skip_serializing_if = "DomainTally::is_empty")]
    pub domain: DomainTally,
}

/// What one relation judged in a campaign's profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationJudged {
    /// `M1` … `M10`.
    pub relation: String,
    /// Its short name (`reset-is-fresh`).
    pub name: String,
    /// Cases (traces) it judged.
    pub cases: u64,
    /// Ops of its transformed runs it compared.
    pub ops: u64,
}

/// Adds `rows` into `total` relation by relation (a relation not there yet
/// is appended).
pub fn merge_judged(total: &mut Vec<RelationJudged>, rows: &[RelationJudged]) {
    for row in rows {
        match total.iter_mut().find(|t| t.relation == row.relation) {
            Some(t) => {
                t.cases += row.cases;
                t.ops += row.ops;
            }
            None => total.push(row.clone()),
        }
    }
}

impl RunReport {
    /// The report of a run of `subject` that has checked nothing yet: no
    /// profile, no divergence, no warning.
    pub fn empty(subject: String, seed: u64, max_ops: usize, shard: Shard) -> RunReport {
        RunReport {
            format: REPORT_FORMAT.to_string(),
            seed,
            max_ops,
            subject,
            shards: vec![shard],
            profiles: Vec::new(),
            elapsed_s: 0.0,
            divergences: Vec::new(),
            divergence: None,
            findings: Vec::new(),
            min_judged: 0,
            warnings: Vec::new(),
        }
    }

    /// Ops judged over every profile.
    pub fn judged(&self) -> u64 {
        self.profiles.iter().map(|p| p.ops).sum()
    }

    /// Whether the subject served fewer judged ops with state
    /// ([`DomainTally::served`]: accepted writes of at least one position)
    /// than `min_judged` where it left its domain: a subject that answers
    /// *outside* to (nearly) every write cannot pass on the refusals,
    /// probes and resets it still answers. A short `--cases` run may judge
    /// few ops for good reasons, so the floor holds only after a cut.
    pub fn too_few_judged(&self) -> bool {
        let domain = self.domain();
        domain.served < self.min_judged && domain.cuts > 0
    }

    /// Every profile's [`DomainTally`] added up.
    pub fn domain(&self) -> DomainTally {
        let mut total = DomainTally::default();
        for p in &self.profiles {
            total.add(&p.domain);
        }
        total
    }
}

impl ProfileReport {
    /// The required events never reached.
    pub fn missing(&self) -> Vec<String> {
        self.required
            .iter()
            .filter(|e| self.coverage.count(e) == 0)
            .cloned()
            .collect()
    }

    /// The missing events in words, with why where the subject is the
    /// reason: `reset (12 of 12 cases cut outside the domain)` says the
    /// cases ended at an *outside* answer before reaching them, not that
    /// the strategy is weak. `None` when nothing is missing.
    pub fn missing_note(&self) -> Option<String> {
        let missing = self.missing();
        if missing.is_empty() {
            return None;
        }
        let mut note = missing.join(" ");
        if self.domain.cuts > 0 {
            note.push_str(&format!(
                " ({} of {} cases cut outside the domain)",
                self.domain.cuts, self.cases
            ));
        }
        Some(note)
    }
}

/// What `kvcheck explore` explored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploreSummary {
    /// [`REPORT_FORMAT`].
    pub format: String,
    /// The subject's name.
    pub subject: String,
    /// Depth asked for.
    pub depth: usize,
    /// The shards this report covers.
    pub shards: Vec<Shard>,
    /// One entry per config explored, in grid order.
    pub configs: Vec<ConfigReport>,
    /// Events the whole exploration must reach.
    pub required: Vec<String>,
    /// Wall time in seconds (the longest shard's once merged).
    pub elapsed_s: f64,
    /// The shortest counterexample found, if any.
    pub discovery: Option<DiscoveryReport>,
    /// Triage mode (`--keep-going`): the distinct findings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingReport>,
}

/// One explored config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigReport {
    /// Index in the unsharded grid (0 outside grid mode).
    pub index: usize,
    /// The config, described.
    pub config: String,
    /// Depth expanded in full.
    pub depth_completed: usize,
    /// States generated.
    pub states: u64,
    /// Distinct fingerprints.
    pub distinct_states: u64,
    /// Ops checked from explored states.
    pub transitions: u64,
    /// Events labelled.
    pub coverage: Coverage,
}

/// A counterexample found by `explore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiscoveryReport {
    /// Index in the unsharded grid of the config it was found in.
    pub index: usize,
    /// Its one-line summary.
    pub summary: String,
    /// Its length in ops.
    pub ops: usize,
    /// Where its trace was saved.
    pub trace: Option<String>,
}

impl ExploreSummary {
    /// States over all configs.
    pub fn states(&self) -> u64 {
        self.configs.iter().map(|c| c.states).sum()
    }

    /// Distinct states over all configs.
    pub fn distinct_states(&self) -> u64 {
        self.configs.iter().map(|c| c.distinct_states).sum()
    }

    /// Transitions over all configs.
    pub fn transitions(&self) -> u64 {
        self.configs.iter().map(|c| c.transitions).sum()
    }

    /// The least depth completed over configs.
    pub fn shallowest(&self) -> usize {
        self.configs
            .iter()
            .map(|c| c.depth_completed)
            .min()
            .unwrap_or(0)
    }

    /// The coverage of every config together.
    pub fn coverage(&self) -> Coverage {
        let mut all = Coverage::default();
        for c in &self.configs {
            all.merge(&c.coverage);
        }
        all
    }

    /// The required events never reached by any config.
    pub fn missing(&self) -> Vec<String> {
        let all = self.coverage();
        self.required
            .iter()
            .filter(|e| all.count(e) == 0)
            .cloned()
            .collect()
    }
}

/// Why reports could not be read or merged.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not a report.
    #[error("{path}: not a kvcheck report: {source}")]
    Json {
        /// The file.
        path: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// A report of another format version.
    #[error("{path}: report format {found:?}, expected {REPORT_FORMAT:?}")]
    Format {
        /// The file.
        path: String,
        /// Its format tag.
        found: String,
    },
    /// Nothing to merge.
    #[error("no reports to merge")]
    Empty,
    /// Reports of different commands or campaigns.
    #[error("cannot merge: {0}")]
    Mismatch(String),
}

impl Report {
    /// Reads a report written by `--json`.
    pub fn load(path: &Path) -> Result<Report, ReportError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io {
            path: name.clone(),
            source,
        })?;
        let report: Report = serde_json::from_str(&text).map_err(|source| ReportError::Json {
            path: name.clone(),
            source,
        })?;
        let format = match &report {
            Report::Run(r) => &r.format,
            Report::Explore(r) => &r.format,
            Report::Power(r) => &r.format,
        };
        if format != REPORT_FORMAT {
            return Err(ReportError::Format {
                path: name,
                found: format.clone(),
            });
        }
        Ok(report)
    }

    /// Writes the report as pretty JSON, atomically (a temporary file in
    /// the same directory, then a rename), so a reader never sees half.
    pub fn save(&self, path: &Path) -> Result<(), ReportError> {
        let text = serde_json::to_string_pretty(self).expect("reports serialize");
        crate::check::atomic::write(path, text.as_bytes()).map_err(|source| ReportError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// The shards a report covers.
    pub fn shards(&self) -> &[Shard] {
        match self {
            Report::Run(r) => &r.shards,
            Report::Explore(r) => &r.shards,
            Report::Power(r) => &r.shards,
        }
    }

    /// The command that wrote the report: `run`, `explore` or `power`.
    pub fn command(&self) -> &'static str {
        match self {
            Report::Run(_) => "run",
            Report::Explore(_) => "explore",
            Report::Power(_) => "power",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_event_names_the_cut_cases_when_there_are_some() {
        let mut row = ProfileReport {
            name: "growth".into(),
            cache: "dense".into(),
            cases: 12,
            ops: 30,
            busy_s: 0.1,
            divergences: 0,
            required: vec!["append".into(), "reset".into()],
            coverage: Coverage::default(),
            judged: Vec::new(),
            domain: DomainTally::default(),
        };
        row.coverage.hit("append");
        assert_eq!(row.missing_note().as_deref(), Some("reset"));
        row.domain.cuts = 12;
        assert_eq!(
            row.missing_note().as_deref(),
            Some("reset (12 of 12 cases cut outside the domain)")
        );
        row.coverage.hit("reset");
        assert_eq!(row.missing_note(), None);
    }
}
