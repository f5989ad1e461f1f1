//! `kvcheck run`: the checking campaign over the built-in profiles.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kvcheck::check::coverage::{Coverage, EVENTS};
use kvcheck::check::relation::Relation;
use kvcheck::engine::minimize::minimize_keeping;
use kvcheck::engine::oracle::Judged;
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::scale::{parse_jobs, Campaign, Found};
use kvcheck::engine::strategy::{profile_support, required_events, PROFILES};
use kvcheck::report::findings::findings_table;
use kvcheck::report::shard::Shard;
use kvcheck::report::{
    merge_judged, DivergenceReport, ProfileReport, RelationJudged, Report, RunReport, REPORT_FORMAT,
};
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
    for name in &args.profile {
        if !PROFILES.iter().any(|p| p.name == name) {
            return Err(CliError::UnknownProfile(name.clone()));
        }
    }
    if !(args.time.is_finite() && args.time > 0.0) {
        return Err(CliError::InvalidTime(args.time));
    }
    let selected: Vec<usize> = (0..PROFILES.len())
        .filter(|&i| args.profile.is_empty() || args.profile.iter().any(|n| n == PROFILES[i].name))
        .filter(|&i| {
            let variant = if PROFILES[i].name == "packed" {
                Variant::Packed
            } else {
                Variant::Dense
            };
            args.variant.is_none_or(|v| v == variant)
        })
        .collect();
    let subject = args.subject.spec();
    super::announce(&subject);
    let capabilities = subject.capabilities().map_err(CliError::Capabilities)?;
    // A differential oracle runs the same cases: a profile it cannot
    // express is skipped as one the subject cannot.
    let oracle = args.subject.oracle();
    let oracle_side = match oracle.runs() {
        Some(other) => Some((
            other.name(&kvmodel::Config::dense(1)),
            other.capabilities().map_err(CliError::Capabilities)?,
        )),
        None => None,
    };
    let selected: Vec<usize> = selected
        .into_iter()
        .filter(|&i| {
            let why = match (profile_support(&PROFILES[i], &capabilities), &oracle_side) {
                (Err(why), _) => why.to_string(),
                (Ok(()), Some((name, theirs))) => {
                    match profile_support(&PROFILES[i], &capabilities.shared_with(theirs)) {
                        Ok(()) => return true,
                        Err(why) => format!("by the oracle {name}: {}", why.what),
                    }
                }
                (Ok(()), None) => return true,
            };
            println!("skipped: {why}");
            false
        })
        .collect();
    if selected.is_empty() {
        return Err(CliError::NoProfile);
    }
    if !args.shard.is_all() && args.seed.is_none() {
        return Err(CliError::ShardWithoutSeed(args.shard));
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
        selected.len(),
        args.time
    );
    let failures = failures_dir(args.out.clone(), settings);
    let budget = Duration::from_secs_f64(args.time);
    let bar = ProgressBar::new(budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .expect("static template"),
    );
    let campaign = Campaign {
        seed,
        profiles: selected.clone(),
        max_ops: args.max_ops,
        cases: args.cases,
        budget,
        jobs,
        shard: args.shard,
        subject: subject.clone(),
        oracle,
    };
    super::announce_oracle(&campaign.oracle);
    let outcome = if args.triage.keep_going {
        campaign.run_triage(Some(&bar))
    } else {
        campaign.run(Some(&bar))
    };
    bar.finish_and_clear();
    let outcome = outcome?;
    let diverged_profile = outcome.found.as_ref().map(|found| found.profile);
    let divergence = outcome.found.map(|found| {
        report_divergence(
            found,
            &subject,
            &campaign.oracle,
            &failures,
            settings.max_tests,
        )
    });
    let mut divergences: Vec<String> = divergence.iter().filter_map(|d| d.trace.clone()).collect();
    let findings = super::triage::settle(
        &args.triage,
        &outcome.triage,
        &subject,
        &campaign.oracle,
        &failures,
        settings,
    );
    divergences.extend(findings.iter().filter_map(|f| f.minimized_trace.clone()));
    let mut report = RunReport {
        format: REPORT_FORMAT.to_string(),
        seed,
        max_ops: args.max_ops,
        subject: subject.name(&kvcheck::Config::dense(1)),
        shards: vec![args.shard],
        profiles: selected
            .iter()
            .zip(&outcome.tallies)
            .map(|(&profile, t)| {
                let p = &PROFILES[profile];
                ProfileReport {
                    name: p.name.to_string(),
                    cache: if p.name == "packed" {
                        "packed"
                    } else if subject == SubjectSpec::Ring {
                        "ring"
                    } else {
                        "dense"
                    }
                    .to_string(),
                    cases: t.cases,
                    ops: t.ops,
                    busy_s: t.busy.as_secs_f64(),
                    divergences: if args.triage.keep_going {
                        t.divergent
                    } else {
                        u64::from(diverged_profile == Some(profile))
                    },
                    required: required_events(p, &capabilities)
                        .iter()
                        .map(|e| e.to_string())
                        .collect(),
                    coverage: t.coverage.clone(),
                    judged: judged_rows(&t.judged),
                    domain: t.domain.clone(),
                }
            })
            .collect(),
        elapsed_s: outcome.elapsed.as_secs_f64(),
        divergences,
        divergence,
        findings,
        min_judged: args.min_judged,
        warnings: Vec::new(),
    };
    report.warnings = report.domain().warning().into_iter().collect();
    if let Some(path) = &args.json {
        Report::Run(report.clone())
            .save(path)
            .map_err(CliError::WriteReport)?;
    }
    print_tables(&report)?;
    let domain = report.domain();
    if report.too_few_judged() {
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

/// Minimizes the first divergence once against the campaign's `oracle`
/// (same failure, fewer ops, at most `max_tests` runs) and saves one trace
/// of it under `failures`: the minimized one, or the divergence as met
/// when it does not minimize. One trace per divergence, so that replaying
/// the folder shows each failure once. Prints the divergence as met (before
/// minimizing, which can take a while) and then the saved one's report.
fn report_divergence(
    found: Found,
    subject: &SubjectSpec,
    oracle: &Oracle,
    failures: &Path,
    max_tests: usize,
) -> DivergenceReport {
    let met = found.divergence;
    let first = format!(
        "profile {} case {}",
        PROFILES[found.profile].name, found.case
    );
    println!("first divergence: {first} (the run stopped there)");
    println!("{met}");
    let ops = met.trace.ops.len();
    let (mut kept, minimized_ops) =
        match minimize_keeping(&met.trace, subject.clone(), oracle, max_tests, |_| true) {
            Ok(minimized) => {
                println!(
                    "minimized: {} -> {} ops in {} tests",
                    minimized.before.ops, minimized.after.ops, minimized.tests_run
                );
                (minimized.divergence, Some(minimized.after.ops))
            }
            Err(e) => {
                println!("not minimized: {e}");
                (met, None)
            }
        };
    let trace = match kept.save_in(failures) {
        Ok(path) => Some(path.display().to_string()),
        Err(e) => {
            println!("trace not saved: {e}");
            None
        }
    };
    if minimized_ops.is_some() {
        println!("{kept}");
    } else if let (Some(path), Some(command)) = (&trace, kept.replay_command()) {
        // The report above is this divergence; only where it went is new.
        println!("trace:    {path}\nreproduce: {command}");
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
        let missing = p.missing();
        let missing = if p.cases == 0 {
            "(not run)".to_string()
        } else if missing.is_empty() {
            "-".to_string()
        } else {
            missing.join(" ")
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
