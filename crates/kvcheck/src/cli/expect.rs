//! `kvcheck expect`: fill a trace's `expect` from the model.

use std::path::PathBuf;

use kvcheck::check::trace::Trace;

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to complete.
    file: PathBuf,
    /// Write the result here instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if super::prefix::is_prefix_file(&args.file) {
        return super::prefix_files::expect_file(&args.file, args.output.as_deref());
    }
    let trace = Trace::load(&args.file)?.with_model_expect();
    match &args.output {
        None => print!("{}", trace.to_json()),
        Some(path) => trace.save(path)?,
    }
    Ok(())
}
