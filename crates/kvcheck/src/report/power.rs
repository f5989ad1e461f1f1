//! The report of `kvcheck power`: one row per fault, one cell per engine.

use serde::{Deserialize, Serialize};

use super::shard::Shard;

/// What `kvcheck power` measured: one row per fault (and the control row),
/// one cell per engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerReport {
    /// [`REPORT_FORMAT`](super::REPORT_FORMAT).
    pub format: String,
    /// Seed of the `run` campaigns and of libFuzzer.
    pub seed: u64,
    /// Seconds each engine may spend on one row.
    pub time_s: f64,
    /// The correct cache the faults are injected into (`shipped`,
    /// `generic` or `ring`).
    pub cache: String,
    /// Engine names, in column order.
    pub engines: Vec<String>,
    /// The names of every row of the unsharded table, in order (what the
    /// row indices refer to).
    pub table: Vec<String>,
    /// The shards this report covers.
    pub shards: Vec<Shard>,
    /// The rows this report covers, in table order.
    pub rows: Vec<PowerRow>,
    /// Wall time in seconds (the longest shard's once merged).
    pub elapsed_s: f64,
}

/// One row of the power table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerRow {
    /// Index in the unsharded table (what `--shard` partitions).
    pub index: usize,
    /// The fault's name, or `control:SUBJECT`.
    pub fault: String,
    /// What the row checks, in one line.
    pub doc: String,
    /// Whether this is the control row (a catch is a false positive).
    pub control: bool,
    /// One cell per engine of [`PowerReport::engines`]; `None`: skipped.
    pub cells: Vec<Option<Catch>>,
}

impl PowerRow {
    /// Whether some engine that ran found a divergence.
    pub fn caught(&self) -> bool {
        self.cells.iter().flatten().any(|c| c.caught)
    }
}

impl PowerReport {
    /// The faults no engine caught (control rows excluded).
    pub fn escaped(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| !r.control && !r.caught())
            .map(|r| r.fault.as_str())
            .collect()
    }

    /// The control rows some engine diverged on: false positives.
    pub fn false_positives(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.control && r.caught())
            .map(|r| r.fault.as_str())
            .collect()
    }

    /// Per engine: faults caught and faults it ran on (control rows and
    /// skipped cells excluded).
    pub fn kill_rates(&self) -> Vec<(usize, usize)> {
        (0..self.engines.len())
            .map(|i| {
                let ran: Vec<&Catch> = self
                    .rows
                    .iter()
                    .filter(|r| !r.control)
                    .filter_map(|r| r.cells.get(i)?.as_ref())
                    .collect();
                (ran.iter().filter(|c| c.caught).count(), ran.len())
            })
            .collect()
    }
}

/// What one engine did against one fault.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Catch {
    /// Whether the engine found a divergence.
    pub caught: bool,
    /// Work until the first catch (or in all, when not caught), in the
    /// engine's unit (`Engine::unit` of the power engine).
    pub work: u64,
    /// Seconds until the first catch (or spent, when not caught).
    pub seconds: f64,
    /// Ops of the minimized counterexample, when there is one.
    pub minimized_ops: Option<usize>,
    /// The divergence in one line, or why nothing was found.
    pub note: String,
}
