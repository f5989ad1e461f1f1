//! `kvcheck minimize`: shrink a failing trace, keeping the same failure.

use std::path::PathBuf;

use kvcheck::engine::minimize::{minimize_with, Minimized};
use kvcheck::settings::Settings;

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The failing trace.
    file: PathBuf,
    /// Write the minimized trace here instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    /// Most lockstep runs to spend [default: $KVCHECK_MAX_TESTS, else 2000].
    #[arg(long)]
    max_tests: Option<usize>,
}

pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    if super::prefix::is_prefix_file(&args.file) {
        return super::prefix::minimize_file(
            &args.file,
            &args.subject.spec(),
            args.output.as_deref(),
            args.max_tests.unwrap_or(settings.max_tests),
        );
    }
    let mut trace = super::load_trace(&args.file)?;
    let subject = args.subject.spec();
    super::announce(&subject);
    let oracle = super::trace_oracle(&args.subject, &mut trace, &args.file)?;
    let minimized = minimize_with(
        &trace,
        subject,
        &oracle,
        args.max_tests.unwrap_or(settings.max_tests),
    )
    .map_err(|source| CliError::Minimize {
        file: args.file.clone(),
        source,
    })?;
    print_summary(&minimized, &mut std::io::stderr());
    match &args.output {
        None => print!("{}", minimized.trace.to_json()),
        Some(path) => {
            minimized.trace.save(path)?;
            eprintln!("wrote {}", path.display());
        }
    }
    // The minimized trace still fails: that is the point, but a script that
    // pipes it on should know, so the status says "divergence".
    Err(CliError::StillFails)
}

/// The before/after sizes, the passes and the kept failure, for people.
pub fn print_summary(m: &Minimized, out: &mut dyn std::io::Write) {
    // Writing to a closed stderr is not worth failing over.
    let _ = (|| -> std::io::Result<()> {
        writeln!(out, "before: {}", m.before)?;
        writeln!(out, "after:  {}", m.after)?;
        writeln!(
            out,
            "kept:   {} at step {} ({})",
            m.divergence.kind, m.divergence.step, m.divergence.op
        )?;
        writeln!(
            out,
            "tests:  {}{}",
            m.tests_run,
            if m.one_minimal {
                " (1-minimal: removing any single op loses the failure)"
            } else {
                " (budget spent before the 1-minimal check finished)"
            }
        )?;
        writeln!(out, "passes:")?;
        for pass in &m.passes {
            writeln!(out, "  {pass}")?;
        }
        Ok(())
    })();
}
