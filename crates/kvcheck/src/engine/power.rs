//! The power of the engines: how many bugs of the zoo
//! ([`kvcache::fault::CacheFault`]) each engine catches, how fast, and how
//! short the minimized counterexample is.
//!
//! Four engines, each with fixed seeds so a table is reproducible:
//!
//! - `suites`: the property suites of every profile the fault's variant
//!   allows, at the default budgets (256 cases of at most 40 ops);
//! - `run`: a campaign over the same profiles, round robin, until the first
//!   divergence or the time budget;
//! - `explore`: breadth-first exploration of a small configuration where
//!   the fault can show ([`explore_config`]), deepening one op at a time up
//!   to [`EXPLORE_DEPTH`];
//! - `fuzz`: coverage-guided fuzzing of the `fault_lockstep` cargo-fuzz
//!   target with the fault chosen by `KVCHECK_FAULT` (run by the CLI, which
//!   owns the process; see `docs/power.md`).
//!
//! A row of the table is a [`Target`]: a fault injected into a correct
//! cache ([`FaultBase`]: the shipped caches, the same on the device-generic
//! path, or the `RingCache`), or that correct cache alone — the control
//! row, on which every engine must find nothing.

pub mod relations;

use std::time::{Duration, Instant};

use kvcache::fault::{CacheFault, FaultBase};
use kvmodel::{Config, Dtype, PackedPolicy, Quant};
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

use crate::check::divergence::Divergence;
use crate::engine::case::draw_and_run;
use crate::engine::explore::Explorer;
use crate::engine::minimize::minimize;
use crate::engine::oracle::Oracle;
use crate::engine::strategy::{profile_support, PROFILES};
use crate::engine::suite::{check_profile, SuiteSettings};
use crate::subject::{Capabilities, SubjectSpec};

/// The deepest exploration the `explore` engine tries.
pub const EXPLORE_DEPTH: usize = 4;

/// Candidates the minimizer may try per catch.
const MINIMIZE_TESTS: usize = 400;

/// An engine of the power table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The property suites at default budgets.
    Suites,
    /// A `kvcheck run` campaign.
    Run,
    /// Breadth-first exploration.
    Explore,
    /// Coverage-guided fuzzing of `fault_lockstep`.
    Fuzz,
}

impl Engine {
    /// Every engine, in table order.
    pub const ALL: [Engine; 4] = [Engine::Suites, Engine::Run, Engine::Explore, Engine::Fuzz];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Suites => "suites",
            Engine::Run => "run",
            Engine::Explore => "explore",
            Engine::Fuzz => "fuzz",
        }
    }

    /// What the engine counts until its first catch.
    pub fn unit(self) -> &'static str {
        match self {
            Engine::Suites => "profiles",
            Engine::Run => "cases",
            Engine::Explore => "states",
            Engine::Fuzz => "execs",
        }
    }

    /// Parses an engine name.
    pub fn parse(text: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == text)
    }
}

/// What one row of the power table checks: `fault` injected into `base`,
/// or, without a fault, `base` alone (the control row).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The bug of the zoo; `None` for the control row.
    pub fault: Option<CacheFault>,
    /// The correct cache underneath.
    pub base: FaultBase,
}

impl Target {
    /// `fault` injected into `base`.
    pub fn fault(fault: CacheFault, base: FaultBase) -> Target {
        Target {
            fault: Some(fault),
            base,
        }
    }

    /// The correct cache `base` alone.
    pub fn control(base: FaultBase) -> Target {
        Target { fault: None, base }
    }

    /// The subject the engines check: the faulty cache, or for the control
    /// row `cache`, `cache:generic` or `cache:ring`.
    pub fn subject(&self) -> SubjectSpec {
        match (self.fault, self.base) {
            (Some(fault), base) => SubjectSpec::cache_fault(fault, base),
            (None, FaultBase::Shipped) => SubjectSpec::Cache,
            (None, FaultBase::Generic) => SubjectSpec::CachePath(kvcache::Path::Generic),
            (None, FaultBase::Ring) => SubjectSpec::Ring,
        }
    }

    /// The row's name: the fault's, or `control:` and the subject.
    pub fn name(&self) -> String {
        match self.fault {
            Some(fault) => fault.name().to_string(),
            None => format!("control:{}", self.subject()),
        }
    }

    /// What the row checks, in one line.
    pub fn doc(&self) -> String {
        match self.fault {
            Some(fault) => fault.doc().to_string(),
            None => format!(
                "the correct {} cache alone: every engine must find nothing",
                self.base
            ),
        }
    }

    /// The configuration the `explore` engine searches.
    pub fn explore_config(&self) -> Config {
        match self.fault {
            Some(fault) => explore_config(fault),
            None => Config {
                sink: 1,
                ..Config::dense(3)
            },
        }
    }
}

impl From<CacheFault> for Target {
    /// The fault on the shipped caches.
    fn from(fault: CacheFault) -> Target {
        Target::fault(fault, FaultBase::Shipped)
    }
}

use crate::report::Catch;

impl Catch {
    fn escaped(work: u64, started: Instant, note: impl Into<String>) -> Catch {
        Catch {
            caught: false,
            work,
            seconds: started.elapsed().as_secs_f64(),
            minimized_ops: None,
            note: note.into(),
        }
    }

    fn found(work: u64, started: Instant, divergence: &Divergence, subject: &SubjectSpec) -> Catch {
        let seconds = started.elapsed().as_secs_f64();
        let minimized_ops = minimize(&divergence.trace, subject.clone(), MINIMIZE_TESTS)
            .ok()
            .map(|m| m.trace.ops.len());
        Catch {
            caught: true,
            work,
            seconds,
            minimized_ops,
            note: divergence.summary(),
        }
    }
}

/// A small configuration on which `fault` can show within
/// [`EXPLORE_DEPTH`] ops: the explorer's configuration for it.
pub fn explore_config(fault: CacheFault) -> Config {
    let packed = |keep_recent_chunks, quant, sink| Config {
        head_dim: 4,
        sink,
        packed: Some(PackedPolicy {
            keep_recent_chunks,
            quant,
            pack_sink: false,
        }),
        ..Config::packed(8)
    };
    let sink = |capacity, sink| Config {
        sink,
        ..Config::dense(capacity)
    };
    match fault {
        CacheFault::WindowDropsSink => Config {
            window: Some(2),
            ..sink(4, 1)
        },
        CacheFault::GrowthKeepsWindow => Config {
            growth: true,
            ..Config::dense(2)
        },
        CacheFault::HeadStartIgnored => Config {
            heads: 2,
            ..Config::dense(2)
        },
        CacheFault::PinLostOnMisalignedRoll => sink(5, 1),
        CacheFault::PinDuplicatedInView => sink(3, 1),
        CacheFault::RollOneShort => Config {
            head_dim: 2,
            ..sink(3, 1)
        },
        CacheFault::RollCrossesBatch => Config {
            batch: 2,
            ..sink(3, 1)
        },
        CacheFault::PackedReturnsEveryHead => Config {
            heads: 2,
            ..packed(1, Quant::None, 0)
        },
        CacheFault::KeepRecentCountsCurrent => packed(1, Quant::Int8, 0),
        CacheFault::SinkChunkPacked => packed(0, Quant::Int8, 1),
        CacheFault::Int4NibblesSwapped => packed(0, Quant::Int4, 0),
        CacheFault::ScaleReciprocal => Config {
            head_dim: 8,
            dtype: Dtype::F32,
            ..packed(0, Quant::Int8, 0)
        },
        _ => sink(3, 1),
    }
}

/// The property suites of every profile `target`'s subject allows, with
/// `settings`' budgets; stops at the first profile that diverges.
pub fn suites(target: Target, settings: &SuiteSettings) -> Catch {
    let started = Instant::now();
    let subject = target.subject();
    let settings = settings.clone().with_subject(subject.clone());
    let capabilities = match subject.capabilities() {
        Ok(c) => c,
        Err(e) => return Catch::escaped(0, started, e.to_string()),
    };
    let mut ran = 0;
    for profile in PROFILES {
        if profile_support(profile, &capabilities).is_err() {
            continue;
        }
        ran += 1;
        if let Err(error) = check_profile(profile, &settings) {
            let message = error.to_string();
            let first = message
                .lines()
                .find(|l| l.contains("divergence"))
                .unwrap_or("");
            return Catch {
                caught: true,
                work: ran,
                seconds: started.elapsed().as_secs_f64(),
                minimized_ops: None,
                note: format!(
                    "{}: {}",
                    profile.name,
                    first.trim_matches(|c| c == '─' || c == ' ')
                ),
            };
        }
    }
    Catch::escaped(ran, started, "every profile passed")
}

/// A campaign over the profiles `target`'s subject allows, round robin
/// from `seed`, until the first divergence or `budget`.
pub fn run(target: Target, seed: u64, budget: Duration, max_ops: usize) -> Catch {
    let started = Instant::now();
    let subject = target.subject();
    let Ok(capabilities) = subject.capabilities() else {
        return Catch::escaped(0, started, "no capabilities");
    };
    let (selected, mut runners) = profile_runners(&capabilities, seed);
    if selected.is_empty() {
        return Catch::escaped(0, started, "no profile fits the subject");
    }
    let mut cases = 0u64;
    while started.elapsed() < budget {
        for (slot, &profile) in selected.iter().enumerate() {
            cases += 1;
            let model = Oracle::model();
            match draw_and_run(
                &PROFILES[profile],
                &mut runners[slot],
                max_ops,
                &subject,
                &model,
            ) {
                Err(e) => return Catch::escaped(cases, started, e.to_string()),
                Ok(outcome) => {
                    if let Some(divergence) = outcome.divergence {
                        return Catch::found(cases, started, &divergence, &subject);
                    }
                }
            }
        }
    }
    Catch::escaped(cases, started, "time budget spent")
}

/// The profiles a subject with `capabilities` can run (indices into
/// [`PROFILES`]) and a runner for each, seeded from `seed` and the
/// profile: the `run` engine's draws, round robin.
pub fn profile_runners(capabilities: &Capabilities, seed: u64) -> (Vec<usize>, Vec<TestRunner>) {
    let selected: Vec<usize> = (0..PROFILES.len())
        .filter(|&i| profile_support(&PROFILES[i], capabilities).is_ok())
        .collect();
    let runners = selected
        .iter()
        .map(|&i| {
            TestRunner::new(ProptestConfig {
                rng_seed: RngSeed::Fixed(seed ^ (i as u64) << 32),
                ..ProptestConfig::default()
            })
        })
        .collect();
    (selected, runners)
}

/// Breadth-first exploration of [`Target::explore_config`], one depth at a
/// time up to `max_depth`, within `budget`. The work counts the states of the depths
/// explored in full before the catch (a lower bound on the states the
/// search needed).
pub fn explore(target: Target, max_depth: usize, budget: Duration) -> Catch {
    let started = Instant::now();
    let subject = target.subject();
    let config = target.explore_config();
    let mut states = 0u64;
    for depth in 1..=max_depth {
        let left = budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Catch::escaped(
                states,
                started,
                format!("time budget spent at depth {depth}"),
            );
        }
        match Explorer::new(&config, subject.clone())
            .depth(depth)
            .time_limit(Some(left))
            .run()
        {
            Err(divergence) => return Catch::found(states, started, &divergence, &subject),
            Ok(report) => {
                states += report.states;
                if report.timed_out {
                    return Catch::escaped(
                        states,
                        started,
                        format!("time budget spent at depth {depth}"),
                    );
                }
            }
        }
    }
    Catch::escaped(states, started, format!("nothing up to depth {max_depth}"))
}
