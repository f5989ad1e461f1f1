//! `kvcheck run`: the checking campaign over the built-in profiles.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use kvcheck::coverage::{Coverage, EVENTS};
use kvcheck::machine::CASE_RUNNERS;
use kvcheck::strategy::{profile_support, required_events, PROFILES};
use kvcheck::subject::Capabilities;
use kvcheck::Variant;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestRunner};

use super::{failures_dir, EXIT_INPUT, EXIT_MISMATCH};

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
    /// Directory for the traces of divergences [default: target/kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    subject: super::SubjectArgs,
}

fn parse_variant(text: &str) -> Result<Variant, String> {
    match text {
        "dense" => Ok(Variant::Dense),
        "packed" => Ok(Variant::Packed),
        _ => Err(format!(
            "unknown variant {text:?}: expected dense or packed"
        )),
    }
}

#[derive(Default)]
struct Tally {
    cases: u64,
    ops: u64,
    busy: Duration,
    divergences: Vec<String>,
    coverage: Coverage,
}

pub fn run(args: Args) -> ExitCode {
    if args.list {
        for p in PROFILES {
            println!("{:<12} {}", p.name, p.about);
        }
        return ExitCode::SUCCESS;
    }
    for name in &args.profile {
        if !PROFILES.iter().any(|p| p.name == name) {
            eprintln!("error: unknown profile {name:?}; `kvcheck run --list` shows them");
            return ExitCode::from(EXIT_INPUT);
        }
    }
    if !(args.time.is_finite() && args.time > 0.0) {
        eprintln!(
            "error: --time must be a positive number of seconds, got {}",
            args.time
        );
        return ExitCode::from(EXIT_INPUT);
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
    let capabilities = match subject.capabilities() {
        Ok(capabilities) => capabilities,
        Err(e) => {
            eprintln!("error: cannot ask the subject for its capabilities: {e}");
            return ExitCode::from(EXIT_MISMATCH);
        }
    };
    let selected: Vec<usize> = selected
        .into_iter()
        .filter(|&i| match profile_support(&PROFILES[i], &capabilities) {
            Ok(()) => true,
            Err(why) => {
                println!("skipped: {why}");
                false
            }
        })
        .collect();
    if selected.is_empty() {
        eprintln!("error: no profile matches the filters and the subject's capabilities");
        return ExitCode::from(EXIT_INPUT);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!(
        "kvcheck run: {} profiles, {:.0} s, seed {seed} (rerun with --seed {seed})",
        selected.len(),
        args.time
    );
    let failures = failures_dir(args.out.clone());
    let budget = Duration::from_secs_f64(args.time);
    let bar = ProgressBar::new(budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .expect("static template"),
    );
    let mut tallies: Vec<Tally> = selected.iter().map(|_| Tally::default()).collect();
    let mut runners: Vec<TestRunner> = selected
        .iter()
        .map(|&i| {
            TestRunner::new(ProptestConfig {
                rng_seed: RngSeed::Fixed(seed ^ (i as u64) << 32),
                ..ProptestConfig::default()
            })
        })
        .collect();
    let started = Instant::now();
    let mut total_ops = 0u64;
    'campaign: loop {
        let mut any = false;
        for (slot, &profile) in selected.iter().enumerate() {
            if started.elapsed() >= budget {
                break 'campaign;
            }
            let tally = &mut tallies[slot];
            if args.cases.is_some_and(|max| tally.cases >= max) {
                continue;
            }
            any = true;
            let case_started = Instant::now();
            let outcome = match CASE_RUNNERS[profile](&mut runners[slot], args.max_ops, &subject) {
                Ok(outcome) => outcome,
                Err(e) => {
                    bar.finish_and_clear();
                    eprintln!("error: profile {}: {e}", PROFILES[profile].name);
                    return ExitCode::from(EXIT_INPUT);
                }
            };
            tally.busy += case_started.elapsed();
            tally.cases += 1;
            tally.ops += outcome.ops_checked as u64;
            total_ops += outcome.ops_checked as u64;
            tally.coverage.merge(&outcome.coverage);
            if let Some(mut divergence) = outcome.divergence {
                let saved = divergence.save_in(&failures);
                bar.suspend(|| println!("{divergence}"));
                tally.divergences.push(match saved {
                    Ok(path) => path.display().to_string(),
                    Err(e) => format!("(not saved: {e})"),
                });
            }
        }
        bar.set_position(started.elapsed().as_millis() as u64);
        bar.set_message(format!("{total_ops} ops checked"));
        if !any {
            break;
        }
    }
    bar.finish_and_clear();
    let ring = subject == kvcheck::subject::SubjectSpec::Ring;
    print_tables(&selected, &tallies, started.elapsed(), &capabilities, ring)
}

fn print_tables(
    selected: &[usize],
    tallies: &[Tally],
    elapsed: Duration,
    capabilities: &Capabilities,
    ring: bool,
) -> ExitCode {
    println!(
        "\n{:<12} {:<7} {:>8} {:>10} {:>10} {:>11}  missing events",
        "profile", "cache", "cases", "ops", "ops/s", "divergences"
    );
    let mut divergences = Vec::new();
    let mut all = Coverage::default();
    for (slot, &profile) in selected.iter().enumerate() {
        let (p, t) = (&PROFILES[profile], &tallies[slot]);
        let rate = t.ops as f64 / t.busy.as_secs_f64().max(1e-9);
        let missing = t.coverage.missing(&required_events(p, capabilities));
        let missing = if t.cases == 0 {
            "(not run)".to_string()
        } else if missing.is_empty() {
            "-".to_string()
        } else {
            missing.join(" ")
        };
        let cache = if p.name == "packed" {
            "packed"
        } else if ring {
            "ring"
        } else {
            "dense"
        };
        println!(
            "{:<12} {:<7} {:>8} {:>10} {:>10.0} {:>11}  {missing}",
            p.name,
            cache,
            t.cases,
            t.ops,
            rate,
            t.divergences.len()
        );
        divergences.extend(t.divergences.iter().cloned());
        all.merge(&t.coverage);
    }
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
    let total: u64 = tallies.iter().map(|t| t.ops).sum();
    println!("\n{total} ops checked in {:.1} s", elapsed.as_secs_f64());
    if divergences.is_empty() {
        println!("no divergences");
        ExitCode::SUCCESS
    } else {
        println!("{} divergences; traces:", divergences.len());
        for path in &divergences {
            println!("  {path}");
        }
        ExitCode::from(EXIT_MISMATCH)
    }
}
