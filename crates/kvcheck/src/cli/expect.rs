//! `kvcheck expect`: fill a trace's `expect` from the model.

use std::path::PathBuf;
use std::process::ExitCode;

use kvcheck::trace::Trace;

use super::EXIT_INPUT;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to complete.
    file: PathBuf,
    /// Write the result here instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    let trace = match Trace::load(&args.file) {
        Ok(trace) => trace.with_model_expect(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    match &args.output {
        None => {
            print!("{}", trace.to_json());
            ExitCode::SUCCESS
        }
        Some(path) => match trace.save(path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_INPUT)
            }
        },
    }
}
