//! `kvcheck save`: store a trace in the regression corpus, minimized when it
//! fails and with `expect` filled by the model.

use std::path::PathBuf;
use std::process::ExitCode;

use kvcheck::minimize::{max_tests_default, minimize, MinimizeError};
use kvcheck::subject::SubjectSpec;
use kvcheck::trace::EXTENSION;

use super::minimize::print_summary;
use super::EXIT_INPUT;

/// Default directory of the regression corpus.
pub const DEFAULT_REGRESSIONS_DIR: &str = "tests/regressions";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to store.
    file: PathBuf,
    /// File name in the corpus, without the `.kvtrace.json` extension.
    #[arg(long)]
    name: String,
    /// The corpus directory.
    #[arg(long, default_value = DEFAULT_REGRESSIONS_DIR)]
    dir: PathBuf,
    /// The subject whose failure is minimized before saving.
    #[arg(long, default_value = "cache")]
    subject: SubjectSpec,
    /// Most lockstep runs to spend minimizing [default: $KVCHECK_MAX_TESTS, else 2000].
    #[arg(long)]
    max_tests: Option<usize>,
}

pub fn run(args: Args) -> ExitCode {
    if args.name.is_empty()
        || !args
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        eprintln!(
            "error: --name {:?} must be letters, digits, '_' or '-' (it becomes a file name)",
            args.name
        );
        return ExitCode::from(EXIT_INPUT);
    }
    let trace = match super::load_trace(&args.file) {
        Ok(trace) => trace,
        Err(code) => return code,
    };
    let stored = match minimize(
        &trace,
        args.subject,
        args.max_tests.unwrap_or_else(max_tests_default),
    ) {
        Ok(m) => {
            print_summary(&m, &mut std::io::stdout());
            m.trace
        }
        // A passing trace is stored as it is: it pins today's behaviour.
        Err(MinimizeError::DoesNotFail { .. }) => {
            println!(
                "the trace passes on {}; stored as it is",
                args.subject.name(&trace.config)
            );
            trace.with_model_expect()
        }
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let path = args.dir.join(format!("{}{EXTENSION}", args.name));
    match stored.save(&path) {
        Ok(()) => {
            println!("saved {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_INPUT)
        }
    }
}
