//! `kvcheck power --oracle self`: the zoo checked by the relations and the
//! invariants of one run alone, a column per check, and why the faults no
//! check sees escape.

use std::time::{Duration, Instant};

use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::relation::Relation;
use kvcheck::engine::power::relations::{catch, invisible, SelfCatch};
use kvcheck::engine::power::Target;
use kvcheck::settings::Settings;

use super::{in_parallel, Args};
use crate::cli::CliError;

/// Longest op sequence of a drawn case.
const MAX_OPS: usize = 40;

pub fn measure(
    args: &Args,
    relations: &[Relation],
    targets: &[Target],
    settings: &Settings,
) -> Result<(), CliError> {
    let started = Instant::now();
    let relations = relations.to_vec();
    let rows: Vec<usize> = (0..targets.len())
        .filter(|&i| args.shard.contains(i))
        .collect();
    let jobs = args.jobs.unwrap_or_else(|| settings.workers());
    eprintln!(
        "kvcheck power --oracle {}: {} rows × {} checks, cache {}, seed {}, at most {} cases or {} s per cell, {jobs} workers",
        args.oracle,
        rows.len(),
        relations.len(),
        args.cache,
        args.seed,
        args.cases,
        args.time
    );
    let cells: Vec<(usize, Relation)> = rows
        .iter()
        .flat_map(|&i| relations.iter().map(move |&r| (i, r)))
        .collect();
    let budget = Duration::from_secs_f64(args.time);
    let catches = in_parallel(&cells, jobs, |&(i, relation)| {
        catch(
            targets[i],
            &[relation],
            settings.relation_instances,
            args.seed,
            budget,
            args.cases,
            MAX_OPS,
        )
    });
    let mut header = format!("{:<28}", "fault");
    for r in &relations {
        header.push_str(&format!(" {:>6}", r.id()));
    }
    println!("{header}   first catch: subject ops, minimized ops, replayed");
    let mut false_positive = false;
    let mut escaped = Vec::new();
    for (row, chunk) in rows.iter().zip(catches.chunks(relations.len())) {
        let target = targets[*row];
        let mut line = format!("{:<28}", target.name());
        for (c, relation) in chunk.iter().zip(&relations) {
            let cell = match c.caught {
                Some(DivergenceKind::Relation(r)) if r == *relation => c.cases.to_string(),
                // The subject failed outside any relation first.
                Some(kind) => format!("{}:{}", kind.name(), c.cases),
                None => "·".to_string(),
            };
            line.push_str(&format!(" {cell:>6}"));
        }
        match first(chunk) {
            Some(c) => {
                line.push_str(&format!(
                    "   {} ops, {} ops, {}",
                    c.work.ops,
                    c.minimized_ops.map_or("-".to_string(), |n| n.to_string()),
                    match c.replayed {
                        Some(true) => "replays",
                        Some(false) => "DOES NOT REPLAY",
                        None => "-",
                    }
                ));
                false_positive |= target.fault.is_none();
            }
            None => {
                if let Some(fault) = target.fault {
                    escaped.push((target.name(), invisible(fault)));
                }
            }
        }
        println!("{line}");
    }
    // Per relation, over its whole column: the share of the drawn cases
    // inside its domain (a relation that judges few cases is weak here).
    let mut judged = format!("{:<28}", "judged (% of drawn cases)");
    for (column, relation) in relations.iter().enumerate() {
        let (cases, drawn) = catches
            .iter()
            .skip(column)
            .step_by(relations.len())
            .fold((0, 0), |(cases, drawn), c| {
                (cases + c.work.judged.cases_of(*relation), drawn + c.cases)
            });
        let percent = 100.0 * cases as f64 / drawn.max(1) as f64;
        judged.push_str(&format!(" {:>5.0}%", percent));
    }
    println!("{judged}");
    println!(
        "\ncells: cases drawn until the check (relation M, invariant I) failed (· none within {} cases or {} s; KIND:N another divergence first, after N cases); {:.1} s in all",
        args.cases,
        args.time,
        started.elapsed().as_secs_f64()
    );
    if !escaped.is_empty() {
        println!("\nno relation or invariant sees:");
        for (name, why) in &escaped {
            println!("  {name}: {why}");
        }
    }
    let faults = rows.iter().filter(|&&i| targets[i].fault.is_some()).count();
    println!(
        "\n{} of {faults} faults caught by a relation or an invariant",
        faults - escaped.len()
    );
    if false_positive {
        println!("FALSE POSITIVE: a relation or an invariant failed on the correct cache");
        return Err(CliError::FalsePositive);
    }
    Ok(())
}

/// The catch with the least subject work.
fn first(catches: &[SelfCatch]) -> Option<&SelfCatch> {
    catches
        .iter()
        .filter(|c| c.caught.is_some())
        .min_by_key(|c| c.work.ops)
}
