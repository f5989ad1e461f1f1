//! `kvcheck save`: store a trace in the regression corpus, minimized when it
//! fails and with `expect` filled by the model.

use std::path::PathBuf;

use kvcheck::check::trace::EXTENSION;

use super::minimize::print_summary;
use super::CliError;

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
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    /// Most lockstep runs to spend minimizing [default: $KVCHECK_MAX_TESTS, else 2000].
    #[arg(long)]
    max_tests: Option<usize>,
}

pub fn run(args: Args, settings: &kvcheck::settings::Settings) -> Result<(), CliError> {
    if args.name.is_empty()
        || !args
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(CliError::InvalidName(args.name.clone()));
    }
    if super::prefix::is_prefix_file(&args.file) {
        let path = args.dir.join(format!("{}{EXTENSION}", args.name));
        let max_tests = args.max_tests.unwrap_or(settings.max_tests);
        return super::prefix_files::save_file(&args.file, &path, max_tests);
    }
    let mut trace = super::load_trace(&args.file)?;
    let subject = args.subject.spec();
    super::announce(&subject);
    let path = args.dir.join(format!("{}{EXTENSION}", args.name));
    let oracle = super::trace_oracle(&args.subject, &mut trace, &args.file)?;
    let max_tests = Some(args.max_tests.unwrap_or(settings.max_tests));
    let saved = kvcheck::engine::suite::save_with(&trace, &subject, &oracle, max_tests, &path)
        .map_err(|source| CliError::Save {
            file: args.file.clone(),
            source,
        })?;
    match &saved.minimized {
        Some(m) => print_summary(m, &mut std::io::stdout()),
        // A passing trace is stored as it is: it pins today's behaviour.
        None => println!(
            "the trace passes on {}; stored as it is",
            subject.name(&trace.config)
        ),
    }
    println!("saved {}", path.display());
    Ok(())
}
