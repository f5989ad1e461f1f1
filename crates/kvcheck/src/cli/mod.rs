//! Subcommands of the `kvcheck` binary; each lives in its own file.

mod expect;
#[cfg(feature = "arbitrary")]
mod from_fuzz;
mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for a mismatch or divergence.
pub const EXIT_MISMATCH: u8 = 1;
/// Exit status for unreadable input or bad arguments.
pub const EXIT_INPUT: u8 = 2;

/// Default directory for the traces of divergences.
pub const DEFAULT_FAILURES_DIR: &str = "target/kvcheck-failures";

#[derive(Parser, Debug)]
#[command(
    name = "kvcheck",
    version,
    about = "Check streaming attention KV caches op by op against the reference model of SPEC.md",
    long_about = "kvcheck drives an optimized KV cache and the naive reference model in lockstep and \
                  compares every outcome, visible position and view tensor bit for bit. Failing \
                  sequences are saved as kvtrace/1 files that replay anywhere.",
    after_help = "Examples:\n  kvcheck replay tests/vectors\n  kvcheck expect my.kvtrace.json > my-with-expect.kvtrace.json"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay traces through the model and every cache that supports their variant.
    #[command(
        after_help = "Examples:\n  kvcheck replay tests/vectors\n  kvcheck replay failure.kvtrace.json --json\n  kvcheck replay trace.kvtrace.json --subject reference\n\nExit status: 0 all passed, 1 a mismatch or divergence, 2 a file could not be read."
    )]
    Replay(replay::Args),
    /// Print a trace with `expect` filled in by the model (kvtrace/1 JSON).
    #[command(
        after_help = "Examples:\n  kvcheck expect hand-written.kvtrace.json > tests/regressions/case.kvtrace.json\n  kvcheck expect trace.kvtrace.json -o trace.kvtrace.json"
    )]
    Expect(expect::Args),
    /// Turn a fuzz crash or corpus file into a kvtrace file.
    #[cfg(feature = "arbitrary")]
    #[command(
        after_help = "Targets: dense_lockstep, packed_lockstep, model_invariants, trace_load.\n\nExamples:\n  kvcheck from-fuzz dense_lockstep fuzz/artifacts/dense_lockstep/crash-1a2b -o crash.kvtrace.json\n  kvcheck replay crash.kvtrace.json\n\nExit status: 0 written, 2 the file could not be read or decoded."
    )]
    FromFuzz(from_fuzz::Args),
}

/// Runs the parsed command line and returns the process exit status.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Replay(args) => replay::run(args),
        Command::Expect(args) => expect::run(args),
        #[cfg(feature = "arbitrary")]
        Command::FromFuzz(args) => from_fuzz::run(args),
    }
}

/// A path argument that defaults to the failures directory.
pub fn failures_dir(out: Option<PathBuf>) -> PathBuf {
    out.unwrap_or_else(|| PathBuf::from(DEFAULT_FAILURES_DIR))
}
