//! One call checks a cache of your own crate: [`check`](crate::check()) runs the campaign
//! of `kvcheck run` on a [`Factory`] (every profile its capabilities open,
//! the first divergence minimized and saved) and judges the result as
//! `kvcheck.check` does a Python cache. `cargo test` is the front door:
//!
//! ```no_run
//! use kvcheck::subject::{Capabilities, Factory, ReferenceCache};
//!
//! #[test]
//! fn my_cache_keeps_the_contract() {
//!     let factory = Factory::new("my-cache", Capabilities::full(), |config, device| {
//!         Ok(Box::new(ReferenceCache::new(config, device)?))
//!     });
//!     kvcheck::check(factory, &kvcheck::CheckSettings::from_env().unwrap()).unwrap();
//! }
//! ```
//!
//! A divergence fails with its minimized report and the line that
//! reproduces it from the same crate: `KVCHECK_REPLAY=TRACE cargo test
//! NAME` runs the test again on that trace alone ([`REPLAY_VAR`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::check::trace::{Trace, TraceError};
use crate::engine::oracle::{Oracle, OracleEnvError};
use crate::engine::replay::replay_with;
use crate::engine::run::{select_profiles, ReplayCommand, Run, RunError};
use crate::engine::scale::Campaign;
use crate::report::findings::findings_table;
use crate::report::shard::Shard;
use crate::report::RunReport;
use crate::settings::{SettingError, Settings};
use crate::subject::{Factory, SubjectSpec};

/// The variable that turns [`check`](crate::check()) into a replay of one saved trace.
pub const REPLAY_VAR: &str = "KVCHECK_REPLAY";

/// What [`check`](crate::check()) runs and what it lets pass. Built from the environment's
/// knobs ([`CheckSettings::from_env`]) or from [`Default`], then narrowed
/// with its builder methods.
#[derive(Clone, Debug)]
pub struct CheckSettings {
    /// Wall-time budget of the campaign.
    pub time: Duration,
    /// Cases per profile; `None`: until the time budget.
    pub cases: Option<u64>,
    /// The profiles drawn from (`kvcheck run --list`); empty: every
    /// profile the cache's capabilities open.
    pub profiles: Vec<String>,
    /// What the cache is compared with (the model by default).
    pub oracle: Oracle,
    /// The op generator's seed; `None`: one from the clock, printed.
    pub seed: Option<u64>,
    /// Longest op sequence of a case.
    pub max_ops: usize,
    /// Worker threads.
    pub jobs: usize,
    /// Candidates the minimizer may try.
    pub max_tests: usize,
    /// Every *outside* answer is a divergence (`--strict-domain`).
    pub strict_domain: bool,
    /// The fewest judged writes a cache that answered *outside* must have
    /// served (`--min-judged`).
    pub min_judged: u64,
    /// The largest share of drawn ops that may lie outside the cache's
    /// domain (a cache that declares its domain stays near 0).
    pub max_outside: f64,
    /// Where traces of divergences are saved.
    pub failures: PathBuf,
    /// A saved trace to replay alone in place of the campaign
    /// (`KVCHECK_REPLAY`, [`REPLAY_VAR`]).
    pub replay: Option<PathBuf>,
    /// Triage mode (`--keep-going`): every divergence recorded until the
    /// budget is spent, one of each signature minimized and saved, and
    /// the failure lists them all.
    pub keep_going: bool,
}

impl Default for CheckSettings {
    /// The defaults of the knobs (`settings::KNOBS`), a 60 s cap and at
    /// most 5 % of the drawn ops outside.
    fn default() -> CheckSettings {
        CheckSettings::with_oracle(&Settings::default(), Oracle::model())
    }
}

/// A knob of the environment that [`CheckSettings::from_env`] could not
/// take, naming the variable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CheckSettingsError {
    /// A knob does not parse.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// `KVCHECK_ORACLE` names no oracle.
    #[error(transparent)]
    Oracle(#[from] OracleEnvError),
}

impl CheckSettings {
    /// The knobs of the environment (`KVCHECK_CASES` cases per profile,
    /// `KVCHECK_SEED`, `KVCHECK_JOBS`, `KVCHECK_MAX_TESTS`,
    /// `KVCHECK_STRICT_DOMAIN`, `KVCHECK_ORACLE`, …); a knob that does not
    /// parse is an error naming it.
    pub fn from_env() -> Result<CheckSettings, CheckSettingsError> {
        Ok(CheckSettings::from_settings(&Settings::from_env()?)?)
    }

    /// The settings' knobs, as [`CheckSettings::from_env`] reads them: the
    /// oracle is the one `settings.oracle` names, else the model.
    pub fn from_settings(settings: &Settings) -> Result<CheckSettings, OracleEnvError> {
        let oracle = Oracle::configured(settings)?.unwrap_or_else(Oracle::model);
        Ok(CheckSettings::with_oracle(settings, oracle))
    }

    fn with_oracle(settings: &Settings, oracle: Oracle) -> CheckSettings {
        CheckSettings {
            time: Duration::from_secs(60),
            cases: Some(u64::from(settings.cases)),
            profiles: Vec::new(),
            oracle,
            seed: settings.seed,
            max_ops: settings.max_ops,
            jobs: settings.workers(),
            max_tests: settings.max_tests,
            strict_domain: settings.strict_domain,
            min_judged: 100,
            max_outside: 0.05,
            failures: settings.failures_dir.clone(),
            replay: settings.replay.clone(),
            keep_going: false,
        }
    }

    /// Keeps going past the first divergence (triage mode).
    pub fn keep_going(mut self) -> CheckSettings {
        self.keep_going = true;
        self
    }

    /// Runs `cases` cases per profile (within the time budget).
    pub fn cases(mut self, cases: u64) -> CheckSettings {
        self.cases = Some(cases);
        self
    }

    /// Runs for `seconds` (every profile taking turns), with no case count.
    pub fn time(mut self, seconds: f64) -> CheckSettings {
        self.time = Duration::from_secs_f64(seconds.max(0.0));
        self.cases = None;
        self
    }

    /// Draws from `name` too (the first call narrows to it alone).
    pub fn profile(mut self, name: &str) -> CheckSettings {
        self.profiles.push(name.to_string());
        self
    }

    /// Seeds the op generator.
    pub fn seed(mut self, seed: u64) -> CheckSettings {
        self.seed = Some(seed);
        self
    }

    /// Compares with `oracle` in place of the model.
    pub fn oracle(mut self, oracle: Oracle) -> CheckSettings {
        self.oracle = oracle;
        self
    }

    /// Lets at most `share` of the drawn ops lie outside the domain.
    pub fn max_outside(mut self, share: f64) -> CheckSettings {
        self.max_outside = share;
        self
    }
}

/// What [`check`](crate::check()) ran: the run's report (or, under [`REPLAY_VAR`], the
/// trace replayed) and the profiles it left out.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The report of the campaign (empty when a trace was replayed).
    pub report: RunReport,
    /// The profiles the cache's capabilities do not open, each with why.
    pub skipped: Vec<String>,
    /// The trace replayed, under [`REPLAY_VAR`].
    pub replayed: Option<PathBuf>,
}

impl Checked {
    /// Ops judged.
    pub fn ops(&self) -> u64 {
        self.report.judged()
    }

    /// The share of drawn ops that lay outside the cache's domain.
    pub fn outside_share(&self) -> f64 {
        self.report.domain().share()
    }
}

impl fmt::Display for Checked {
    /// The run's table: per profile its cases, ops and missing events,
    /// then the ops by kind and the domain line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = &self.replayed {
            return writeln!(
                f,
                "{}: {} replayed, no divergence",
                self.report.subject,
                path.display()
            );
        }
        writeln!(
            f,
            "{}: seed {}, {} ops judged in {:.1} s",
            self.report.subject,
            self.report.seed,
            self.ops(),
            self.report.elapsed_s
        )?;
        let mut all = crate::check::coverage::Coverage::default();
        for p in &self.report.profiles {
            let missing = p
                .missing_note()
                .map(|note| format!("  never reached: {note}"))
                .unwrap_or_default();
            writeln!(
                f,
                "  {:<12} {:>6} cases {:>8} ops{missing}",
                p.name, p.cases, p.ops
            )?;
            all.merge(&p.coverage);
        }
        for why in &self.skipped {
            writeln!(f, "  skipped: {why}")?;
        }
        writeln!(f, "{}", all.op_summary())?;
        if let Some(line) = self.report.domain().summary() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// Why [`check`](crate::check()) did not pass. Its `Debug` is its report, so that a test
/// that unwraps it or returns it prints what a user acts on.
#[derive(thiserror::Error)]
pub enum CheckFailure {
    /// A knob of the environment does not parse.
    #[error(transparent)]
    Settings(#[from] CheckSettingsError),
    /// The run could not start or finish (no profile the cache opens, a
    /// profile whose cases cannot be drawn).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The cache diverged: the minimized report, with where its trace went
    /// and the line that reproduces it.
    #[error("{report}")]
    Diverged {
        /// The divergence's report (minimized when it could be).
        report: String,
        /// The saved trace.
        trace: Option<String>,
        /// What ran.
        checked: Box<Checked>,
    },
    /// The cache answered *outside* so often that fewer than `floor`
    /// writes were served.
    #[error("the cache served {served} judged writes, fewer than {floor}, and answered outside its domain in {cuts} cases: declare its domain so that kvcheck draws inside it\n{checked}")]
    TooFewJudged {
        /// Writes served with state.
        served: u64,
        /// [`CheckSettings::min_judged`].
        floor: u64,
        /// Cases cut by an *outside* answer.
        cuts: u64,
        /// What ran.
        checked: Box<Checked>,
    },
    /// More than [`CheckSettings::max_outside`] of the drawn ops lay
    /// outside the cache's domain.
    #[error("{:.1}% of the drawn ops lay outside the cache's domain, more than {:.1}%{}\n{checked}", 100.0 * share, 100.0 * max, warnings.iter().map(|w| format!("\nwarning: {w}")).collect::<String>())]
    MostlyOutside {
        /// The share outside.
        share: f64,
        /// The share allowed.
        max: f64,
        /// The run's warnings (the declarations to make).
        warnings: Vec<String>,
        /// What ran.
        checked: Box<Checked>,
    },
    /// The trace of [`REPLAY_VAR`] could not be read.
    #[error("{REPLAY_VAR}: {0}")]
    Trace(#[from] TraceError),
    /// The trace of [`REPLAY_VAR`] still fails.
    #[error("{REPLAY_VAR}={}: {failure}", path.display())]
    Replayed {
        /// The trace.
        path: PathBuf,
        /// The failure, as replay reports it.
        failure: String,
    },
}

impl fmt::Debug for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Checks the cache `factory` builds ([`crate::check()`], see the module
/// docs): the campaign
/// of `kvcheck run` over every profile its capabilities open, or only
/// the trace [`REPLAY_VAR`] names when it is set. `Ok` when no case
/// diverged, enough writes were served and at most
/// [`CheckSettings::max_outside`] of the drawn ops lay outside the
/// cache's domain; the `Err` says which and carries the report.
///
/// The run's lines (the first divergence as met, the minimizer's result)
/// go to standard output, which `cargo test` shows for a failing test.
pub(crate) fn check(factory: Factory, settings: &CheckSettings) -> Result<Checked, CheckFailure> {
    if let Some(path) = &settings.replay {
        return replay(factory, path, settings);
    }
    let subject = SubjectSpec::Factory(factory).with_strict_domain(settings.strict_domain);
    let selection = select_profiles(&settings.profiles, None, &subject, &settings.oracle)?;
    let seed = settings.seed.unwrap_or_else(clock_seed);
    let run = Run {
        campaign: Campaign {
            seed,
            profiles: selection.profiles,
            max_ops: settings.max_ops,
            cases: settings.cases,
            budget: settings.time,
            jobs: settings.jobs.max(1),
            shard: Shard::ALL,
            subject: subject.clone(),
            oracle: settings.oracle.clone(),
        },
        keep_going: settings.keep_going,
        max_tests: settings.max_tests,
        min_judged: settings.min_judged,
        failures: settings.failures.clone(),
        replay: Some(test_replay()),
    };
    println!("kvcheck: {} on seed {seed}", subject.label());
    let report = run.execute(None, &|line| println!("{line}"))?;
    judge(
        Checked {
            report,
            skipped: selection.skipped,
            replayed: None,
        },
        settings,
    )
}

/// The verdict on a finished run.
fn judge(checked: Checked, settings: &CheckSettings) -> Result<Checked, CheckFailure> {
    let findings = &checked.report.findings;
    if !findings.is_empty() {
        // Triage mode: every distinct finding, each with its own line.
        let mut report = findings_table(findings);
        let replay = test_replay();
        for finding in findings {
            if let Some(path) = finding.minimized_trace.as_ref().or(finding.trace.as_ref()) {
                report.push_str(&format!("reproduce: {}\n", replay.of(Path::new(path))));
            }
        }
        let first = &findings[0];
        return Err(CheckFailure::Diverged {
            report,
            trace: first
                .minimized_trace
                .clone()
                .or_else(|| first.trace.clone()),
            checked: Box::new(checked),
        });
    }
    if let Some(divergence) = &checked.report.divergence {
        return Err(CheckFailure::Diverged {
            report: divergence.report.clone(),
            trace: divergence.trace.clone(),
            checked: Box::new(checked),
        });
    }
    let domain = checked.report.domain();
    if checked.report.too_few_judged() {
        return Err(CheckFailure::TooFewJudged {
            served: domain.served,
            floor: settings.min_judged,
            cuts: domain.cuts,
            checked: Box::new(checked),
        });
    }
    if domain.share() > settings.max_outside {
        return Err(CheckFailure::MostlyOutside {
            share: domain.share(),
            max: settings.max_outside,
            warnings: checked.report.warnings.clone(),
            checked: Box::new(checked),
        });
    }
    Ok(checked)
}

/// Replays the trace at `path` (one [`check`](crate::check()) saved) on the cache
/// `factory` builds, against the settings' oracle or the one the trace
/// names: what [`check`](crate::check()) does when [`REPLAY_VAR`] is set. `Err` when it
/// still fails, or cannot be run on the cache.
pub fn replay(
    factory: Factory,
    path: &Path,
    settings: &CheckSettings,
) -> Result<Checked, CheckFailure> {
    let subject = SubjectSpec::Factory(factory).with_strict_domain(settings.strict_domain);
    let path = path.to_path_buf();
    let subject = &subject;
    let trace = Trace::load(&path)?;
    let replayed = replay_with(
        &trace,
        Some(&path),
        Some(subject.clone()),
        None,
        &settings.oracle,
    );
    let failure = replayed
        .failure()
        .or_else(|| replayed.skipped.map(|why| format!("not run: {why}")));
    if let Some(failure) = failure {
        return Err(CheckFailure::Replayed { path, failure });
    }
    Ok(Checked {
        report: RunReport::empty(subject.label(), 0, trace.ops.len(), Shard::ALL),
        skipped: Vec::new(),
        replayed: Some(path),
    })
}

/// `KVCHECK_REPLAY=TRACE cargo test NAME`, `NAME` the test this thread
/// runs (libtest names its threads after their tests).
pub(crate) fn test_replay() -> ReplayCommand {
    let after = match std::thread::current().name() {
        Some(name) if name != "main" => {
            format!(" cargo test {} -- --exact", shell_words::quote(name))
        }
        _ => " cargo test".to_string(),
    };
    ReplayCommand {
        before: format!("{REPLAY_VAR}="),
        after,
    }
}

pub(crate) fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
