//! `--keep-going`: the triage mode of `run`, `explore` and `from-fuzz`.

use std::path::Path;

use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::triage::{self, Triage};
use kvcheck::report::findings::FindingReport;
use kvcheck::settings::Settings;
use kvcheck::subject::SubjectSpec;

/// The triage options every engine takes.
#[derive(clap::Args, Debug, Clone)]
pub struct TriageArgs {
    /// Triage mode: record every divergence instead of stopping at the
    /// first, group them by signature (divergence kind, op, the shape of
    /// the first difference, an `exec:` subject's exception type),
    /// minimize one representative per signature and print a table of the
    /// distinct findings (with --json, in the report for `kvcheck merge`).
    #[arg(long)]
    pub keep_going: bool,
    /// With --keep-going: candidates the minimizer may try per finding
    /// [default: $KVCHECK_MAX_TESTS, else 2000].
    #[arg(long, requires = "keep_going", value_name = "N")]
    pub max_tests: Option<usize>,
}

/// Minimizes every finding of `triage` against `oracle` (the engine's)
/// and saves it under `dir`, one progress line per finding on standard
/// error, and returns the findings for the table and the report. The budget
/// is `--max-tests`, else the settings'.
pub fn settle(
    args: &TriageArgs,
    triage: &Triage,
    subject: &SubjectSpec,
    oracle: &Oracle,
    dir: &Path,
    settings: &Settings,
) -> Vec<FindingReport> {
    if !triage.is_empty() {
        eprintln!(
            "{} divergences, {} distinct: minimizing one of each",
            triage.total(),
            triage.len()
        );
    }
    let max_tests = args.max_tests.unwrap_or(settings.max_tests);
    triage::settle(triage, subject, oracle, dir, max_tests, |line| {
        eprintln!("{line}")
    })
}
