//! `kvcheck explore`: breadth-first exploration of every op sequence.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvcheck::check::coverage::Coverage;
use kvcheck::check::divergence::{describe_config, Divergence};
use kvcheck::check::trace::Trace;
use kvcheck::engine::explore::{all_required_events, grid, Alphabet, ExploreReport, Explorer};
use kvcheck::engine::scale::parse_jobs;
use kvcheck::engine::triage::Triage;
use kvcheck::report::findings::findings_table;
use kvcheck::report::shard::Shard;
use kvcheck::report::{ConfigReport, DiscoveryReport, ExploreSummary, Report, REPORT_FORMAT};
use kvcheck::settings::Settings;
use kvcheck::{Config, Trim, Variant};
use rayon::prelude::*;

use super::{failures_dir, CliError};

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
    /// Trim mode of the built-in config: `before_read` or `after_read`
    /// [default: the first mode the subject opens].
    #[arg(long, value_parser = parse_trim)]
    trim: Option<Trim>,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
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
    /// Directory for the trace of a divergence [default: target/kvcheck-failures
    /// in a checkout of kvcheck, else kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads [default: $KVCHECK_JOBS, else every available core]:
    /// a config's frontier, or the grid's configs, in parallel. The result
    /// is the same for any number.
    #[arg(long, value_parser = parse_jobs)]
    jobs: Option<usize>,
    /// With --grid: explore only the configs of shard K of N (K/N);
    /// `kvcheck merge` combines the shards' --json reports.
    #[arg(long, default_value = "1/1", requires = "grid")]
    shard: Shard,
    /// Also write the report as JSON to this file (for `kvcheck merge`).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    triage: super::triage::TriageArgs,
}

/// A `--trim` that names no trim mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown trim mode {text:?}: expected before_read or after_read")]
pub struct UnknownTrim {
    /// The text given.
    pub text: String,
}

/// Parses a trim mode by its name (`before_read`, `after_read`).
fn parse_trim(text: &str) -> Result<Trim, UnknownTrim> {
    Trim::ALL
        .into_iter()
        .find(|t| t.name() == text)
        .ok_or_else(|| UnknownTrim {
            text: text.to_string(),
        })
}

pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    let subject = args.subject.spec();
    let capabilities = subject.capabilities().map_err(CliError::Capabilities)?;
    let variant = args
        .variant
        .as_deref()
        .map(super::run::parse_variant)
        .transpose()?;
    let (configs, prefix) = if args.grid {
        (grid::configs(args.max_capacity, variant), Vec::new())
    } else if let Some(path) = &args.config {
        let trace = Trace::load(path)?;
        (vec![trace.config], trace.ops)
    } else {
        let mut config = match variant {
            Some(Variant::Packed) => Config::packed(args.capacity),
            _ => Config::dense(args.capacity),
        };
        config.sink = args.sink;
        config.heads = args.heads;
        config.trim = args
            .trim
            .or_else(|| capabilities.trims.first().copied())
            .unwrap_or_default();
        (vec![config], Vec::new())
    };
    for config in &configs {
        config
            .validate()
            .map_err(|source| CliError::InvalidConfig {
                config: describe_config(config),
                source,
            })?;
    }
    let alphabet = if args.small_alphabet {
        Alphabet::Small
    } else {
        args.alphabet
    };
    let depth = args.depth.unwrap_or(settings.explore_depth);
    super::announce(&subject);
    // A grid keeps the configs of its shard (by index in the whole grid,
    // so every machine numbers them alike) and the configs the subject can
    // express; a single config or prefix it cannot express is bad input.
    let configs: Vec<(usize, Config)> = configs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| args.shard.contains(*i))
        .collect();
    let before = configs.len();
    let configs: Vec<(usize, Config)> = configs
        .into_iter()
        .filter(|(_, c)| capabilities.supports_config(c).is_ok() || !args.grid)
        .collect();
    if before > configs.len() {
        eprintln!(
            "skipped {} of {before} grid configs: unsupported by the subject",
            before - configs.len()
        );
    }
    for (_, config) in &configs {
        capabilities
            .supports_trace(config, &prefix)
            .map_err(|source| CliError::Unsupported {
                config: describe_config(config),
                source,
            })?;
    }
    let oracle = args.subject.oracle();
    super::announce_oracle(&oracle);
    let limit = args.time_limit.map(Duration::from_secs_f64);
    let jobs = args.jobs.unwrap_or_else(|| settings.workers());
    let bar = progress_bar(configs.len());
    let started = Instant::now();
    let explorer = |config: &Config, jobs: usize| {
        let remaining = limit.map(|l| l.saturating_sub(started.elapsed()));
        Explorer::new(config, subject.clone())
            .depth(depth)
            .alphabet(alphabet)
            .prefix(prefix.clone())
            .time_limit(remaining)
            .progress(bar.clone())
            .jobs(jobs)
            .keep_going(args.triage.keep_going)
            .oracle(oracle.clone())
    };
    // One config: its frontier on every worker. A grid: the configs on
    // every worker (each config's frontier joins the same pool), results
    // in grid order so the discovery reported is the earliest config's.
    let results: Vec<(usize, Result<ExploreReport, Box<Divergence>>)> = if configs.len() == 1 {
        let (index, config) = &configs[0];
        vec![(*index, explorer(config, jobs).run())]
    } else {
        let first_discovery = AtomicUsize::new(usize::MAX);
        let done = AtomicUsize::new(0);
        let grid_run = || {
            configs
                .par_iter()
                .enumerate()
                .filter_map(|(i, (index, config))| {
                    if i > first_discovery.load(Ordering::Relaxed) {
                        return None;
                    }
                    let result = explorer(config, 0).run();
                    if result.is_err() {
                        first_discovery.fetch_min(i, Ordering::Relaxed);
                    }
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    bar.set_prefix(format!("configs {finished}/{}", configs.len()));
                    Some((*index, result))
                })
                .collect()
        };
        match rayon::ThreadPoolBuilder::new().num_threads(jobs).build() {
            Ok(pool) => pool.install(grid_run),
            Err(_) => grid_run(),
        }
    };
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let mut reports = Vec::new();
    let mut summary = ExploreSummary {
        format: REPORT_FORMAT.to_string(),
        subject: subject.name(&Config::dense(1)),
        depth,
        shards: vec![args.shard],
        configs: Vec::new(),
        required: if args.grid {
            all_required_events(&capabilities)
        } else {
            configs
                .first()
                .map(|(_, c)| kvcheck::engine::explore::required_events(c, &capabilities))
                .unwrap_or_default()
        },
        elapsed_s: elapsed.as_secs_f64(),
        discovery: None,
        findings: Vec::new(),
    };
    let mut found = None;
    let mut triage = Triage::new();
    for (index, result) in results {
        match result {
            Ok(mut report) => {
                // Grid order first, then breadth-first order in a config.
                let mut findings = std::mem::take(&mut report.triage);
                findings.offset((index as u64) << 40);
                if args.grid {
                    findings.prefix_first(&format!("config {index} "));
                }
                triage.absorb(findings);
                summary.configs.push(ConfigReport {
                    index,
                    config: describe_config(&report.config),
                    depth_completed: report.depth_completed,
                    states: report.states,
                    distinct_states: report.distinct_states,
                    transitions: report.transitions,
                    coverage: report.coverage.clone(),
                });
                reports.push(report);
            }
            Err(divergence) => {
                found = Some((index, divergence));
                break;
            }
        }
    }
    if let Some((index, mut divergence)) = found {
        // The bar counts every node expanded, hidden or not, on every
        // worker: the effort the search spent before its discovery.
        discovery(
            &mut divergence,
            (bar.position(), elapsed),
            &failures_dir(args.out.clone(), settings),
        );
        summary.discovery = Some(DiscoveryReport {
            index,
            summary: divergence.summary(),
            ops: divergence.trace.ops.len(),
            trace: divergence.saved.as_ref().map(|p| p.display().to_string()),
        });
        write_json(&summary, &args.json)?;
        return Err(CliError::Diverged);
    }
    let dir = failures_dir(args.out.clone(), settings);
    summary.findings =
        super::triage::settle(&args.triage, &triage, &subject, &oracle, &dir, settings);
    write_json(&summary, &args.json)?;
    if args.grid {
        print_grid(&summary, args.no_sometimes)
    } else {
        if summary.findings.is_empty() {
            return summarize_one(&reports[0], args.no_sometimes);
        }
        // Triage mode: the search went on past every divergence.
        let report = &reports[0];
        print!("{report}{}", findings_table(&summary.findings));
        let _ = sometimes(&report.coverage, &report.missing_events(), true);
        Err(CliError::Diverged)
    }
}

/// Writes the `--json` report, when asked for.
fn write_json(summary: &ExploreSummary, path: &Option<PathBuf>) -> Result<(), CliError> {
    match path {
        None => Ok(()),
        Some(path) => Report::Explore(summary.clone())
            .save(path)
            .map_err(CliError::WriteReport),
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
        bar.set_prefix(format!("configs 0/{configs}"));
    }
    bar
}

/// Saves the discovery's trace and prints it.
fn discovery(
    divergence: &mut Divergence,
    (nodes, elapsed): (u64, Duration),
    dir: &std::path::Path,
) {
    if let Err(e) = divergence.save_in(dir) {
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
}

fn summarize_one(report: &ExploreReport, no_sometimes: bool) -> Result<(), CliError> {
    print!("{report}");
    println!("no discovery");
    sometimes(&report.coverage, &report.missing_events(), no_sometimes)
}

/// The grid table: what one grid run prints and what `kvcheck merge`
/// prints for the shards of one; an error when the grid made a discovery
/// or (unless `no_sometimes`) missed a required event.
pub fn print_grid(summary: &ExploreSummary, no_sometimes: bool) -> Result<(), CliError> {
    println!("configs          {}", summary.configs.len());
    println!(
        "depth            {} of {} (least completed over configs)",
        summary.shallowest(),
        summary.depth
    );
    println!("states           {}", summary.states());
    println!("distinct states  {}", summary.distinct_states());
    println!("transitions      {}", summary.transitions());
    let elapsed = Duration::from_secs_f64(summary.elapsed_s);
    println!("elapsed          {elapsed:.2?}");
    println!(
        "states/s         {:.0}",
        summary.states() as f64 / summary.elapsed_s.max(1e-9)
    );
    if let Some(d) = &summary.discovery {
        println!("discovery: shortest counterexample ({} ops)", d.ops);
        println!("  {}", d.summary);
        if let Some(trace) = &d.trace {
            println!("  trace: {trace}");
        }
        return Err(CliError::Diverged);
    }
    if !summary.findings.is_empty() {
        // Triage mode: the search went on past every divergence.
        print!("{}", findings_table(&summary.findings));
        let _ = sometimes(&summary.coverage(), &summary.missing(), true);
        return Err(CliError::Diverged);
    }
    println!("no discovery");
    sometimes(&summary.coverage(), &summary.missing(), no_sometimes)
}

/// Prints the events reached; [`CliError::EventsMissed`] when a required
/// one was not (unless `no_sometimes`).
fn sometimes(coverage: &Coverage, missed: &[String], no_sometimes: bool) -> Result<(), CliError> {
    println!("events:");
    for (event, n) in coverage.iter() {
        println!("  {event:<24} {n}");
    }
    if missed.is_empty() {
        println!("sometimes: every required event reached");
        return Ok(());
    }
    println!("sometimes: never reached: {}", missed.join(", "));
    if no_sometimes {
        Ok(())
    } else {
        Err(CliError::EventsMissed(missed.to_vec()))
    }
}
