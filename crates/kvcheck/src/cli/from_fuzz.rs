//! `kvcheck from-fuzz`: turn a fuzz crash or corpus file into a kvtrace file.

use std::path::PathBuf;
use std::process::ExitCode;

use kvcheck::fuzzcase::Target;

use super::EXIT_INPUT;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fuzz target that produced the file: dense_lockstep,
    /// packed_lockstep, model_invariants or trace_load.
    #[arg(value_parser = parse_target)]
    target: Target,
    /// The crash, corpus or artifact file (raw fuzzer bytes).
    file: PathBuf,
    /// Write the trace here instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

fn parse_target(name: &str) -> Result<Target, String> {
    Target::from_name(name).ok_or_else(|| {
        format!(
            "unknown target {name:?}: expected one of {}",
            Target::ALL.map(Target::name).join(", ")
        )
    })
}

pub fn run(args: Args) -> ExitCode {
    let bytes = match std::fs::read(&args.file) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let mut trace = match args.target.to_trace(&bytes) {
        Ok(trace) => trace,
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    if trace.note.is_none() {
        trace.note = Some(format!(
            "from fuzz target {} input {}",
            args.target.name(),
            args.file.display()
        ));
    }
    match &args.output {
        None => {
            print!("{}", trace.to_json());
            ExitCode::SUCCESS
        }
        Some(path) => match trace.save(path) {
            Ok(()) => {
                eprintln!("wrote {}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_INPUT)
            }
        },
    }
}
