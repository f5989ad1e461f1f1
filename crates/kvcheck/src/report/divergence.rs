//! The divergence that stopped a `run`, as its `--json` report carries it:
//! what a program needs to fail a test with it (`kvcheck.check` in
//! Python reads it), without reading the text kvcheck prints.

use serde::{Deserialize, Serialize};

/// The divergence that stopped a run, minimized when minimization
/// succeeded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergenceReport {
    /// Where the run met it, in words (`profile tiny case 12`).
    pub first: String,
    /// Its divergence kind (`visible`, `values`, …).
    pub kind: String,
    /// Its one-line summary.
    pub summary: String,
    /// Ops of the failing prefix the run met.
    pub ops: usize,
    /// Ops of the minimized trace, when minimization succeeded.
    pub minimized_ops: Option<usize>,
    /// kvcheck's report of it, as printed (the framed text, its trace and
    /// reproduce lines included).
    pub report: String,
    /// Where its trace was saved (the minimized one when there is one).
    pub trace: Option<String>,
    /// The command that replays that trace, spelled for where the run ran.
    pub reproduce: Option<String>,
}
