//! `kvcheck run`: the checking campaign over the built-in profiles.

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kvcheck::check::coverage::{Coverage, EVENTS};
use kvcheck::engine::run::{select_profiles, Run, RunError};
use kvcheck::engine::scale::{parse_jobs, Campaign};
use kvcheck::engine::strategy::PROFILES;
use kvcheck::report::findings::findings_table;
use kvcheck::report::shard::Shard;
use kvcheck::report::{merge_judged, Report, RunReport};
use kvcheck::settings::Settings;
use kvcheck::subject::SubjectSpec;
use kvcheck::Variant;

use super::{failures_dir, CliError, UnknownVariant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seed of the op generator [default: derived from the clock, printed].
    #[arg(long)]
    seed: Option<u64>,
    /// Time budget in seconds.
    #[arg(long, default_value_t = 60.0)]
    time: f64,
    /// Stop each profile after this many op sequences.
    #[arg(long)]
    cases: Option<u64>,
    /// Longest op sequence.
    #[arg(long, default_value_t = 64)]
    max_ops: usize,
    /// Only profiles of this variant (`dense` or `packed`).
    #[arg(long, value_parser = parse_variant)]
    variant: Option<Variant>,
    /// Only these profiles (repeatable); see --list.
    #[arg(long)]
    profile: Vec<String>,
    /// List the profiles and exit.
    #[arg(long)]
    list: bool,
    /// Directory for the traces of divergences [default: target/kvcheck-failures
    /// in a checkout of kvcheck, else kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads [default: $KVCHECK_JOBS, else every available core].
    /// Case i always gets the same ops, whatever the number of workers.
    #[arg(long, value_parser = parse_jobs)]
    jobs: Option<usize>,
    /// Run only the case indices of shard K of N (K/N); `kvcheck merge`
    /// combines the shards' --json reports.
    #[arg(long, default_value = "1/1")]
    shard: Shard,
    /// Fail when the subject served fewer judged ops with state than this
    /// (accepted writes of at least one position: appends and rewrites)
    /// and some case was cut by an `outside` answer: a subject that answers
    /// `outside` to (nearly) every write cannot pass. 0 turns it off.
    #[arg(long, default_value_t = 100)]
    min_judged: u64,
    /// Also write the report as JSON to this file (for `kvcheck merge`).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    #[command(flatten)]
    triage: super::triage::TriageArgs,
}

/// Parses `dense` or `packed` (also what `explore --variant` takes).
pub fn parse_variant(text: &str) -> Result<Variant, UnknownVariant> {
    match text {
        "dense" => Ok(Variant::Dense),
        "packed" => Ok(Variant::Packed),
        _ => Err(UnknownVariant {
            text: text.to_string(),
        }),
    }
}

pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    if args.list {
        for p in PROFILES {
            println!("{:<12} {}", p.name, p.about);
        }
        return Ok(());
    }
    if !(args.time.is_finite() && args.time > 0.0) {
        return Err(CliError::InvalidTime(args.time));
    }
    if !args.shard.is_all() && args.seed.is_none() {
        return Err(CliError::ShardWithoutSeed(args.shard));
    }
    let subject = args.subject.spec();
    super::announce(&subject);
    let run = plan(&args, subject, settings)?;
    let report = execute(&run, &args)?;
    if let Some(path) = &args.json {
        Report::Run(report.clone())
            .save(path)
            .map_err(CliError::WriteReport)?;
    }
    print_tables(&report)?;
    if report.too_few_judged() {
        let domain = report.domain();
        let error = CliError::TooFewJudged {
            judged: report.judged(),
            served: domain.served,
            floor: args.min_judged,
            outside: domain.outside,
            drawn: domain.drawn,
        };
        println!("{error}");
        return Err(error);
    }
    Ok(())
}

/// The run the arguments ask for: the profiles the subject (and the
/// oracle's) can open, each one left out said with why, and the
/// campaign's seed, workers and budget announced.
fn plan(args: &Args, subject: SubjectSpec, settings: &Settings) -> Result<Run, CliError> {
    let oracle = args.subject.oracle();
    let selection = match select_profiles(&args.profile, args.variant, &subject, &oracle) {
        Ok(selection) => selection,
        Err(RunError::NoProfile { skipped }) => {
            skipped.iter().for_each(|why| println!("skipped: {why}"));
            return Err(CliError::NoProfile);
        }
        Err(e) => return Err(run_error(e)),
    };
    for why in &selection.skipped {
        println!("skipped: {why}");
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let jobs = args.jobs.unwrap_or_else(|| settings.workers());
    let shard = if args.shard.is_all() {
        String::new()
    } else {
        format!(", shard {}", args.shard)
    };
    println!(
        "kvcheck run: {} profiles, {:.0} s, seed {seed}{shard}, {jobs} workers (rerun with --seed {seed})",
        selection.profiles.len(),
        args.time
    );
    let keep_going = args.triage.keep_going;
    let run = Run {
        campaign: Campaign {
            seed,
            profiles: selection.profiles,
            max_ops: args.max_ops,
            cases: args.cases,
            budget: Duration::from_secs_f64(args.time),
            jobs,
            shard: args.shard,
            subject,
            oracle,
        },
        keep_going,
        max_tests: args
            .triage
            .max_tests
            .filter(|_| keep_going)
            .unwrap_or(settings.max_tests),
        min_judged: args.min_judged,
        failures: failures_dir(args.out.clone(), settings),
        replay: None,
    };
    super::announce_oracle(&run.campaign.oracle);
    Ok(run)
}

/// Runs the campaign under a progress bar. What it finds is said on
/// standard output, or on standard error when triaging (the findings'
/// table then goes to standard output).
fn execute(run: &Run, args: &Args) -> Result<RunReport, CliError> {
    let bar = ProgressBar::new(run.campaign.budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .expect("static template"),
    );
    let keep_going = args.triage.keep_going;
    let say = |line: &str| {
        if keep_going {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    };
    run.execute(Some(&bar), &say).map_err(run_error)
}

/// The command line's error for a run's.
fn run_error(error: RunError) -> CliError {
    match error {
        RunError::UnknownProfile(name) => CliError::UnknownProfile(name),
        RunError::NoProfile { .. } => CliError::NoProfile,
        RunError::Capabilities(failure) => CliError::Capabilities(failure),
        RunError::Campaign(e) => CliError::Campaign(e),
    }
}

/// Per relation: the cases it judged out of those drawn, and the ops it
/// compared (a relation that judges few cases is weak on this subject).
fn print_judged(report: &RunReport) {
    let mut total = Vec::new();
    for p in &report.profiles {
        merge_judged(&mut total, &p.judged);
    }
    if total.is_empty() {
        return;
    }
    let drawn: u64 = report.profiles.iter().map(|p| p.cases).sum();
    println!(
        "
relations: cases judged of {drawn} drawn, ops compared"
    );
    for row in &total {
        let percent = 100.0 * row.cases as f64 / drawn.max(1) as f64;
        println!(
            "  {:<4}{:<24} {:>8} {:>4.0}% {:>10} ops",
            row.relation, row.name, row.cases, percent, row.ops
        );
    }
}

/// The `run` table, the event coverage and the totals: what one run
/// prints and what `kvcheck merge` prints for the shards of one;
/// [`CliError::Diverged`] when a profile diverged.
pub fn print_tables(report: &RunReport) -> Result<(), CliError> {
    println!(
        "\n{:<12} {:<7} {:>8} {:>10} {:>10} {:>11}  missing events",
        "profile", "cache", "cases", "ops", "ops/s", "divergences"
    );
    let mut all = Coverage::default();
    for p in &report.profiles {
        let rate = p.ops as f64 / p.busy_s.max(1e-9);
        let missing = if p.cases == 0 {
            "(not run)".to_string()
        } else {
            p.missing_note().unwrap_or_else(|| "-".to_string())
        };
        println!(
            "{:<12} {:<7} {:>8} {:>10} {:>10.0} {:>11}  {missing}",
            p.name, p.cache, p.cases, p.ops, rate, p.divergences
        );
        all.merge(&p.coverage);
    }
    print_judged(report);
    println!("\nevent coverage (all profiles):");
    let mut line = String::new();
    for event in EVENTS.iter().map(|e| e.to_string()).chain(
        kvcheck::ErrorKind::OP_KINDS
            .iter()
            .map(|k| format!("error:{}", k.name())),
    ) {
        let cell = format!("{event} {}", all.count(&event));
        if line.len() + cell.len() > 100 {
            println!("  {line}");
            line.clear();
        }
        line.push_str(&format!("{cell:<34}"));
    }
    if !line.is_empty() {
        println!("  {line}");
    }
    println!("  {}", all.op_summary());
    let total: u64 = report.profiles.iter().map(|p| p.ops).sum();
    println!("\n{total} ops checked in {:.1} s", report.elapsed_s);
    if let Some(line) = report.domain().summary() {
        println!("{line}");
    }
    let found: u64 = report.profiles.iter().map(|p| p.divergences).sum();
    if found == 0 {
        println!("no divergences");
        Ok(())
    } else if !report.findings.is_empty() {
        print!("\n{}", findings_table(&report.findings));
        Err(CliError::Diverged)
    } else {
        println!("{found} divergences; traces:");
        for path in &report.divergences {
            println!("  {path}");
        }
        Err(CliError::Diverged)
    }
}
