//! `kvcheck explain`: a step-by-step walk through a trace.

use std::io::IsTerminal;
use std::path::PathBuf;

use kvcheck::engine::explain::html::render_html;
use kvcheck::engine::explain::{render_text, walk};
use kvcheck::engine::oracle::Oracle;

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to explain.
    file: PathBuf,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    /// Also write the walk as a self-contained HTML page (a coloured grid,
    /// a row per step and a column per position) to this file.
    #[arg(long, value_name = "OUT")]
    html: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if super::prefix::is_prefix_file(&args.file) {
        // The streaming subjects cannot run a prefix trace: it is walked
        // on the shipped paged cache (`kvcheck prefix explain` takes any
        // prefix subject).
        return super::prefix_explain::explain_on_paged(&args.file);
    }
    let mut trace = super::load_trace(&args.file)?;
    let oracle = super::trace_oracle(&args.subject, &mut trace, &args.file)?;
    if !oracle.stepwise() {
        return side_by_side(&args, &trace, &oracle);
    }
    let walk = walk(&trace, args.subject.spec()).map_err(|source| CliError::Walk {
        file: args.file.clone(),
        source,
    })?;
    print!("{}", render_text(&walk, std::io::stdout().is_terminal()));
    if let Some(out) = &args.html {
        std::fs::write(out, render_html(&walk)).map_err(|source| CliError::Write {
            path: out.clone(),
            source,
        })?;
        eprintln!("wrote {}", out.display());
    }
    if walk.divergence.is_some() {
        Err(CliError::Diverged)
    } else {
        Ok(())
    }
}

/// A trace checked against its own runs or another subject: both runs side
/// by side and the first step where they part.
fn side_by_side(
    args: &Args,
    trace: &kvcheck::check::trace::Trace,
    oracle: &Oracle,
) -> Result<(), CliError> {
    let subject = args.subject.spec();
    let found = oracle
        .find(&trace.config, &trace.ops, &subject)
        .map_err(|source| CliError::NotChecked {
            file: args.file.clone(),
            source,
        })?;
    match found {
        None => {
            println!(
                "no divergence: {} agrees with oracle {oracle} on all {} ops",
                subject.name(&trace.config),
                trace.ops.len()
            );
            Ok(())
        }
        Some(finding) => {
            print!("{}", kvcheck::engine::relation::render(&finding));
            Err(CliError::Diverged)
        }
    }
}
