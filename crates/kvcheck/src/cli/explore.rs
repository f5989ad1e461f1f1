//! `kvcheck explore`: breadth-first exploration of every op sequence.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvcheck::coverage::Coverage;
use kvcheck::divergence::{describe_config, Divergence};
use kvcheck::explore::{
    all_required_events, default_depth, grid, missing, Alphabet, ExploreReport, Explorer,
};
use kvcheck::trace::Trace;
use kvcheck::{Config, Variant};

use super::{failures_dir, EXIT_INPUT, EXIT_MISMATCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ops per explored sequence [default: KVCHECK_EXPLORE_DEPTH, else 3].
    #[arg(long)]
    depth: Option<usize>,
    /// A kvtrace file: its config is explored, its ops (if any) are the
    /// starting prefix.
    #[arg(long, conflicts_with = "grid")]
    config: Option<PathBuf>,
    /// Every config with capacity 1..=--max-capacity (see docs/explore.md).
    #[arg(long)]
    grid: bool,
    /// Largest capacity of the grid.
    #[arg(long, default_value_t = 5)]
    max_capacity: usize,
    /// `dense` or `packed`: the variant of the built-in config, or the one
    /// family of the grid [default: dense; grid: both].
    #[arg(long)]
    variant: Option<String>,
    /// Capacity of the built-in config (without --config / --grid).
    #[arg(long, default_value_t = 4)]
    capacity: usize,
    /// Sink of the built-in config.
    #[arg(long, default_value_t = 1)]
    sink: usize,
    /// Heads of the built-in config.
    #[arg(long, default_value_t = 1)]
    heads: usize,
    #[command(flatten)]
    subject: super::SubjectArgs,
    /// `full` or `small` (head ranges and recent windows on appends only).
    #[arg(long, default_value = "full")]
    alphabet: Alphabet,
    /// Same as `--alphabet small`.
    #[arg(long)]
    small_alphabet: bool,
    /// Stop after this many seconds; the depth reported is the last one
    /// completed.
    #[arg(long)]
    time_limit: Option<f64>,
    /// Do not fail when a "sometimes" event was never reached.
    #[arg(long)]
    no_sometimes: bool,
    /// Directory for the trace of a divergence [default: target/kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    let variant = match args.variant.as_deref() {
        None => None,
        Some("dense") => Some(Variant::Dense),
        Some("packed") => Some(Variant::Packed),
        Some(other) => {
            eprintln!("error: unknown variant {other:?}: expected dense or packed");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let (configs, prefix) = if args.grid {
        (grid::configs(args.max_capacity, variant), Vec::new())
    } else if let Some(path) = &args.config {
        match Trace::load(path) {
            Ok(trace) => (vec![trace.config], trace.ops),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_INPUT);
            }
        }
    } else {
        let mut config = match variant {
            Some(Variant::Packed) => Config::packed(args.capacity),
            _ => Config::dense(args.capacity),
        };
        config.sink = args.sink;
        config.heads = args.heads;
        (vec![config], Vec::new())
    };
    for config in &configs {
        if let Err(e) = config.validate() {
            eprintln!("error: {}: {e}", describe_config(config));
            return ExitCode::from(EXIT_INPUT);
        }
    }
    let alphabet = if args.small_alphabet {
        Alphabet::Small
    } else {
        args.alphabet
    };
    let depth = args.depth.unwrap_or_else(default_depth);
    let subject = args.subject.spec();
    super::announce(&subject);
    let capabilities = match subject.capabilities() {
        Ok(capabilities) => capabilities,
        Err(e) => {
            eprintln!("error: cannot ask the subject for its capabilities: {e}");
            return ExitCode::from(EXIT_MISMATCH);
        }
    };
    // A grid keeps the configs the subject can express; a single config
    // or prefix it cannot express is bad input.
    let before = configs.len();
    let configs: Vec<Config> = configs
        .into_iter()
        .filter(|c| capabilities.supports_config(c).is_ok() || !args.grid)
        .collect();
    if before > configs.len() {
        eprintln!(
            "skipped {} of {before} grid configs: unsupported by the subject",
            before - configs.len()
        );
    }
    for config in &configs {
        if let Err(e) = capabilities.supports_trace(config, &prefix) {
            eprintln!("error: {}: {e}", describe_config(config));
            return ExitCode::from(EXIT_INPUT);
        }
    }
    let limit = args.time_limit.map(Duration::from_secs_f64);
    let bar = progress_bar(configs.len());
    let started = Instant::now();
    let mut reports = Vec::new();
    for config in &configs {
        let remaining = limit.map(|l| l.saturating_sub(started.elapsed()));
        let explorer = Explorer::new(config, subject.clone())
            .depth(depth)
            .alphabet(alphabet)
            .prefix(prefix.clone())
            .time_limit(remaining)
            .progress(bar.clone());
        match explorer.run() {
            Ok(report) => reports.push(report),
            Err(divergence) => {
                bar.finish_and_clear();
                // The bar counts every node expanded, hidden or not: the
                // effort the search spent before its discovery.
                let effort = (bar.position(), started.elapsed());
                return discovery(divergence, effort, &args.out);
            }
        }
        if configs.len() > 1 {
            bar.set_prefix(format!("config {}/{}", reports.len() + 1, configs.len()));
        }
    }
    bar.finish_and_clear();
    if configs.len() == 1 {
        summarize_one(&reports[0], args.no_sometimes)
    } else {
        summarize_grid(&reports, started.elapsed(), args.no_sometimes)
    }
}

fn progress_bar(configs: usize) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(0), target);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} nodes {msg}",
        )
        .expect("a valid template"),
    );
    if configs > 1 {
        bar.set_prefix(format!("config 1/{configs}"));
    }
    bar
}

fn discovery(
    mut divergence: Box<Divergence>,
    (nodes, elapsed): (u64, Duration),
    out: &Option<PathBuf>,
) -> ExitCode {
    let dir = failures_dir(out.clone());
    if let Err(e) = divergence.save_in(&dir) {
        eprintln!(
            "warning: could not save the trace under {}: {e}",
            dir.display()
        );
    }
    println!(
        "discovery: shortest counterexample ({} ops), after {nodes} nodes expanded in {:.1} s",
        divergence.trace.ops.len(),
        elapsed.as_secs_f64()
    );
    print!("{divergence}");
    ExitCode::from(EXIT_MISMATCH)
}

fn summarize_one(report: &ExploreReport, no_sometimes: bool) -> ExitCode {
    print!("{report}");
    println!("no discovery");
    sometimes(&report.coverage, &report.missing_events(), no_sometimes)
}

fn summarize_grid(reports: &[ExploreReport], elapsed: Duration, no_sometimes: bool) -> ExitCode {
    let mut coverage = Coverage::default();
    let (mut states, mut distinct, mut transitions) = (0u64, 0u64, 0u64);
    let mut shallowest = usize::MAX;
    for r in reports {
        coverage.merge(&r.coverage);
        states += r.states;
        distinct += r.distinct_states;
        transitions += r.transitions;
        shallowest = shallowest.min(r.depth_completed);
    }
    let depth = reports.first().map_or(0, |r| r.depth);
    println!("configs          {}", reports.len());
    println!("depth            {shallowest} of {depth} (least completed over configs)");
    println!("states           {states}");
    println!("distinct states  {distinct}");
    println!("transitions      {transitions}");
    println!("elapsed          {elapsed:.2?}");
    println!(
        "states/s         {:.0}",
        states as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    println!("no discovery");
    let missed = missing(&coverage, &all_required_events());
    sometimes(&coverage, &missed, no_sometimes)
}

fn sometimes(coverage: &Coverage, missed: &[String], no_sometimes: bool) -> ExitCode {
    println!("events:");
    for (event, n) in coverage.iter() {
        println!("  {event:<24} {n}");
    }
    if missed.is_empty() {
        println!("sometimes: every required event reached");
        return ExitCode::SUCCESS;
    }
    println!("sometimes: never reached: {}", missed.join(", "));
    if no_sometimes {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_MISMATCH)
    }
}
