//! The power table: what `kvcheck power` prints and what `kvcheck merge`
//! prints for the shards of one.

use kvcheck::engine::power::Engine;
use kvcheck::report::Catch;
use kvcheck::report::PowerReport;

use super::CliError;

/// Prints the table fault × engine with the kill rates, and returns the
/// [`verdict`].
pub fn print_table(report: &PowerReport) -> Result<(), CliError> {
    print!("| fault |");
    for e in &report.engines {
        print!(" {e} |");
    }
    println!();
    print!("|---|");
    for _ in &report.engines {
        print!("---|");
    }
    println!();
    for row in &report.rows {
        print!("| {} |", row.fault);
        for (engine, catch) in report.engines.iter().zip(&row.cells) {
            print!(" {} |", cell(engine, catch.as_ref(), row.control));
        }
        println!();
    }
    print!("| **kill rate** |");
    for (caught, ran) in report.kill_rates() {
        if ran == 0 {
            print!(" skipped |");
        } else {
            print!(
                " {caught}/{ran} ({:.0} %) |",
                100.0 * caught as f64 / ran as f64
            );
        }
    }
    println!();
    println!();
    println!("cells: caught, work until the first catch, seconds, ops of the minimized counterexample (suites: shrunk by proptest, not counted); control rows: clean, or FALSE POSITIVE");
    println!(
        "{} rows on cache {}, seed {}, {} s per engine, {:.1} s wall",
        report.rows.len(),
        report.cache,
        report.seed,
        report.time_s,
        report.elapsed_s
    );
    verdict(report)
}

/// The verdict of a power table, with the reason on standard error:
/// [`CliError::PowerVerdict`] when a fault escaped every engine or an
/// engine diverged on a control row (a false positive).
pub fn verdict(report: &PowerReport) -> Result<(), CliError> {
    let escaped = report.escaped();
    if !escaped.is_empty() {
        eprintln!("power: escaped every engine: {}", escaped.join(", "));
    }
    let false_positives = report.false_positives();
    if !false_positives.is_empty() {
        eprintln!(
            "power: an engine diverged on a correct cache: {}",
            false_positives.join(", ")
        );
    }
    if escaped.is_empty() && false_positives.is_empty() {
        Ok(())
    } else {
        Err(CliError::PowerVerdict {
            escaped: escaped.iter().map(|s| s.to_string()).collect(),
            false_positives: false_positives.iter().map(|s| s.to_string()).collect(),
        })
    }
}

fn cell(engine: &str, catch: Option<&Catch>, control: bool) -> String {
    let unit = Engine::parse(engine).map_or("", Engine::unit);
    match catch {
        None => "skipped".to_string(),
        Some(c) if control && !c.caught => {
            format!("clean ({} {unit}, {:.1}s)", c.work, c.seconds)
        }
        Some(c) if control => format!("FALSE POSITIVE: {}", c.note),
        Some(c) if !c.caught => format!("MISSED ({} {unit}, {:.1}s)", c.work, c.seconds),
        Some(c) => {
            let minimized = c
                .minimized_ops
                .map_or_else(|| "-".to_string(), |n| n.to_string());
            format!("yes {} {unit} {:.2}s min {minimized}", c.work, c.seconds)
        }
    }
}
