//! The run engine: a [`Campaign`] over the profiles a subject opens, its
//! first divergence minimized and saved (or, keeping going, every distinct
//! finding triaged and minimized), and the [`RunReport`] of it all. `kvcheck
//! run` prints that report; [`crate::check()`] judges it for a cache in the
//! user's own crate.
//!
//! Steps, in the order [`Run::execute`] takes them: choose the profiles
//! ([`select_profiles`]), run the campaign, settle what it found
//! ([`Run::settle_first`], [`triage::settle`]), assemble the report.

use std::path::{Path, PathBuf};

use indicatif::ProgressBar;

use crate::check::relation::Relation;
use crate::engine::minimize::minimize_keeping;
use crate::engine::oracle::{Judged, Oracle};
use crate::engine::scale::{Campaign, CampaignError, CampaignOutcome, Found};
use crate::engine::strategy::{profile_support, required_events, PROFILES};
use crate::engine::triage;
use crate::report::{DivergenceReport, ProfileReport, RelationJudged, RunReport};
use crate::subject::{Capabilities, SubjectSpec};
use kvmodel::{Config, Variant};

/// Which profiles a run draws from: those named (all when none is), of
/// `variant` when given, that the subject (and a subject the oracle runs
/// beside it) can open.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Indices into [`PROFILES`], in table order.
    pub profiles: Vec<usize>,
    /// The profiles left out, each with why (`profile growth (…): config
    /// with growth: true`).
    pub skipped: Vec<String>,
}

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A name given is no profile.
    #[error("unknown profile {0:?} (kvcheck run --list)")]
    UnknownProfile(String),
    /// Nothing to run: no profile the subject can open was selected.
    #[error("no profile to run: {}", .skipped.join("; "))]
    NoProfile {
        /// Why each profile was left out.
        skipped: Vec<String>,
    },
    /// The subject (or the oracle's) could not say what it can express.
    #[error("cannot ask the subject for its capabilities: {0}")]
    Capabilities(#[source] crate::subject::SubjectFailure),
    /// A profile's cases could not be drawn or run.
    #[error(transparent)]
    Campaign(#[from] CampaignError),
}

/// The profiles of [`PROFILES`] named by `names` (every one when empty) and
/// of `variant` (when given) that `subject` can open, checked against
/// `oracle`: a profile the oracle's own subject cannot express is skipped
/// as one the subject cannot.
pub fn select_profiles(
    names: &[String],
    variant: Option<Variant>,
    subject: &SubjectSpec,
    oracle: &Oracle,
) -> Result<Selection, RunError> {
    if let Some(name) = names
        .iter()
        .find(|n| !PROFILES.iter().any(|p| p.name == *n))
    {
        return Err(RunError::UnknownProfile(name.clone()));
    }
    let capabilities = subject.capabilities().map_err(RunError::Capabilities)?;
    let theirs = match oracle.runs() {
        Some(other) => Some((
            other.name(&Config::dense(1)),
            other.capabilities().map_err(RunError::Capabilities)?,
        )),
        None => None,
    };
    let mut selection = Selection {
        profiles: Vec::new(),
        skipped: Vec::new(),
    };
    for (i, profile) in PROFILES.iter().enumerate() {
        let named = names.is_empty() || names.iter().any(|n| n == profile.name);
        let of_variant = variant.is_none_or(|v| v == profile_variant(i));
        if !(named && of_variant) {
            continue;
        }
        let why = match (profile_support(profile, &capabilities), &theirs) {
            (Err(why), _) => why.to_string(),
            (Ok(()), Some((name, other))) => {
                match profile_support(profile, &capabilities.shared_with(other)) {
                    Ok(()) => {
                        selection.profiles.push(i);
                        continue;
                    }
                    Err(why) => format!("by the oracle {name}: {}", why.what),
                }
            }
            (Ok(()), None) => {
                selection.profiles.push(i);
                continue;
            }
        };
        selection.skipped.push(why);
    }
    if selection.profiles.is_empty() {
        return Err(RunError::NoProfile {
            skipped: selection.skipped,
        });
    }
    Ok(selection)
}

/// The variant a profile's configurations have.
fn profile_variant(profile: usize) -> Variant {
    if PROFILES[profile].name == "packed" {
        Variant::Packed
    } else {
        Variant::Dense
    }
}

/// One run: the campaign and what is done with what it finds.
#[derive(Clone, Debug)]
pub struct Run {
    /// The cases, the subject and the oracle.
    pub campaign: Campaign,
    /// Triage mode: every divergence recorded, one of each signature
    /// minimized, in place of stopping at the first.
    pub keep_going: bool,
    /// Candidates the minimizer may try per divergence.
    pub max_tests: usize,
    /// The fewest judged ops a subject that answered *outside* must have
    /// served ([`RunReport::too_few_judged`]).
    pub min_judged: u64,
    /// Where the traces of divergences are saved.
    pub failures: PathBuf,
    /// How the first divergence's saved trace is replayed, where `kvcheck
    /// replay` cannot (a cache of the user's crate); `None`: `kvcheck
    /// replay`.
    pub replay: Option<ReplayCommand>,
}

/// A replay command around a trace's path: `before`, the path quoted for
/// a shell, `after` (`KVCHECK_REPLAY=` … ` cargo test my_cache`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayCommand {
    /// The words before the path.
    pub before: String,
    /// The words after it.
    pub after: String,
}

impl ReplayCommand {
    /// The command for the trace at `path`.
    pub fn of(&self, path: &Path) -> String {
        format!(
            "{}{}{}",
            self.before,
            shell_words::quote(&path.display().to_string()),
            self.after
        )
    }
}

impl Run {
    /// Runs the campaign and settles what it found into the report.
    /// `progress` follows the campaign; `say` gets the lines a user
    /// follows a run by (the first divergence as met, the minimizer's
    /// result, each triaged finding).
    pub fn execute(
        &self,
        progress: Option<&ProgressBar>,
        say: &dyn Fn(&str),
    ) -> Result<RunReport, RunError> {
        let campaign = &self.campaign;
        let capabilities = campaign
            .subject
            .capabilities()
            .map_err(RunError::Capabilities)?;
        let outcome = if self.keep_going {
            campaign.run_triage(progress)
        } else {
            campaign.run(progress)
        };
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        let mut outcome = outcome?;
        let diverged = outcome.found.as_ref().map(|found| found.profile);
        let divergence = outcome
            .found
            .take()
            .map(|found| self.settle_first(found, say));
        let mut divergences: Vec<String> =
            divergence.iter().filter_map(|d| d.trace.clone()).collect();
        if !outcome.triage.is_empty() {
            say(&format!(
                "{} divergences, {} distinct: minimizing one of each",
                outcome.triage.total(),
                outcome.triage.len()
            ));
        }
        let findings = triage::settle(
            &outcome.triage,
            &campaign.subject,
            &campaign.oracle,
            &self.failures,
            self.max_tests,
            |line| say(&line),
        );
        divergences.extend(findings.iter().filter_map(|f| f.minimized_trace.clone()));
        let mut report = RunReport {
            profiles: self.profile_rows(&outcome, diverged, &capabilities),
            elapsed_s: outcome.elapsed.as_secs_f64(),
            divergences,
            divergence,
            findings,
            min_judged: self.min_judged,
            ..RunReport::empty(
                campaign.subject.name(&Config::dense(1)),
                campaign.seed,
                campaign.max_ops,
                campaign.shard,
            )
        };
        report.warnings = report.domain().warning().into_iter().collect();
        Ok(report)
    }

    /// The table's rows, one per profile of the campaign.
    fn profile_rows(
        &self,
        outcome: &CampaignOutcome,
        diverged: Option<usize>,
        capabilities: &Capabilities,
    ) -> Vec<ProfileReport> {
        let subject = &self.campaign.subject;
        self.campaign
            .profiles
            .iter()
            .zip(&outcome.tallies)
            .map(|(&profile, t)| {
                let p = &PROFILES[profile];
                let cache = match profile_variant(profile) {
                    Variant::Packed => "packed",
                    Variant::Dense if *subject == SubjectSpec::Ring => "ring",
                    Variant::Dense => "dense",
                };
                ProfileReport {
                    name: p.name.to_string(),
                    cache: cache.to_string(),
                    cases: t.cases,
                    ops: t.ops,
                    busy_s: t.busy.as_secs_f64(),
                    divergences: if self.keep_going {
                        t.divergent
                    } else {
                        u64::from(diverged == Some(profile))
                    },
                    required: required_events(p, capabilities)
                        .iter()
                        .map(|e| e.to_string())
                        .collect(),
                    coverage: t.coverage.clone(),
                    judged: judged_rows(&t.judged),
                    domain: t.domain.clone(),
                }
            })
            .collect()
    }

    /// Minimizes the first divergence once against the campaign's oracle
    /// (same failure, fewer ops) and saves one trace of it: the minimized
    /// one, or the divergence as met when it does not minimize. One trace
    /// per divergence, so that replaying the folder shows each failure
    /// once. Says the divergence as met (before minimizing, which can take
    /// a while) and then the saved one's report.
    pub fn settle_first(&self, found: Found, say: &dyn Fn(&str)) -> DivergenceReport {
        let campaign = &self.campaign;
        let met = found.divergence;
        let first = format!(
            "profile {} case {}",
            PROFILES[found.profile].name, found.case
        );
        say(&format!(
            "first divergence: {first} (the run stopped there)"
        ));
        say(&met.to_string());
        let ops = met.trace.ops.len();
        let minimized = minimize_keeping(
            &met.trace,
            campaign.subject.clone(),
            &campaign.oracle,
            self.max_tests,
            |_| true,
        );
        let (mut kept, minimized_ops) = match minimized {
            Ok(minimized) => {
                say(&format!(
                    "minimized: {} -> {} ops in {} tests",
                    minimized.before.ops, minimized.after.ops, minimized.tests_run
                ));
                (minimized.divergence, Some(minimized.after.ops))
            }
            Err(e) => {
                say(&format!("not minimized: {e}"));
                (met, None)
            }
        };
        let trace = save(&mut kept, &self.failures, say);
        if let (Some(replay), Some(path)) = (&self.replay, &kept.saved) {
            kept.reproduce = Some(replay.of(path));
        }
        if minimized_ops.is_some() {
            say(&kept.to_string());
        } else if let (Some(path), Some(command)) = (&trace, kept.replay_command()) {
            // The report above is this divergence; only where it went is new.
            say(&format!("trace:    {path}\nreproduce: {command}"));
        }
        DivergenceReport {
            first,
            kind: kept.kind.name().to_string(),
            summary: kept.summary(),
            ops,
            minimized_ops,
            report: kept.to_string(),
            trace,
            reproduce: kept.replay_command(),
        }
    }
}

/// Saves `divergence` under `dir`; the path, or `None` said with why.
fn save(
    divergence: &mut crate::check::divergence::Divergence,
    dir: &Path,
    say: &dyn Fn(&str),
) -> Option<String> {
    match divergence.save_in(dir) {
        Ok(path) => Some(path.display().to_string()),
        Err(e) => {
            say(&format!("trace not saved: {e}"));
            None
        }
    }
}

/// A profile's relation rows for the report (none against the model or
/// another subject).
fn judged_rows(judged: &Judged) -> Vec<RelationJudged> {
    if judged.is_empty() {
        return Vec::new();
    }
    Relation::ALL
        .iter()
        .map(|&r| RelationJudged {
            relation: r.id().to_string(),
            name: r.name().to_string(),
            cases: judged.cases_of(r),
            ops: judged.ops_of(r),
        })
        .collect()
}
