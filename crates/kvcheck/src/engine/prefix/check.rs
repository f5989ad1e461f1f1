//! `kvcheck::check_prefix`: one call in a `cargo test` checks a Rust
//! prefix cache, as [`crate::check()`] does a streaming one. A campaign of
//! [`super::campaign`] under the judge the cache's policy calls for; the
//! first failure minimized, saved, and reported with the line that runs
//! the same test on it alone (`KVCHECK_REPLAY=TRACE cargo test NAME`).

use std::path::{Path, PathBuf};

use kvmodel::prefix::PrefixConfig;

use super::campaign::{
    self, PrefixOpenError, PrefixRunReport, PrefixRunSettings, PrefixSubject, Windows,
};
use super::drive::{drive, Driven, Judge};
use crate::engine::check::{clock_seed, test_replay, CheckSettings, REPLAY_VAR};
use crate::subject::prefix::{PrefixCapabilities, PrefixSubjectCache, Steps};

/// A prefix cache type as the checks build it: a name, what it can
/// express, and a constructor per config (an `Err` names why it could not
/// be built).
pub struct PrefixFactory<F> {
    /// The name in reports.
    pub name: String,
    /// What it can express; [`PrefixCapabilities::full`] for a cache that
    /// claims the whole contract, `policy: Own` for one judged by the
    /// invariants of §17.
    pub capabilities: PrefixCapabilities,
    /// Builds a fresh cache of a config.
    pub make: F,
}

impl<C, F> PrefixSubject for PrefixFactory<F>
where
    C: PrefixSubjectCache,
    F: FnMut(&PrefixConfig) -> Result<C, String>,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    fn capabilities(&self) -> PrefixCapabilities {
        self.capabilities.clone()
    }

    fn drive(
        &mut self,
        config: &PrefixConfig,
        judge: &Judge,
        steps: Steps,
        ops: &[kvmodel::prefix::PrefixOp],
    ) -> Result<Driven, PrefixOpenError> {
        let steps = self.capabilities.steps.driven(steps);
        let cache = (self.make)(config).map_err(|e| {
            PrefixOpenError::Setup(format!("{} could not be built: {e}", self.name))
        })?;
        drive(cache, judge, steps, ops).map_err(|e| PrefixOpenError::Setup(e.to_string()))
    }
}

/// What [`check_prefix`] ran.
#[derive(Debug)]
pub struct PrefixChecked {
    /// The campaign's report (cases and ops; no failure).
    pub report: Option<PrefixRunReport>,
    /// The trace replayed alone, under `KVCHECK_REPLAY`.
    pub replayed: Option<PathBuf>,
}

/// Why [`check_prefix`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PrefixCheckFailure {
    /// The cache could not be built or driven.
    #[error("{0}")]
    Setup(String),
    /// A case failed: the minimized report, where its trace went and the
    /// line that runs the test on it alone.
    #[error("{0}")]
    Failed(String),
}

/// Checks the prefix cache `factory` builds: a campaign of
/// `settings.cases` cases (within `settings.time`) from `settings.seed`
/// (else one from the clock, printed), or, with `settings.replay` set to
/// a prefix trace, that trace alone. `Ok` when nothing failed.
pub fn check_prefix<C, F>(
    mut factory: PrefixFactory<F>,
    settings: &CheckSettings,
) -> Result<PrefixChecked, PrefixCheckFailure>
where
    C: PrefixSubjectCache,
    F: FnMut(&PrefixConfig) -> Result<C, String>,
{
    let judge = Judge::for_policy(factory.capabilities.policy);
    if let Some(path) = &settings.replay {
        return replay(&mut factory, &judge, path);
    }
    let seed = settings.seed.unwrap_or_else(clock_seed);
    let run = PrefixRunSettings {
        seed,
        time: Some(settings.time),
        cases: settings.cases,
        max_ops: settings.max_ops.min(60),
        judge: None,
        max_tests: settings.max_tests,
        // A cache that opens any window is checked with one on every other
        // case; one that declares `WindowCaps::Fixed` gets its windows.
        windows: Windows::EveryOther,
    };
    let report = campaign::run(&mut factory, &run, &mut |_| {});
    if let Some(problem) = report.setup {
        return Err(PrefixCheckFailure::Setup(problem));
    }
    let Some(failure) = report.failure else {
        return Ok(PrefixChecked {
            report: Some(report),
            replayed: None,
        });
    };
    let ran = failure.ops.len();
    let (trace, shown) = match failure.minimized {
        Ok(m) => (m.trace, m.divergence.to_string()),
        Err(_) => {
            let trace = kvmodel::prefix::PrefixTrace::new(failure.config, failure.ops);
            (trace, failure.divergence.to_string())
        }
    };
    let path = settings.failures.join(format!(
        "prefix-{}-seed{seed}-case{}.kvtrace.json",
        slug(&factory.name),
        failure.case
    ));
    let saved = std::fs::create_dir_all(&settings.failures).and_then(|()| {
        let text = serde_json::to_string_pretty(&trace).map_err(std::io::Error::other)?;
        std::fs::write(&path, text + "\n")
    });
    let place = match saved {
        Ok(()) => format!(
            "saved {}\nrun it alone: {}",
            path.display(),
            test_replay().of(&path)
        ),
        Err(e) => format!("(the trace could not be saved to {}: {e})", path.display()),
    };
    Err(PrefixCheckFailure::Failed(format!(
        "{} failed case {} of seed {seed} ({} ops), judged by {}; minimized to {} ops:\n{shown}\n{place}",
        factory.name,
        failure.case,
        ran,
        report.judge,
        trace.ops.len()
    )))
}

fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn replay<C, F>(
    factory: &mut PrefixFactory<F>,
    judge: &Judge,
    path: &Path,
) -> Result<PrefixChecked, PrefixCheckFailure>
where
    C: PrefixSubjectCache,
    F: FnMut(&PrefixConfig) -> Result<C, String>,
{
    let trace =
        super::load(path).map_err(|e| PrefixCheckFailure::Setup(format!("{REPLAY_VAR}: {e}")))?;
    let driven = factory
        .drive(&trace.config, judge, Steps::Free, &trace.ops)
        .map_err(|e| PrefixCheckFailure::Setup(e.to_string()))?;
    match driven.divergence {
        None => Ok(PrefixChecked {
            report: None,
            replayed: Some(path.to_path_buf()),
        }),
        Some(d) => Err(PrefixCheckFailure::Failed(format!(
            "{REPLAY_VAR}={}: {} still fails, judged by {}:\n{d}",
            path.display(),
            factory.name,
            judge.describe()
        ))),
    }
}
