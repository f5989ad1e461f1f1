//! `kvcheck from-fuzz`: turn a fuzz crash or corpus file into a kvtrace
//! file, or, with `--keep-going`, triage a fuzzer's crashes: every input
//! replayed against the subject, the divergences grouped by signature and
//! one of each minimized.

use std::path::{Path, PathBuf};

use kvcheck::engine::fuzzcase::Target;
use kvcheck::engine::minimize::run_subject;
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::triage::Triage;
use kvcheck::report::findings::findings_table;
use kvcheck::settings::Settings;

use super::{failures_dir, CliError};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fuzz target that produced the file: dense_lockstep,
    /// packed_lockstep, model_invariants, trace_load or prefix_lockstep.
    #[arg(value_parser = parse_target)]
    target: FuzzTarget,
    /// The crash, corpus or artifact file (raw fuzzer bytes); with
    /// --keep-going, any number of files and directories (every file in
    /// them, e.g. `fuzz/artifacts/dense_lockstep`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write the trace here instead of standard output.
    #[arg(short, long, conflicts_with = "keep_going")]
    output: Option<PathBuf>,
    /// With --keep-going: directory for the traces of the findings
    /// [default: target/kvcheck-failures in a checkout of kvcheck, else
    /// kvcheck-failures].
    #[arg(long, requires = "keep_going")]
    out: Option<PathBuf>,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    #[command(flatten)]
    triage: super::triage::TriageArgs,
}

/// A fuzz target name that names no target of `fuzz/fuzz_targets/`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown target {name:?}: expected one of {}, {PREFIX_TARGET}",
    Target::ALL.map(Target::name).join(", ")
)]
pub struct UnknownTarget {
    /// The name given.
    pub name: String,
}

/// The prefix family's fuzz target, whose inputs decode to prefix traces.
const PREFIX_TARGET: &str = "prefix_lockstep";

/// A target of `fuzz/fuzz_targets/`: one of the streaming family's, or
/// the prefix family's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuzzTarget {
    /// A streaming target.
    Streaming(Target),
    /// `prefix_lockstep`.
    Prefix,
}

fn parse_target(name: &str) -> Result<FuzzTarget, UnknownTarget> {
    if name == PREFIX_TARGET {
        return Ok(FuzzTarget::Prefix);
    }
    Target::from_name(name)
        .map(FuzzTarget::Streaming)
        .ok_or_else(|| UnknownTarget {
            name: name.to_string(),
        })
}

/// `from-fuzz prefix_lockstep FILE`: the prefix trace the input decodes to.
fn prefix_trace(args: &Args) -> Result<(), CliError> {
    let [file] = args.files.as_slice() else {
        return Err(CliError::OneInputAtATime);
    };
    let bytes = std::fs::read(file).map_err(|source| CliError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let mut trace = kvcheck::engine::prefix::fuzz::decode(&bytes);
    trace.note = Some(format!(
        "from fuzz target {PREFIX_TARGET} input {}",
        file.display()
    ));
    let text = serde_json::to_string_pretty(&trace).expect("plain JSON values") + "\n";
    match &args.output {
        None => print!("{text}"),
        Some(path) => {
            std::fs::write(path, text).map_err(|source| CliError::Write {
                path: path.clone(),
                source,
            })?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

pub fn run(args: Args, settings: &Settings) -> Result<(), CliError> {
    let target = match args.target {
        FuzzTarget::Prefix if args.triage.keep_going => {
            return Err(CliError::PrefixSubject(format!(
                "--keep-going triages the streaming targets; replay {PREFIX_TARGET} inputs one by one, or run `kvcheck prefix replay` on their traces"
            )))
        }
        FuzzTarget::Prefix => return prefix_trace(&args),
        FuzzTarget::Streaming(target) => target,
    };
    if args.triage.keep_going {
        return triage(&args, target, settings);
    }
    let [file] = args.files.as_slice() else {
        return Err(CliError::OneInputAtATime);
    };
    let mut trace = read_trace(target, file)?;
    if trace.note.is_none() {
        trace.note = Some(format!(
            "from fuzz target {} input {}",
            target.name(),
            file.display()
        ));
    }
    match &args.output {
        None => print!("{}", trace.to_json()),
        Some(path) => {
            trace.save(path)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn read_trace(target: Target, file: &Path) -> Result<kvcheck::check::trace::Trace, CliError> {
    let bytes = std::fs::read(file).map_err(|source| CliError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    target.to_trace(&bytes).map_err(|source| CliError::Decode {
        file: file.to_path_buf(),
        source,
    })
}

/// The inputs named on the command line, directories expanded to the
/// files in them, sorted so that the first input of a signature is the
/// same on every machine.
fn inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| CliError::Read {
                path: path.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// `--keep-going`: every input replayed against the subject, the
/// divergences triaged.
fn triage(args: &Args, target: Target, settings: &Settings) -> Result<(), CliError> {
    let files = inputs(&args.files)?;
    let subject = args.subject.spec();
    super::announce(&subject);
    let (mut triage, mut skipped, mut passed) = (Triage::new(), 0, 0);
    for (i, file) in files.iter().enumerate() {
        let trace = match read_trace(target, file) {
            Ok(trace) => trace,
            Err(error) => {
                // Reported, counted, and the triage goes on.
                error.report();
                skipped += 1;
                continue;
            }
        };
        match run_subject(&trace.config, &trace.ops, &subject) {
            None => passed += 1,
            Some(divergence) => {
                let first = || {
                    file.file_name()
                        .map_or(String::new(), |n| n.to_string_lossy().into())
                };
                if let Some(signature) = triage.record(i as u64, first, divergence) {
                    eprintln!(
                        "new finding #{}: {signature} ({})",
                        triage.len(),
                        file.display()
                    );
                }
            }
        }
    }
    println!(
        "{} inputs: {} diverge, {passed} agree or cannot run on the subject, {skipped} unreadable",
        files.len(),
        triage.total()
    );
    let dir = failures_dir(args.out.clone(), settings);
    // The inputs were checked against the model (`run_subject`).
    let model = Oracle::model();
    let findings = super::triage::settle(&args.triage, &triage, &subject, &model, &dir, settings);
    print!("{}", findings_table(&findings));
    if findings.is_empty() {
        Ok(())
    } else {
        Err(CliError::Diverged)
    }
}
