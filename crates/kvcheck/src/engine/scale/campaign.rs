//! The `run` campaign on every core: workers draw cases from one shared
//! counter, each case seeded from its own index.
//!
//! Case `k` of a campaign over `n` profiles is case `k / n` of profile
//! `k % n` (the profiles take turns, as a single worker would), and its ops
//! come from [`case_seed`]`(seed, profile, k / n)`. Which worker runs it
//! changes nothing, so a `--cases` budget checks the same cases for any
//! number of workers, a [`Shard`] keeps the case indices it
//! [contains](Shard::contains), and a divergence replays from its trace
//! alone.
//!
//! The first divergence stops every worker: a worker that draws a case
//! after the earliest divergent case known so far stops, so the divergence
//! reported is the one of the lowest case index among those that ran.
//! In triage mode ([`Campaign::run_triage`]) nothing stops the workers but
//! the budget: every divergence goes to the outcome's [`Triage`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

use super::jobs::case_seed;
use crate::check::coverage::Coverage;
use crate::check::divergence::Divergence;
use crate::engine::case::{draw_and_run, CaseError};
use crate::engine::oracle::Judged;
use crate::engine::oracle::Oracle;
use crate::engine::strategy::PROFILES;
use crate::engine::triage::Triage;
use crate::report::shard::Shard;
use crate::report::DomainTally;
use crate::subject::SubjectSpec;

/// A checking campaign over some profiles.
#[derive(Clone, Debug)]
pub struct Campaign {
    /// Seed of the whole campaign.
    pub seed: u64,
    /// Indices into [`PROFILES`] of the profiles that take turns.
    pub profiles: Vec<usize>,
    /// Longest op sequence of a case.
    pub max_ops: usize,
    /// Cases per profile (before sharding); `None`: until the time budget.
    pub cases: Option<u64>,
    /// Wall-time budget.
    pub budget: Duration,
    /// Worker threads (at least 1).
    pub jobs: usize,
    /// The case indices this campaign runs.
    pub shard: Shard,
    /// What is checked.
    pub subject: SubjectSpec,
    /// What it is checked against (the model, its own runs, another subject).
    pub oracle: Oracle,
}

/// What a campaign did with one profile.
#[derive(Clone, Debug, Default)]
pub struct ProfileTally {
    /// Cases checked.
    pub cases: u64,
    /// Ops checked.
    pub ops: u64,
    /// Worker time spent on its cases (summed over workers).
    pub busy: Duration,
    /// Events labelled.
    pub coverage: Coverage,
    /// Cases that diverged.
    pub divergent: u64,
    /// What each relation judged (against `self` only).
    pub judged: Judged,
    /// Drawn ops, and those outside the subject's domain.
    pub domain: DomainTally,
}

impl ProfileTally {
    fn add(&mut self, other: &ProfileTally) {
        self.domain.add(&other.domain);
        self.divergent += other.divergent;
        self.cases += other.cases;
        self.ops += other.ops;
        self.busy += other.busy;
        self.coverage.merge(&other.coverage);
        self.judged.merge(&other.judged);
    }
}

/// The first divergence of a campaign.
#[derive(Debug)]
pub struct Found {
    /// Index into [`PROFILES`].
    pub profile: usize,
    /// The case's index within its profile.
    pub case: u64,
    /// The divergence (its trace replays it alone).
    pub divergence: Box<Divergence>,
}

/// The result of [`Campaign::run`].
#[derive(Debug)]
pub struct CampaignOutcome {
    /// One tally per entry of [`Campaign::profiles`], same order.
    pub tallies: Vec<ProfileTally>,
    /// Wall time.
    pub elapsed: Duration,
    /// The divergence of the lowest case index that ran, if any (none in
    /// triage mode).
    pub found: Option<Found>,
    /// Triage mode: every divergence, grouped by signature.
    pub triage: Triage,
}

impl CampaignOutcome {
    /// Ops checked over every profile.
    pub fn total_ops(&self) -> u64 {
        self.tallies.iter().map(|t| t.ops).sum()
    }

    /// Cases checked over every profile.
    pub fn total_cases(&self) -> u64 {
        self.tallies.iter().map(|t| t.cases).sum()
    }

    /// Every profile's tally added up.
    pub fn total(&self) -> ProfileTally {
        let mut total = ProfileTally::default();
        for tally in &self.tallies {
            total.add(tally);
        }
        total
    }

    /// What each relation judged over every profile.
    pub fn judged(&self) -> Judged {
        let mut judged = Judged::default();
        for tally in &self.tallies {
            judged.merge(&tally.judged);
        }
        judged
    }
}

/// Why a campaign stopped without an outcome: the cases of a profile could
/// not be drawn or run (the first such error of any worker).
#[derive(Debug, thiserror::Error)]
#[error("profile {profile}: {source}")]
pub struct CampaignError {
    /// The profile whose case failed.
    pub profile: &'static str,
    /// Why the case could not be drawn or run.
    pub source: CaseError,
}

/// The campaign's shared stop conditions.
struct Control {
    next: AtomicU64,
    /// Lowest case number (`k`) that diverged; `u64::MAX` while none did.
    first_divergence: AtomicU64,
    failed: AtomicBool,
    ops: AtomicU64,
}

impl Campaign {
    /// Runs the campaign on [`Campaign::jobs`] threads. `progress` gets the
    /// elapsed milliseconds as position and the ops checked as message.
    /// `Err` names a profile whose cases cannot be drawn or run.
    pub fn run(&self, progress: Option<&ProgressBar>) -> Result<CampaignOutcome, CampaignError> {
        self.run_mode(progress, false)
    }

    /// [`Campaign::run`] in triage mode: every divergence is recorded in
    /// the outcome's [`Triage`] and the campaign goes on until its cases or
    /// its budget are spent; `found` stays `None`. A new signature is
    /// printed above `progress` when it is met.
    pub fn run_triage(
        &self,
        progress: Option<&ProgressBar>,
    ) -> Result<CampaignOutcome, CampaignError> {
        self.run_mode(progress, true)
    }

    fn run_mode(
        &self,
        progress: Option<&ProgressBar>,
        keep_going: bool,
    ) -> Result<CampaignOutcome, CampaignError> {
        let started = Instant::now();
        let control = Control {
            next: AtomicU64::new(0),
            first_divergence: AtomicU64::new(u64::MAX),
            failed: AtomicBool::new(false),
            ops: AtomicU64::new(0),
        };
        let found: Mutex<Vec<(u64, Found)>> = Mutex::new(Vec::new());
        let triage = Mutex::new(Triage::new());
        let error: Mutex<Option<CampaignError>> = Mutex::new(None);
        let tallies: Vec<ProfileTally> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.jobs.max(1))
                .map(|worker| {
                    let sinks = (&found, &triage, &error);
                    let control = &control;
                    let first = worker == 0;
                    scope.spawn(move || {
                        self.worker((first, keep_going), started, control, sinks, progress)
                    })
                })
                .collect();
            let mut total = vec![ProfileTally::default(); self.profiles.len()];
            for worker in workers {
                let part = worker
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                for (sum, t) in total.iter_mut().zip(&part) {
                    sum.add(t);
                }
            }
            total
        });
        if let Some(e) = error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
        let mut found = found.into_inner().unwrap_or_else(|e| e.into_inner());
        found.sort_by_key(|(k, _)| *k);
        Ok(CampaignOutcome {
            tallies,
            elapsed: started.elapsed(),
            found: found.into_iter().next().map(|(_, f)| f),
            triage: triage.into_inner().unwrap_or_else(|e| e.into_inner()),
        })
    }

    fn worker(
        &self,
        (reports_progress, keep_going): (bool, bool),
        started: Instant,
        control: &Control,
        (found, triage, error): Sinks<'_>,
        progress: Option<&ProgressBar>,
    ) -> Vec<ProfileTally> {
        let n = self.profiles.len() as u64;
        let mut tallies = vec![ProfileTally::default(); self.profiles.len()];
        if n == 0 {
            return tallies;
        }
        loop {
            if control.failed.load(Ordering::Relaxed) || started.elapsed() >= self.budget {
                break;
            }
            let k = control.next.fetch_add(1, Ordering::Relaxed);
            if k > control.first_divergence.load(Ordering::Relaxed) {
                break;
            }
            let (slot, index) = ((k % n) as usize, k / n);
            if self.cases.is_some_and(|max| index >= max) {
                break;
            }
            if !self.shard.contains(index as usize) {
                continue;
            }
            let profile = self.profiles[slot];
            let mut runner = TestRunner::new(ProptestConfig {
                rng_seed: RngSeed::Fixed(case_seed(self.seed, profile, index)),
                ..ProptestConfig::default()
            });
            let case_started = Instant::now();
            let outcome = match draw_and_run(
                &PROFILES[profile],
                &mut runner,
                self.max_ops,
                &self.subject,
                &self.oracle,
            ) {
                Ok(outcome) => outcome,
                Err(source) => {
                    control.failed.store(true, Ordering::Relaxed);
                    let mut slot = error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(CampaignError {
                        profile: PROFILES[profile].name,
                        source,
                    });
                    break;
                }
            };
            let tally = &mut tallies[slot];
            tally.busy += case_started.elapsed();
            tally.cases += 1;
            tally.ops += outcome.ops_checked as u64;
            let cut = outcome.cut.as_ref().map(|c| (c.step, c.suggestion));
            tally.domain.count(outcome.drawn, outcome.served, cut);
            tally.coverage.merge(&outcome.coverage);
            tally.judged.merge(&outcome.judged);
            let ops = control
                .ops
                .fetch_add(outcome.ops_checked as u64, Ordering::Relaxed)
                + outcome.ops_checked as u64;
            if let Some(divergence) = outcome.divergence {
                tally.divergent += 1;
                if keep_going {
                    self.record(k, divergence, triage, progress);
                } else {
                    control.first_divergence.fetch_min(k, Ordering::Relaxed);
                    found.lock().unwrap_or_else(|e| e.into_inner()).push((
                        k,
                        Found {
                            profile,
                            case: index,
                            divergence,
                        },
                    ));
                }
            }
            if let Some(bar) = progress.filter(|_| reports_progress) {
                bar.set_position(started.elapsed().as_millis() as u64);
                bar.set_message(format!("{ops} ops checked"));
            }
        }
        tallies
    }

    /// Triage mode: records a divergence of case `k`; a new signature is
    /// announced above the progress bar, so a long campaign shows what it
    /// finds as it goes.
    fn record(
        &self,
        k: u64,
        divergence: Box<Divergence>,
        triage: &Mutex<Triage>,
        progress: Option<&ProgressBar>,
    ) {
        let n = self.profiles.len() as u64;
        let (profile, index) = (self.profiles[(k % n) as usize], k / n);
        let first = || format!("{} case {index}", PROFILES[profile].name);
        let mut triage = triage.lock().unwrap_or_else(|e| e.into_inner());
        let new = triage.record(k, first, divergence);
        let (distinct, total) = (triage.len(), triage.total());
        drop(triage);
        if let Some(bar) = progress {
            if let Some(signature) = new {
                bar.suspend(|| {
                    eprintln!(
                        "new finding #{distinct}: {signature} ({} case {index})",
                        PROFILES[profile].name
                    )
                });
            }
            bar.set_prefix(format!("{total} divergences, {distinct} distinct"));
        }
    }
}

/// Where workers put what they find: the first divergences, the triage,
/// the first error.
type Sinks<'a> = (
    &'a Mutex<Vec<(u64, Found)>>,
    &'a Mutex<Triage>,
    &'a Mutex<Option<CampaignError>>,
);
