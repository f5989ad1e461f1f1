//! `kvcheck prefix`: the engines of the prefix family on any prefix
//! subject (the shipped paged cache, one of its planted faults, or a
//! process speaking the prefix family of kvcheck-subject/1): `run` a
//! campaign, `replay` a trace.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvcheck::engine::prefix::campaign::{self, PrefixRunSettings, Windows};
use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::{self as family};
use kvcheck::settings::Settings;
use kvcheck::subject::prefix::Steps;

use super::prefix_args::{save_failure, PrefixSubjectArgs, PrefixSubjectSpec};
use super::CliError;

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
    /// Draw a sliding window (docs/contract.md §19) on every config, over
    /// every layer or the last one, for a subject that opens any window
    /// (`paged`, `fault:NAME`); a subject that declares its windows always
    /// gets them.
    #[arg(long)]
    windows: bool,
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
        windows: if args.windows {
            Windows::Always
        } else {
            Windows::Never
        },
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
    save_failure(failure, &name, args.out, args.subject.spec(), settings)
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
