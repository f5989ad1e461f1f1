//! `kvcheck merge`: one table from the JSON reports of a campaign's shards.

use std::path::PathBuf;

use kvcheck::report::Report;

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Reports written by `run --json`, `explore --grid --json` or
    /// `power --json`, one per shard of the same campaign.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also write the merged report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Do not fail when a "sometimes" event was never reached (explore).
    #[arg(long)]
    no_sometimes: bool,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let mut reports = Vec::new();
    for path in &args.files {
        reports.push(Report::load(path)?);
    }
    let merged = Report::merge(reports)?;
    let shards = merged.shards();
    let count = shards.first().map_or(1, |s| s.count);
    let absent: Vec<String> = (1..=count)
        .filter(|k| !shards.iter().any(|s| s.index == *k))
        .map(|k| format!("{k}/{count}"))
        .collect();
    println!(
        "kvcheck merge: {} reports, shards {}",
        args.files.len(),
        shards
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !absent.is_empty() {
        println!(
            "warning: shards {} are absent; the totals cover part of the campaign",
            absent.join(" ")
        );
    }
    if let Some(path) = &args.json {
        merged.save(path).map_err(CliError::WriteReport)?;
    }
    let verdict = match &merged {
        Report::Run(report) => super::run::print_tables(report),
        Report::Explore(summary) => super::explore::print_grid(summary, args.no_sometimes),
        Report::Power(power) => super::power_table::print_table(power),
    };
    if absent.is_empty() {
        verdict
    } else {
        // A partial campaign is not a pass.
        Err(CliError::ShardsAbsent(absent))
    }
}
