//! `kvcheck power`: the zoo of realistic bugs against every engine.
//!
//! The rows (one per fault, then the control row) are checked on `--jobs`
//! threads, one cell (row × engine) at a time per thread; every engine runs
//! on fixed seeds of its own, so a cell does not depend on the worker that
//! ran it, and the table comes back in row order. `--shard K/N` keeps
//! the rows `i` with `i % N == K - 1`, and `kvcheck merge` puts the shards'
//! `--json` reports back together.

mod fuzzer;
mod relations;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use kvcache::fault::{CacheFault, FaultBase};
use kvcheck::engine::power::{self, Engine, Target, EXPLORE_DEPTH};
use kvcheck::engine::scale::parse_jobs;
use kvcheck::engine::suite::SuiteSettings;
use kvcheck::report::shard::Shard;
use kvcheck::report::{PowerReport, PowerRow, Report, REPORT_FORMAT};
use kvcheck::settings::Settings;
use kvcheck::subject::SubjectSpec;

use super::power_table::{print_table, verdict};
use super::CliError;
use fuzzer::Fuzzer;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `suites`, `run`, `explore`, `fuzz`, `all`, or a comma-separated
    /// list of them (columns in that order).
    #[arg(long, default_value = "all")]
    engine: String,
    /// Seconds each engine may spend on one fault (run, explore, fuzz).
    #[arg(long, default_value_t = 10.0)]
    time: f64,
    /// Only this fault (repeatable); default: the whole zoo.
    #[arg(long)]
    fault: Vec<String>,
    /// The correct cache the faults are injected into: `shipped`
    /// (DenseCache / PackedCache), `generic` (the same on the
    /// device-generic path) or `ring` (RingCache; dense faults only).
    #[arg(long, default_value = "shipped")]
    cache: FaultBase,
    /// Leave out the control row (the correct cache alone, on which every
    /// engine must find nothing).
    #[arg(long)]
    no_control: bool,
    /// Seed of the `run` campaign and of libFuzzer.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads [default: $KVCHECK_JOBS, else every available core].
    /// The cells are the same whatever the number of workers; only the
    /// seconds change.
    #[arg(long, value_parser = parse_jobs)]
    jobs: Option<usize>,
    /// Check only the rows of shard K of N (K/N); `kvcheck merge` combines
    /// the shards' --json reports.
    #[arg(long, default_value = "1/1")]
    shard: Shard,
    /// Write the report as JSON to this file (`-`: standard output, instead
    /// of the table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// `model` (the engines above), or `self` / `relations` / `invariants` /
    /// `self:M9` / `self:I2`: the zoo checked by the relations and the
    /// invariants of one run of docs/contract.md §9 alone, one column per
    /// check (see docs/relations.md).
    #[arg(long, default_value = "model")]
    oracle: kvcheck::engine::oracle::Oracle,
    /// With `--oracle self`: most cases drawn per fault and check.
    #[arg(long, default_value_t = 400)]
    cases: u64,
}

pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    let relations = args.oracle.relations_checked();
    match (relations.as_slice(), plan(&args)) {
        ([], _) if !args.oracle.stepwise() => Err(CliError::PowerOracle),
        ([], plan) => {
            let (engines, targets) = plan?;
            measure(&args, &engines, &targets, settings)
        }
        (relations, Ok((_, targets))) => relations::measure(&args, relations, &targets, settings),
        (_, Err(e)) => Err(e),
    }
}

/// The engines and the rows of the unsharded table, or why the arguments
/// name nothing to measure.
fn plan(args: &Args) -> Result<(Vec<Engine>, Vec<Target>), CliError> {
    let mut engines = Vec::new();
    for name in args.engine.split(',').map(str::trim) {
        let named = match name {
            "all" => Engine::ALL.to_vec(),
            name => {
                vec![Engine::parse(name).ok_or_else(|| CliError::UnknownEngine(name.to_string()))?]
            }
        };
        for engine in named {
            if !engines.contains(&engine) {
                engines.push(engine);
            }
        }
    }
    if !(args.time.is_finite() && args.time > 0.0) {
        return Err(CliError::InvalidTime(args.time));
    }
    let mut faults = Vec::new();
    for name in &args.fault {
        let fault = CacheFault::from_name(name)
            .ok_or_else(|| CliError::UnknownFault { name: name.clone() })?;
        if !args.cache.holds(fault.variant()) {
            return Err(CliError::PackedFault {
                name: name.clone(),
                base: args.cache,
            });
        }
        faults.push(fault);
    }
    if faults.is_empty() {
        faults = CacheFault::ALL
            .into_iter()
            .filter(|f| args.cache.holds(f.variant()))
            .collect();
        if faults.len() < CacheFault::ALL.len() {
            eprintln!(
                "power: {} packed faults left out: --cache {} has no packed variant",
                CacheFault::ALL.len() - faults.len(),
                args.cache
            );
        }
    }
    let mut targets: Vec<Target> = faults
        .into_iter()
        .map(|f| Target::fault(f, args.cache))
        .collect();
    if !args.no_control {
        targets.push(Target::control(args.cache));
    }
    Ok((engines, targets))
}

fn measure(
    args: &Args,
    engines: &[Engine],
    targets: &[Target],
    settings: &Settings,
) -> Result<(), CliError> {
    let started = Instant::now();
    let jobs = args.jobs.unwrap_or_else(|| settings.workers());
    let rows: Vec<usize> = (0..targets.len())
        .filter(|&i| args.shard.contains(i))
        .collect();
    let shard = if args.shard.is_all() {
        String::new()
    } else {
        format!(
            ", shard {} ({} of {} rows)",
            args.shard,
            rows.len(),
            targets.len()
        )
    };
    eprintln!(
        "kvcheck power: {} rows × {} engines, cache {}, seed {}, {} s per cell, {jobs} workers{shard}",
        targets.len(),
        engines.len(),
        args.cache,
        args.seed,
        args.time
    );
    let needs_fuzz =
        engines.contains(&Engine::Fuzz) && rows.iter().any(|&i| targets[i].fault.is_some());
    let fuzz = if needs_fuzz {
        Fuzzer::prepare()
            .map_err(|why| eprintln!("power: fuzz column skipped: {why}"))
            .ok()
    } else {
        None
    };
    let bar = ProgressBar::new((rows.len() * engines.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let budget = Duration::from_secs_f64(args.time);
    // The suites column always draws the same cases (not the suites'
    // knobs), so that power tables compare.
    let suite_settings = SuiteSettings {
        cases: 256,
        max_ops: 40,
        seed: None,
        subject: SubjectSpec::Cache,
        oracle: kvcheck::engine::oracle::Oracle::model(),
        max_tests: settings.max_tests,
        failures_dir: settings.failures_dir.clone(),
    };
    let cells: Vec<(usize, Engine)> = rows
        .iter()
        .flat_map(|&i| engines.iter().map(move |&e| (i, e)))
        .collect();
    let check = |&(i, engine): &(usize, Engine)| {
        let target = targets[i];
        let catch = match engine {
            Engine::Suites => Some(power::suites(target, &suite_settings)),
            Engine::Run => Some(power::run(target, args.seed, budget, 40)),
            Engine::Explore => Some(power::explore(target, EXPLORE_DEPTH, budget)),
            Engine::Fuzz => match (&fuzz, target.fault) {
                (Some(f), Some(fault)) => Some(f.run(fault, target.base, args.seed, budget)),
                _ => None,
            },
        };
        bar.inc(1);
        bar.set_message(format!("{} × {}", target.name(), engine.name()));
        catch
    };
    let catches = in_parallel(&cells, jobs, check);
    bar.finish_and_clear();
    let mut catches = catches.into_iter();
    let power = PowerReport {
        format: REPORT_FORMAT.to_string(),
        seed: args.seed,
        time_s: args.time,
        cache: args.cache.name().to_string(),
        engines: engines.iter().map(|e| e.name().to_string()).collect(),
        table: targets.iter().map(Target::name).collect(),
        shards: vec![args.shard],
        rows: rows
            .iter()
            .map(|&i| PowerRow {
                index: i,
                fault: targets[i].name(),
                doc: targets[i].doc(),
                control: targets[i].fault.is_none(),
                cells: catches.by_ref().take(engines.len()).collect(),
            })
            .collect(),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    let to_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = &args.json {
        let report = Report::Power(power.clone());
        if to_stdout {
            let text = serde_json::to_string_pretty(&report).expect("reports serialize");
            println!("{text}");
        } else {
            report.save(path).map_err(CliError::WriteReport)?;
        }
    }
    if to_stdout {
        // The table would break the JSON on standard output.
        verdict(&power)
    } else {
        print_table(&power)
    }
}

/// `check` of every cell on `jobs` threads, results in cell order. Workers
/// take the next cell from one counter. Plain scoped threads rather than a
/// rayon pool: a rayon worker waiting for the explorer's own pool steals
/// other cells meanwhile, which would charge one cell's seconds and time
/// budget with another cell's work.
pub(super) fn in_parallel<C: Sync, T: Send>(
    cells: &[C],
    jobs: usize,
    check: impl Fn(&C) -> T + Sync,
) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::with_capacity(cells.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, cells.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(cell) = cells.get(i) else { break };
                let result = check(cell);
                done.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, result));
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, t)| t).collect()
}
