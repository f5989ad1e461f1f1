//! `kvcheck prefix`: the engines of the prefix family on any prefix
//! subject (the shipped paged cache, one of its planted faults, or a
//! process speaking the prefix family of kvcheck-subject/1): `run` a
//! campaign, `replay` a trace.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvcache::fault::PrefixFault;
use kvcheck::engine::prefix::campaign::{
    self, PagedSubject, PrefixCaseFailure, PrefixRunSettings, PrefixSubject,
};
use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::invariants::Invariant;
use kvcheck::engine::prefix::subject::Steps;
use kvcheck::engine::prefix::{self as family};
use kvcheck::settings::Settings;
use kvcheck::subject::ExecPrefixSubject;

use super::{failures_dir, CliError};

/// A prefix subject named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixSubjectSpec {
    /// The shipped paged cache.
    Paged,
    /// The paged cache with a planted fault.
    Fault(PrefixFault),
    /// A process.
    Exec(String),
}

impl std::str::FromStr for PrefixSubjectSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<PrefixSubjectSpec, String> {
        if text == "paged" {
            return Ok(PrefixSubjectSpec::Paged);
        }
        if let Some(command) = text.strip_prefix("exec:") {
            return match command.trim().is_empty() {
                true => Err("exec: needs a command".into()),
                false => Ok(PrefixSubjectSpec::Exec(command.to_string())),
            };
        }
        if let Some(name) = text.strip_prefix("fault:") {
            return PrefixFault::from_name(name)
                .map(PrefixSubjectSpec::Fault)
                .ok_or_else(|| {
                    format!(
                        "unknown paged fault {name:?}: expected one of {}",
                        fault_names()
                    )
                });
        }
        Err(format!(
            "unknown prefix subject {text:?}: expected paged, fault:NAME (NAME one of {}) or exec:'COMMAND ARGS'",
            fault_names()
        ))
    }
}

fn fault_names() -> String {
    PrefixFault::ALL.map(PrefixFault::name).join(", ")
}

/// The judge named on the command line.
fn parse_judge(text: &str) -> Result<JudgeName, String> {
    match text {
        "model" => Ok(JudgeName::Model),
        "invariants" => Ok(JudgeName::Invariants),
        _ => Err(format!(
            "unknown judge {text:?}: expected model or invariants"
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JudgeName {
    Model,
    Invariants,
}

fn parse_invariant(text: &str) -> Result<Invariant, String> {
    Invariant::from_id(text).ok_or_else(|| {
        let ids: Vec<_> = Invariant::ALL.iter().map(|i| i.id()).collect();
        format!(
            "unknown invariant {text:?}: expected one of {}",
            ids.join(", ")
        )
    })
}

/// Where the subject and its judge come from, for every `prefix` command.
#[derive(clap::Args, Debug, Clone)]
pub struct PrefixSubjectArgs {
    /// The prefix cache checked: `paged` (the shipped PagedCache),
    /// `fault:NAME` (it with a planted fault: trust-weak-hash,
    /// skip-copy-on-write, hit-stays-evictable) or `exec:'COMMAND ARGS'`
    /// (a process speaking the prefix family, docs/subject-protocol.md).
    #[arg(long, default_value = "paged")]
    subject: PrefixSubjectSpec,
    /// Seconds an `exec:` subject has for each response [default:
    /// $KVCHECK_SUBJECT_TIMEOUT, else 10].
    #[arg(long, value_parser = kvcheck::subject::parse_timeout)]
    subject_timeout: Option<Duration>,
    /// `model` (op by op, exactly) or `invariants` (docs/contract.md §17,
    /// whatever the eviction policy) [default: what the subject's policy
    /// calls for: model for `contract`, invariants for `own`].
    #[arg(long, value_parser = parse_judge)]
    judge: Option<JudgeName>,
    /// An invariant the `invariants` judge does not check (P1, P2, P3, P4,
    /// P5, P7, P8, P9, refusals); repeat or separate with commas. For a
    /// departure the library makes by design, so the rest stay judged.
    #[arg(long, value_delimiter = ',', value_parser = parse_invariant)]
    waive: Vec<Invariant>,
}

impl PrefixSubjectArgs {
    pub(super) fn open(&self, settings: &Settings) -> Result<Box<dyn PrefixSubject>, CliError> {
        Ok(match &self.subject {
            PrefixSubjectSpec::Paged => Box::new(PagedSubject { fault: None }),
            PrefixSubjectSpec::Fault(fault) => Box::new(PagedSubject {
                fault: Some(*fault),
            }),
            PrefixSubjectSpec::Exec(command) => {
                let timeout = self.subject_timeout.unwrap_or(settings.subject_timeout);
                Box::new(
                    ExecPrefixSubject::spawn(command, timeout)
                        .map_err(|e| CliError::PrefixSubject(format!("exec:{command}: {e}")))?,
                )
            }
        })
    }

    /// The subject as named.
    pub(super) fn spec(&self) -> &PrefixSubjectSpec {
        &self.subject
    }

    pub(super) fn judge(&self) -> Result<Option<Judge>, CliError> {
        let waived: BTreeSet<Invariant> = self.waive.iter().copied().collect();
        match self.judge {
            Some(JudgeName::Model) if !waived.is_empty() => Err(CliError::PrefixSubject(
                "--waive applies to the invariants judge; the model judges everything".into(),
            )),
            Some(JudgeName::Model) => Ok(Some(Judge::Model)),
            Some(JudgeName::Invariants) => Ok(Some(Judge::Invariants(waived))),
            None if waived.is_empty() => Ok(None),
            None => Ok(Some(Judge::Invariants(waived))),
        }
    }
}

/// `kvcheck prefix`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: PrefixCommand,
}

#[derive(Subcommand, Debug)]
enum PrefixCommand {
    /// Run a campaign of random cases on a prefix subject; the first
    /// failure is minimized and saved.
    #[command(
        after_help = "Examples:\n  kvcheck prefix run --time 30\n  kvcheck prefix run --subject fault:skip-copy-on-write --cases 500\n  kvcheck prefix run --subject exec:'python3 adapters/reference_prefix_subject.py' --time 20\n  kvcheck prefix run --subject exec:'adapters/vllm/.venv/bin/python adapters/vllm/subject.py' --judge invariants --waive P5\n\nExit status: 0 no failure, 1 a failure (its minimized trace is saved under --out), 2 bad arguments or a subject that cannot be set up."
    )]
    Run(RunArgs),
    /// Replay prefix traces on a prefix subject under a judge.
    #[command(
        after_help = "Examples:\n  kvcheck prefix replay failure.kvtrace.json --subject exec:'python3 adapters/reference_prefix_subject.py'\n\nExit status: 0 every trace passed, 1 a failure, 2 an unreadable trace or a subject that cannot be set up."
    )]
    Replay(ReplayArgs),
    /// Serve the paged cache (or one of its faults) as a prefix subject
    /// process on stdin and stdout.
    #[command(
        after_help = "Examples:\n  kvcheck prefix run --subject exec:'kvcheck prefix serve --subject fault:trust-weak-hash' --judge invariants\n\nExit status: 0 at end of input or close, 2 an exec: subject given."
    )]
    Serve(ServeArgs),
    /// Measure the prefix judges on the paged cache's zoo of planted
    /// faults: a table fault × judge, and the shipped cache as control.
    #[command(
        after_help = "Examples:\n  kvcheck prefix power\n  kvcheck prefix power --cases 5000 --seed 7\n\nExit status: 0 every fault caught by both judges and the control row clean, 1 a fault escaped a judge or a false alarm."
    )]
    Power(super::prefix_power::PowerArgs),
    /// Explore every sequence of a small op alphabet up to a depth on
    /// small configs, breadth first; the first failing path minimized.
    #[command(
        after_help = "Examples:\n  kvcheck prefix explore --depth 5\n  kvcheck prefix explore --depth 4 --subject fault:skip-copy-on-write\n  kvcheck prefix explore --depth 4 --blocks 3 --block-size 2 --subject exec:'python3 adapters/reference_prefix_subject.py'\n\nStates are the model's, canonical (last uses as ranks): a state reached twice is expanded once.\nExit status: 0 no failure, 1 a failure (saved under --out), 2 bad arguments or a subject that cannot be set up."
    )]
    Explore(super::prefix_explore::ExploreArgs),
    /// Walk a prefix trace op by op: the model's state after each op, up
    /// to the subject's first failure.
    #[command(
        after_help = "Examples:\n  kvcheck prefix explain failure.kvtrace.json --subject fault:skip-copy-on-write\n\nExit status: 0 no failure, 1 a failure, 2 an unreadable trace or a subject that cannot be set up."
    )]
    Explain(super::prefix_explain::ExplainArgs),
}

/// `kvcheck prefix serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// `paged` or `fault:NAME`.
    #[arg(long, default_value = "paged")]
    subject: PrefixSubjectSpec,
}

/// `kvcheck prefix run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    subject: PrefixSubjectArgs,
    /// Stop after this many seconds (checked between cases).
    #[arg(long)]
    time: Option<f64>,
    /// Stop after this many cases [default: 256 without --time].
    #[arg(long)]
    cases: Option<u64>,
    /// The campaign's seed: case i always draws the same config and ops.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most drawn ops per case, after a prologue of up to three starts.
    #[arg(long, default_value_t = 40)]
    max_ops: usize,
    /// Most runs the minimizer spends on the failure.
    #[arg(long, default_value_t = 2_000)]
    max_tests: usize,
    /// Directory for the failure's trace [default: target/kvcheck-failures
    /// in a checkout of kvcheck, else kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `kvcheck prefix replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// Prefix traces (kvtrace/1, `"variant": "prefix"`), or folders of
    /// `*.kvtrace.json` files.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    subject: PrefixSubjectArgs,
}

/// Runs `kvcheck prefix`.
pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    match args.command {
        PrefixCommand::Run(args) => run_campaign(args, settings),
        PrefixCommand::Replay(args) => replay(args, settings),
        PrefixCommand::Serve(args) => super::prefix_serve::serve(&args.subject),
        PrefixCommand::Power(args) => super::prefix_power::run(args),
        PrefixCommand::Explore(args) => super::prefix_explore::run(args, settings),
        PrefixCommand::Explain(args) => super::prefix_explain::run(args, settings),
    }
}

fn run_campaign(args: RunArgs, settings: &Settings) -> Result<(), CliError> {
    let time = match args.time {
        Some(t) if !(t > 0.0 && t.is_finite()) => return Err(CliError::InvalidTime(t)),
        t => t.map(Duration::from_secs_f64),
    };
    let run_settings = PrefixRunSettings {
        seed: args.seed,
        time,
        cases: args.cases.or(if time.is_some() { None } else { Some(256) }),
        max_ops: args.max_ops,
        judge: args.subject.judge()?,
        max_tests: args.max_tests,
    };
    let mut subject = args.subject.open(settings)?;
    let bar = ProgressBar::with_draw_target(run_settings.cases, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {pos} cases {msg}")
            .expect("a valid template"),
    );
    eprintln!(
        "kvcheck prefix run: {} judged by {}, seed {}",
        subject.name(),
        run_settings
            .judge
            .clone()
            .unwrap_or_else(|| Judge::for_policy(subject.capabilities().policy))
            .describe(),
        args.seed
    );
    let report = campaign::run(subject.as_mut(), &run_settings, &mut |r| {
        bar.set_position(r.cases + r.skipped);
        bar.set_message(format!("{} ops, {} cut", r.ops, r.cut));
    });
    bar.finish_and_clear();
    println!(
        "{}: {} cases, {} ops judged by {}; {} cut by an outside answer, {} configs outside its domain",
        report.subject, report.cases, report.ops, report.judge, report.cut, report.skipped
    );
    if let Some(problem) = report.setup {
        return Err(CliError::PrefixSubject(format!(
            "{}: {problem}",
            report.subject
        )));
    }
    let Some(failure) = report.failure else {
        println!("no failure");
        return Ok(());
    };
    let name = format!("prefix-seed{}-case{}", args.seed, failure.case);
    save_failure(failure, &name, args.out, &args.subject.subject, settings)
}

/// Prints a failure and its minimized form, saves the trace as
/// `NAME.kvtrace.json` under the failures folder with the line that
/// replays it, and returns the failing status.
pub(super) fn save_failure(
    failure: PrefixCaseFailure,
    name: &str,
    out: Option<PathBuf>,
    spec: &PrefixSubjectSpec,
    settings: &Settings,
) -> Result<(), CliError> {
    println!(
        "failed after {} ops:\n{}",
        failure.ops.len(),
        failure.divergence
    );
    let trace = match failure.minimized {
        Ok(minimized) => {
            println!(
                "minimized from {} to {} ops in {} runs:\n{}",
                minimized.before, minimized.after, minimized.tests_run, minimized.divergence
            );
            minimized.trace
        }
        Err(e) => {
            println!("(not minimized: {e})");
            let mut trace = kvmodel::prefix::PrefixTrace::new(failure.config, failure.ops);
            trace.note = Some(format!("{name}, not minimized"));
            trace
        }
    };
    let dir = failures_dir(out, settings);
    let path = dir.join(format!("{name}.kvtrace.json"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let text = serde_json::to_string_pretty(&trace).map_err(std::io::Error::other)?;
        std::fs::write(&path, text + "\n")
    });
    match written {
        Ok(()) => println!(
            "saved {}\nreplay: kvcheck prefix replay {} --subject {}",
            path.display(),
            path.display(),
            shell_words::quote(&spec_text(spec))
        ),
        Err(e) => eprintln!("could not save the trace to {}: {e}", path.display()),
    }
    Err(CliError::Diverged)
}

fn spec_text(spec: &PrefixSubjectSpec) -> String {
    match spec {
        PrefixSubjectSpec::Paged => "paged".into(),
        PrefixSubjectSpec::Fault(f) => format!("fault:{f}"),
        PrefixSubjectSpec::Exec(command) => format!("exec:{command}"),
    }
}

fn replay(args: ReplayArgs, settings: &Settings) -> Result<(), CliError> {
    let mut subject = args.subject.open(settings)?;
    let caps = subject.capabilities();
    let judge = args
        .subject
        .judge()?
        .unwrap_or_else(|| Judge::for_policy(caps.policy));
    let files = kvcheck::check::trace::collect_trace_files(&args.traces)
        .map_err(|e| CliError::PrefixSubject(e.to_string()))?;
    if files.is_empty() {
        return Err(CliError::NoTraces(args.traces.clone()));
    }
    let mut failed = false;
    for path in &files {
        if !super::prefix::is_prefix_file(path) && args.traces.len() < files.len() {
            // A folder may hold streaming traces too: they are `kvcheck
            // replay`'s. A file named alone is loaded and its error shown.
            println!("SKIP  {}: not a prefix trace", path.display());
            continue;
        }
        let trace = family::load(path).map_err(CliError::PrefixTrace)?;
        if let Some(why) = caps.unsupported(&trace.config, &trace.ops) {
            println!(
                "SKIP  {} ({} ops): unsupported by {}: {why}",
                path.display(),
                trace.ops.len(),
                subject.name()
            );
            continue;
        }
        // A trace holds the ops as they were run: replayed in a free
        // order (a `whole` subject still gets its own computes).
        let driven = subject
            .drive(&trace.config, &judge, Steps::Free, &trace.ops)
            .map_err(|e| CliError::PrefixSubject(format!("{}: {e}", path.display())))?;
        match (&driven.divergence, &driven.cut) {
            (Some(d), _) => {
                failed = true;
                println!(
                    "FAIL  {} on {} judged by {}\n{d}",
                    path.display(),
                    subject.name(),
                    judge.describe()
                );
            }
            (None, Some(reason)) => println!(
                "CUT   {} after {} ops: {reason}",
                path.display(),
                driven.executed.len()
            ),
            (None, None) => println!(
                "PASS  {} ({} ops on {}, judged by {})",
                path.display(),
                driven.executed.len(),
                subject.name(),
                judge.describe()
            ),
        }
    }
    match failed {
        true => Err(CliError::Diverged),
        false => Ok(()),
    }
}
