//! `kvcheck prefix explore`: the exhaustive explorer of the prefix family
//! (`kvcheck::engine::prefix::explore`) on any prefix subject.

use std::path::PathBuf;

use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::explore::{default_configs, explore};
use kvcheck::settings::Settings;
use kvmodel::prefix::{HitRule, PrefixConfig};

use super::prefix_args::{save_failure, PrefixSubjectArgs};
use super::CliError;

/// `kvcheck prefix explore`.
#[derive(clap::Args, Debug)]
pub struct ExploreArgs {
    #[command(flatten)]
    subject: PrefixSubjectArgs,
    /// Longest op sequence explored.
    #[arg(long, default_value_t = 5)]
    depth: usize,
    /// Most distinct states per config; past it, states are judged but not
    /// expanded (the report says so).
    #[arg(long, default_value_t = 20_000)]
    max_states: usize,
    /// Explore this pool size only (with --block-size) [default: 2 and 3].
    #[arg(long, requires = "block_size")]
    blocks: Option<usize>,
    /// Explore this block size only (with --blocks) [default: 1 and 2].
    #[arg(long, requires = "blocks")]
    block_size: Option<usize>,
    /// With --blocks: the hit rule, `leave_one` or `whole` [default: both].
    #[arg(long, value_parser = parse_hit, requires = "blocks")]
    hit: Option<HitRule>,
    /// Directory for the failure's trace [default: target/kvcheck-failures
    /// in a checkout of kvcheck, else kvcheck-failures].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn parse_hit(text: &str) -> Result<HitRule, String> {
    match text {
        "leave_one" => Ok(HitRule::LeaveOne),
        "whole" => Ok(HitRule::Whole),
        _ => Err(format!(
            "unknown hit rule {text:?}: expected leave_one or whole"
        )),
    }
}

/// Runs `kvcheck prefix explore`.
pub fn run(args: ExploreArgs, settings: &Settings) -> Result<(), CliError> {
    let mut subject = args.subject.open(settings)?;
    let caps = subject.capabilities();
    let judge = args
        .subject
        .judge()?
        .unwrap_or_else(|| Judge::for_policy(caps.policy));
    let configs = match (args.blocks, args.block_size) {
        (Some(blocks), Some(block_size)) => {
            let hits = args
                .hit
                .map_or(vec![HitRule::LeaveOne, HitRule::Whole], |h| vec![h]);
            let configs: Vec<PrefixConfig> = hits
                .into_iter()
                .map(|hit| PrefixConfig {
                    hit,
                    ..PrefixConfig::new(blocks, block_size)
                })
                .collect();
            if let Err(e) = kvmodel::prefix::PrefixModel::new(&configs[0]) {
                return Err(CliError::PrefixSubject(format!("the config: {e}")));
            }
            configs
        }
        _ => default_configs(&caps),
    };
    if configs.is_empty() {
        return Err(CliError::PrefixSubject(format!(
            "{} opens none of the explored configs",
            subject.name()
        )));
    }
    eprintln!(
        "kvcheck prefix explore: {} judged by {}, depth {}",
        subject.name(),
        judge.describe(),
        args.depth
    );
    let report = explore(
        subject.as_mut(),
        &judge,
        &configs,
        args.depth,
        args.max_states,
    );
    for c in &report.configs {
        println!(
            "blocks {} block_size {} hit {:<9} {:>7} states {:>9} paths  depth {}{}",
            c.config.blocks,
            c.config.block_size,
            serde_json::to_value(c.config.hit)
                .map_or(String::new(), |v| v.as_str().unwrap_or("").to_string()),
            c.states,
            c.transitions,
            c.depth,
            if c.truncated {
                "  (max states reached)"
            } else {
                ""
            }
        );
    }
    if let Some(problem) = report.setup {
        return Err(CliError::PrefixSubject(format!(
            "{}: {problem}",
            subject.name()
        )));
    }
    let Some(failure) = report.failure else {
        println!("no failure");
        return Ok(());
    };
    let name = format!(
        "prefix-explore-b{}x{}-path{}",
        failure.config.blocks, failure.config.block_size, failure.case
    );
    save_failure(failure, &name, args.out, args.subject.spec(), settings)
}
