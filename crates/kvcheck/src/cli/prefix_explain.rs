//! `kvcheck prefix explain`: a prefix trace walked op by op on the model,
//! with the state after each op (every request's tokens, computed count
//! and sealed blocks; the cached prefixes in the order they would be
//! evicted; the counts), up to the subject's first failure, shown where it
//! happens.

use std::fmt::Write as _;
use std::path::PathBuf;

use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::{self as family, PrefixDivergence};
use kvcheck::settings::Settings;
use kvcheck::subject::prefix::Steps;
use kvmodel::prefix::{PrefixModel, PrefixTrace, Token};

use super::prefix_args::PrefixSubjectArgs;
use super::CliError;

/// `kvcheck prefix explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The prefix trace.
    file: PathBuf,
    #[command(flatten)]
    subject: PrefixSubjectArgs,
}

fn tokens(t: &[Token]) -> String {
    let shown: Vec<String> = t.iter().map(ToString::to_string).collect();
    format!("[{}]", shown.join(" "))
}

/// The model's state, indented, one line per request and one for the
/// cache.
fn state(model: &PrefixModel) -> String {
    let b = model.config().block_size;
    let mut out = String::new();
    for (id, r) in model.requests() {
        if r.is_preempted() {
            let _ = writeln!(out, "          r{id} {} preempted", tokens(r.tokens()));
            continue;
        }
        let sealed: Vec<String> = (1..=r.computed() / b)
            .map(|k| tokens(&r.tokens()[(k - 1) * b..k * b]))
            .collect();
        let _ = writeln!(
            out,
            "          r{id} {} computed {}/{}{}",
            tokens(r.tokens()),
            r.computed(),
            r.tokens().len(),
            if sealed.is_empty() {
                String::new()
            } else {
                format!(", sealed blocks {}", sealed.join(" "))
            }
        );
    }
    let order: Vec<String> = model.eviction_order().iter().map(|p| tokens(p)).collect();
    let _ = writeln!(
        out,
        "          cached, first evicted first: {}",
        if order.is_empty() {
            "none".to_string()
        } else {
            order.join(" ")
        }
    );
    out
}

/// The walk of `trace` on the model, stopped at `divergence` if any.
pub fn render(trace: &PrefixTrace, divergence: Option<&PrefixDivergence>) -> String {
    let mut out = String::new();
    let c = &trace.config;
    let _ = writeln!(
        out,
        "config: {} blocks of {} slots, {} layer(s) of {} element(s), hit {}, seed {}",
        c.blocks,
        c.block_size,
        c.layers,
        c.row_width,
        serde_json::to_value(c.hit)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        c.seed
    );
    let Ok(mut model) = PrefixModel::new(c) else {
        let _ = writeln!(out, "the model refuses the config");
        return out;
    };
    for (i, op) in trace.ops.iter().enumerate() {
        if divergence.is_some_and(|d| d.step == i) {
            let _ = writeln!(out, "step {i:>3}  {op}");
            let _ = writeln!(out, "{}", divergence.expect("checked"));
            return out;
        }
        let outcome: kvmodel::prefix::PrefixOutcome = model.apply(i as u64, op).into();
        let _ = writeln!(out, "step {i:>3}  {op}  →  {outcome}");
        out.push_str(&state(&model));
    }
    let _ = writeln!(out, "no failure");
    out
}

/// Runs `kvcheck prefix explain`.
pub fn run(args: ExplainArgs, settings: &Settings) -> Result<(), CliError> {
    let subject = args.subject.open(settings)?;
    let judge = args.subject.judge()?;
    walk_file(&args.file, subject, judge)
}

/// `kvcheck explain` of a prefix trace: the walk on the shipped paged
/// cache under the model.
pub fn explain_on_paged(file: &std::path::Path) -> Result<(), CliError> {
    let paged = kvcheck::engine::prefix::campaign::PagedSubject { fault: None };
    walk_file(file, Box::new(paged), None)
}

fn walk_file(
    file: &std::path::Path,
    mut subject: Box<dyn kvcheck::engine::prefix::campaign::PrefixSubject>,
    judge: Option<Judge>,
) -> Result<(), CliError> {
    let trace = family::load(file)?;
    let judge = judge.unwrap_or_else(|| Judge::for_policy(subject.capabilities().policy));
    let driven = subject
        .drive(&trace.config, &judge, Steps::Free, &trace.ops)
        .map_err(|e| CliError::PrefixSubject(format!("{}: {e}", file.display())))?;
    println!("{} judged by {}", subject.name(), judge.describe());
    print!("{}", render(&trace, driven.divergence.as_ref()));
    match driven.divergence {
        Some(_) => Err(CliError::Diverged),
        None => Ok(()),
    }
}
