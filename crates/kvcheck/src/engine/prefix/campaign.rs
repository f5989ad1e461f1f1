//! Campaigns on a prefix subject: random cases of the subject's
//! capabilities ([`super::strategy::cases`]), each drawn from its own seed,
//! driven under the judge its policy calls for until the time or the case
//! count runs out; the first failure minimized.

use std::time::{Duration, Instant};

use candle_core::Device;
use kvcache::fault::{FaultyPagedCache, PrefixFault};
use kvcache::PagedCache;
use kvmodel::prefix::{PrefixConfig, PrefixOp};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};

use super::drive::{drive, Driven, Judge};
use super::minimize::{minimize_driven, PrefixMinimizeError, PrefixMinimized};
use super::strategy;
use crate::subject::prefix::{PrefixCapabilities, PrefixFailure, Steps, WindowCaps};
use crate::subject::ExecPrefixSubject;

/// Why a case could not be driven at all.
#[derive(Debug, thiserror::Error)]
pub enum PrefixOpenError {
    /// The subject answered `outside` to the config: the case is skipped.
    #[error("outside the subject's domain: {0}")]
    Outside(String),
    /// The subject (or the model) refused a config the other accepts, or
    /// the subject failed to open it: a setup error.
    #[error("{0}")]
    Setup(String),
}

/// A prefix cache the campaigns can open again and again.
pub trait PrefixSubject {
    /// Its name in reports.
    fn name(&self) -> String;
    /// What it can express.
    fn capabilities(&self) -> PrefixCapabilities;
    /// Opens a fresh cache of `config` and drives `ops` on it under
    /// `judge`, in the order `steps` ([`drive`]; a subject that declares
    /// [`Steps::Whole`] is always driven so).
    fn drive(
        &mut self,
        config: &PrefixConfig,
        judge: &Judge,
        steps: Steps,
        ops: &[PrefixOp],
    ) -> Result<Driven, PrefixOpenError>;
}

fn setup<E: std::fmt::Display>(e: E) -> PrefixOpenError {
    PrefixOpenError::Setup(e.to_string())
}

/// The shipped [`PagedCache`], f32 on the CPU, or with one planted
/// [`PrefixFault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedSubject {
    /// The fault planted, if any.
    pub fault: Option<PrefixFault>,
}

impl PrefixSubject for PagedSubject {
    fn name(&self) -> String {
        match self.fault {
            None => "paged".into(),
            Some(fault) => format!("fault:{fault}"),
        }
    }

    fn capabilities(&self) -> PrefixCapabilities {
        PrefixCapabilities::full()
    }

    fn drive(
        &mut self,
        config: &PrefixConfig,
        judge: &Judge,
        steps: Steps,
        ops: &[PrefixOp],
    ) -> Result<Driven, PrefixOpenError> {
        match self.fault {
            None => {
                let cache = PagedCache::new(config, &Device::Cpu).map_err(setup)?;
                drive(cache, judge, steps, ops).map_err(setup)
            }
            Some(fault) => {
                let cache = FaultyPagedCache::new(config, &Device::Cpu, fault).map_err(setup)?;
                drive(cache, judge, steps, ops).map_err(setup)
            }
        }
    }
}

impl PrefixSubject for ExecPrefixSubject {
    fn name(&self) -> String {
        ExecPrefixSubject::name(self).to_string()
    }

    fn capabilities(&self) -> PrefixCapabilities {
        ExecPrefixSubject::capabilities(self).clone()
    }

    fn drive(
        &mut self,
        config: &PrefixConfig,
        judge: &Judge,
        steps: Steps,
        ops: &[PrefixOp],
    ) -> Result<Driven, PrefixOpenError> {
        let steps = ExecPrefixSubject::capabilities(self).steps.driven(steps);
        let cache = match self.open(config) {
            Ok(cache) => cache,
            Err(PrefixFailure::Outside(reason)) => return Err(PrefixOpenError::Outside(reason)),
            Err(failure) => {
                return Err(PrefixOpenError::Setup(format!(
                    "it could not open {}: {failure}",
                    serde_json::to_string(config).unwrap_or_default()
                )))
            }
        };
        drive(cache, judge, steps, ops).map_err(setup)
    }
}

/// What a prefix campaign runs.
#[derive(Clone, Debug)]
pub struct PrefixRunSettings {
    /// The campaign's seed; case `i` draws from `(seed, i)`.
    pub seed: u64,
    /// Stop after this long (checked between cases).
    pub time: Option<Duration>,
    /// Stop after this many cases.
    pub cases: Option<u64>,
    /// Most drawn ops per case (a prologue of up to three starts comes
    /// first).
    pub max_ops: usize,
    /// The judge; `None`: the one the subject's policy calls for.
    pub judge: Option<Judge>,
    /// Most runs the minimizer spends on a failure.
    pub max_tests: usize,
    /// Which configs of a subject that opens any window get one
    /// (docs/contract.md §19, [`strategy::windowed_cases`]); a subject that
    /// opens only windowed configs always gets them.
    pub windows: Windows,
}

/// Which cases of a subject that opens any window (the shipped paged
/// cache) draw one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Windows {
    /// None: the full-attention campaign (`kvcheck prefix run`, `power`).
    #[default]
    Never,
    /// Every case (`kvcheck prefix run --windows`).
    Always,
    /// The odd cases (`kvcheck::check_prefix`: one call checks both).
    EveryOther,
}

impl Windows {
    /// Whether case `case` draws a window.
    pub fn in_case(self, case: u64) -> bool {
        match self {
            Windows::Never => false,
            Windows::Always => true,
            Windows::EveryOther => case % 2 == 1,
        }
    }
}

impl Default for PrefixRunSettings {
    fn default() -> PrefixRunSettings {
        PrefixRunSettings {
            seed: 0,
            time: None,
            cases: Some(256),
            max_ops: 40,
            judge: None,
            max_tests: 2_000,
            windows: Windows::Never,
        }
    }
}

/// The first failing case of a campaign.
#[derive(Debug)]
pub struct PrefixCaseFailure {
    /// Its index in the campaign.
    pub case: u64,
    /// Its config.
    pub config: PrefixConfig,
    /// The ops the driver ran, up to and including the failing one.
    pub ops: Vec<PrefixOp>,
    /// What failed.
    pub divergence: super::lockstep::PrefixDivergence,
    /// The minimized case, or why minimizing failed.
    pub minimized: Result<PrefixMinimized, PrefixMinimizeError>,
}

/// What a campaign did.
#[derive(Debug)]
pub struct PrefixRunReport {
    /// The subject's name.
    pub subject: String,
    /// The judge, in words.
    pub judge: String,
    /// Cases driven.
    pub cases: u64,
    /// Ops judged (the driver's computes included).
    pub ops: u64,
    /// Cases cut short by an `outside` answer.
    pub cut: u64,
    /// Cases whose config the subject declared outside its domain.
    pub skipped: u64,
    /// The first failure, if any: the campaign stops at it.
    pub failure: Option<PrefixCaseFailure>,
    /// A setup error that stopped the campaign.
    pub setup: Option<String>,
}

/// Case `case`'s random source.
fn rng(seed: u64, case: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&case.to_le_bytes());
    bytes[16..].copy_from_slice(b"kvcheck-prefix-c");
    TestRunner::new_with_rng(
        RunnerConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// Case `case` of a campaign of `seed` on a subject of `caps`, windowed
/// when `windows` is set and the subject opens any window.
pub fn draw_case(
    caps: &PrefixCapabilities,
    seed: u64,
    case: u64,
    max_ops: usize,
    windows: bool,
) -> (PrefixConfig, Vec<PrefixOp>) {
    let mut runner = rng(seed, case);
    let cases = match (windows, &caps.window) {
        (true, WindowCaps::Any) => strategy::windowed_cases(caps, max_ops),
        _ => strategy::cases(caps, max_ops),
    };
    cases
        .new_tree(&mut runner)
        .expect("the prefix strategies never reject")
        .current()
}

/// The order case `case` is driven in: a subject of free order gets every
/// other case as whole steps, whose computes always finish what was
/// allocated, so that forks, copies on write and full hits come often.
pub fn case_steps(caps: &PrefixCapabilities, case: u64) -> Steps {
    match (caps.steps, case % 2) {
        (Steps::Free, 0) => Steps::Free,
        _ => Steps::Whole,
    }
}

/// Runs a campaign on `subject`; `progress` is called after every case
/// with the report so far.
pub fn run(
    subject: &mut dyn PrefixSubject,
    settings: &PrefixRunSettings,
    progress: &mut dyn FnMut(&PrefixRunReport),
) -> PrefixRunReport {
    let caps = subject.capabilities();
    let judge = settings
        .judge
        .clone()
        .unwrap_or_else(|| Judge::for_policy(caps.policy));
    let mut report = PrefixRunReport {
        subject: subject.name(),
        judge: judge.describe(),
        cases: 0,
        ops: 0,
        cut: 0,
        skipped: 0,
        failure: None,
        setup: None,
    };
    let started = Instant::now();
    let mut case = 0u64;
    loop {
        if settings.cases.is_some_and(|n| case >= n)
            || settings.time.is_some_and(|t| started.elapsed() >= t)
        {
            return report;
        }
        let (config, ops) = draw_case(
            &caps,
            settings.seed,
            case,
            settings.max_ops,
            settings.windows.in_case(case),
        );
        let steps = case_steps(&caps, case);
        let driven = match subject.drive(&config, &judge, steps, &ops) {
            Ok(driven) => driven,
            Err(PrefixOpenError::Outside(_)) => {
                report.skipped += 1;
                case += 1;
                continue;
            }
            Err(PrefixOpenError::Setup(problem)) => {
                report.setup = Some(problem);
                return report;
            }
        };
        report.cases += 1;
        report.ops += driven.executed.len() as u64;
        report.cut += u64::from(driven.cut.is_some());
        if let Some(divergence) = driven.divergence {
            let mut again = |ops: &[PrefixOp]| {
                subject
                    .drive(&config, &judge, steps, ops)
                    .map_err(|e| PrefixMinimizeError::Subject(e.to_string()))
            };
            let minimized = minimize_driven(&config, &ops, &mut again, settings.max_tests);
            report.failure = Some(PrefixCaseFailure {
                case,
                config,
                ops: driven.executed,
                divergence,
                minimized,
            });
            progress(&report);
            return report;
        }
        progress(&report);
        case += 1;
    }
}
