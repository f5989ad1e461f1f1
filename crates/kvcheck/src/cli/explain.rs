//! `kvcheck explain`: a step-by-step walk through a trace.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use kvcheck::explain::html::render_html;
use kvcheck::explain::{render_text, walk};
use kvcheck::oracle::Oracle;

use super::{EXIT_INPUT, EXIT_MISMATCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to explain.
    file: PathBuf,
    #[command(flatten)]
    subject: super::SubjectArgs,
    /// Also write the walk as a self-contained HTML page (a coloured grid,
    /// a row per step and a column per position) to this file.
    #[arg(long, value_name = "OUT")]
    html: Option<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    let trace = match super::load_trace(&args.file) {
        Ok(trace) => trace,
        Err(code) => return code,
    };
    let mut trace = trace;
    let oracle = match super::trace_oracle(&args.subject, &mut trace, &args.file) {
        Ok(oracle) => oracle,
        Err(code) => return code,
    };
    if !oracle.is_model() {
        return side_by_side(&args, &trace, &oracle);
    }
    match walk(&trace, args.subject.spec()) {
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            ExitCode::from(EXIT_INPUT)
        }
        Ok(walk) => {
            print!("{}", render_text(&walk, std::io::stdout().is_terminal()));
            if let Some(out) = &args.html {
                if let Err(e) = std::fs::write(out, render_html(&walk)) {
                    eprintln!("error: {}: {e}", out.display());
                    return ExitCode::from(EXIT_INPUT);
                }
                eprintln!("wrote {}", out.display());
            }
            if walk.divergence.is_some() {
                ExitCode::from(EXIT_MISMATCH)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}

/// A trace checked against its own runs or another subject: both runs side
/// by side and the first step where they part.
fn side_by_side(args: &Args, trace: &kvcheck::trace::Trace, oracle: &Oracle) -> ExitCode {
    let subject = args.subject.spec();
    match oracle.find(&trace.config, &trace.ops, &subject) {
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            ExitCode::from(EXIT_INPUT)
        }
        Ok(None) => {
            println!(
                "no divergence: {} agrees with oracle {oracle} on all {} ops",
                subject.name(&trace.config),
                trace.ops.len()
            );
            ExitCode::SUCCESS
        }
        Ok(Some(finding)) => {
            print!("{}", kvcheck::relation::render(&finding));
            ExitCode::from(EXIT_MISMATCH)
        }
    }
}
