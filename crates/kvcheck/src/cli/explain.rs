//! `kvcheck explain`: a step-by-step walk through a trace.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use kvcheck::explain::explain;
use kvcheck::subject::SubjectSpec;
use kvcheck::trace::Trace;

use super::{EXIT_INPUT, EXIT_MISMATCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to explain.
    file: PathBuf,
    /// What to check against the model: `cache`, `reference` or `fault:NAME`.
    #[arg(long, default_value = "cache")]
    subject: SubjectSpec,
}

pub fn run(args: Args) -> ExitCode {
    let trace = match Trace::load(&args.file) {
        Ok(trace) => trace,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    match explain(&trace, args.subject, std::io::stdout().is_terminal()) {
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            ExitCode::from(EXIT_INPUT)
        }
        Ok((text, divergence)) => {
            print!("{text}");
            if divergence.is_some() {
                ExitCode::from(EXIT_MISMATCH)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}
