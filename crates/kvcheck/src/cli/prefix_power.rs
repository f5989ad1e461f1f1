//! `kvcheck prefix power`: the paged cache's zoo of planted faults under
//! both prefix judges, with the shipped cache as control
//! (`kvcheck::engine::prefix::power`).

use kvcache::fault::PrefixFault;

use super::CliError;

/// `kvcheck prefix power`.
#[derive(clap::Args, Debug)]
pub struct PowerArgs {
    /// Cases per cell (each cell stops at its first failure).
    #[arg(long, default_value_t = 3_000)]
    cases: u64,
    /// The campaigns' seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs `kvcheck prefix power`.
pub fn run(args: PowerArgs) -> Result<(), CliError> {
    let cells = kvcheck::engine::prefix::power::measure(args.cases, args.seed);
    let width = PrefixFault::ALL.map(|f| f.name().len()).into_iter().max();
    let width = width.unwrap_or(0).max("paged (control)".len());
    println!(
        "{:<width$} {:<10} {:>7} {:>8} {:>9}  failure",
        "subject", "judge", "cases", "ops", "minimized"
    );
    let mut bad = Vec::new();
    for cell in &cells {
        let name = cell
            .fault
            .map_or("paged (control)".to_string(), |f| f.name().to_string());
        // A policy error keeps the invariants of §17: only the model is
        // bound to catch it.
        let policy = cell.fault.is_some_and(PrefixFault::is_policy) && cell.judge == "invariants";
        let verdict = match (cell.fault, cell.caught) {
            (Some(_), false) if policy => "escaped (a policy error: expected)".to_string(),
            (Some(_), false) => "ESCAPED".to_string(),
            (None, false) => "clean".to_string(),
            (_, true) => cell.what.clone().unwrap_or_default(),
        };
        println!(
            "{name:<width$} {:<10} {:>7} {:>8} {:>9}  {verdict}",
            cell.judge,
            cell.cases,
            cell.ops,
            cell.minimized.map_or("-".into(), |n| format!("{n} ops")),
        );
        if cell.fault.is_some() != cell.caught && !policy {
            bad.push(format!("{name} under {}", cell.judge));
        }
    }
    let faults = cells.iter().filter(|c| c.fault.is_some()).count();
    let caught = cells
        .iter()
        .filter(|c| c.fault.is_some() && c.caught)
        .count();
    println!(
        "caught {caught} of {faults} (fault, judge) pairs in {} cases each, seed {}",
        args.cases, args.seed
    );
    match bad.is_empty() {
        true => Ok(()),
        false => {
            println!("escaped or false alarm: {}", bad.join("; "));
            Err(CliError::Diverged)
        }
    }
}
