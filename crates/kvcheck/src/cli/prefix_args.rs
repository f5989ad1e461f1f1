//! What every `kvcheck prefix` command takes: the prefix subject, named
//! on the command line, and its judge; and how a failure is shown and
//! saved.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use kvcache::fault::PrefixFault;
use kvcheck::engine::prefix::campaign::{PagedSubject, PrefixCaseFailure, PrefixSubject};
use kvcheck::engine::prefix::drive::Judge;
use kvcheck::engine::prefix::invariants::Invariant;
use kvcheck::settings::Settings;
use kvcheck::subject::ExecPrefixSubject;

use super::{failures_dir, CliError};

/// A prefix subject named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixSubjectSpec {
    /// The shipped paged cache.
    Paged,
    /// The paged cache with a planted fault.
    Fault(PrefixFault),
    /// A process.
    Exec(String),
}

impl std::str::FromStr for PrefixSubjectSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<PrefixSubjectSpec, String> {
        if text == "paged" {
            return Ok(PrefixSubjectSpec::Paged);
        }
        if let Some(command) = text.strip_prefix("exec:") {
            return match command.trim().is_empty() {
                true => Err("exec: needs a command".into()),
                false => Ok(PrefixSubjectSpec::Exec(command.to_string())),
            };
        }
        if let Some(name) = text.strip_prefix("fault:") {
            return PrefixFault::from_name(name)
                .map(PrefixSubjectSpec::Fault)
                .ok_or_else(|| {
                    format!(
                        "unknown paged fault {name:?}: expected one of {}",
                        fault_names()
                    )
                });
        }
        Err(format!(
            "unknown prefix subject {text:?}: expected paged, fault:NAME (NAME one of {}) or exec:'COMMAND ARGS'",
            fault_names()
        ))
    }
}

fn fault_names() -> String {
    PrefixFault::ALL.map(PrefixFault::name).join(", ")
}

/// The judge named on the command line.
fn parse_judge(text: &str) -> Result<JudgeName, String> {
    match text {
        "model" => Ok(JudgeName::Model),
        "invariants" => Ok(JudgeName::Invariants),
        _ => Err(format!(
            "unknown judge {text:?}: expected model or invariants"
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JudgeName {
    Model,
    Invariants,
}

fn parse_invariant(text: &str) -> Result<Invariant, String> {
    Invariant::from_id(text).ok_or_else(|| {
        let ids: Vec<_> = Invariant::ALL.iter().map(|i| i.id()).collect();
        format!(
            "unknown invariant {text:?}: expected one of {}",
            ids.join(", ")
        )
    })
}

/// Where the subject and its judge come from, for every `prefix` command.
#[derive(clap::Args, Debug, Clone)]
pub struct PrefixSubjectArgs {
    /// The prefix cache checked: `paged` (the shipped PagedCache),
    /// `fault:NAME` (it with a planted fault: trust-weak-hash,
    /// skip-copy-on-write, hit-stays-evictable) or `exec:'COMMAND ARGS'`
    /// (a process speaking the prefix family, docs/subject-protocol.md).
    #[arg(long, default_value = "paged")]
    subject: PrefixSubjectSpec,
    /// Seconds an `exec:` subject has for each response [default:
    /// $KVCHECK_SUBJECT_TIMEOUT, else 10].
    #[arg(long, value_parser = kvcheck::subject::parse_timeout)]
    subject_timeout: Option<Duration>,
    /// `model` (op by op, exactly) or `invariants` (docs/contract.md §17,
    /// whatever the eviction policy) [default: what the subject's policy
    /// calls for: model for `contract`, invariants for `own`].
    #[arg(long, value_parser = parse_judge)]
    judge: Option<JudgeName>,
    /// An invariant the `invariants` judge does not check (P1, P2, P3, P4,
    /// P5, P7, P8, P9, refusals); repeat or separate with commas. For a
    /// departure the library makes by design, so the rest stay judged.
    #[arg(long, value_delimiter = ',', value_parser = parse_invariant)]
    waive: Vec<Invariant>,
}

impl PrefixSubjectArgs {
    pub(super) fn open(&self, settings: &Settings) -> Result<Box<dyn PrefixSubject>, CliError> {
        Ok(match &self.subject {
            PrefixSubjectSpec::Paged => Box::new(PagedSubject { fault: None }),
            PrefixSubjectSpec::Fault(fault) => Box::new(PagedSubject {
                fault: Some(*fault),
            }),
            PrefixSubjectSpec::Exec(command) => {
                let timeout = self.subject_timeout.unwrap_or(settings.subject_timeout);
                Box::new(
                    ExecPrefixSubject::spawn(command, timeout)
                        .map_err(|e| CliError::PrefixSubject(format!("exec:{command}: {e}")))?,
                )
            }
        })
    }

    /// The subject as named.
    pub(super) fn spec(&self) -> &PrefixSubjectSpec {
        &self.subject
    }

    pub(super) fn judge(&self) -> Result<Option<Judge>, CliError> {
        let waived: BTreeSet<Invariant> = self.waive.iter().copied().collect();
        match self.judge {
            Some(JudgeName::Model) if !waived.is_empty() => Err(CliError::PrefixSubject(
                "--waive applies to the invariants judge; the model judges everything".into(),
            )),
            Some(JudgeName::Model) => Ok(Some(Judge::Model)),
            Some(JudgeName::Invariants) => Ok(Some(Judge::Invariants(waived))),
            None if waived.is_empty() => Ok(None),
            None => Ok(Some(Judge::Invariants(waived))),
        }
    }
}

/// Prints a failure and its minimized form, saves the trace as
/// `NAME.kvtrace.json` under the failures folder with the line that
/// replays it, and returns the failing status.
pub fn save_failure(
    failure: PrefixCaseFailure,
    name: &str,
    out: Option<PathBuf>,
    spec: &PrefixSubjectSpec,
    settings: &Settings,
) -> Result<(), CliError> {
    println!(
        "failed after {} ops:\n{}",
        failure.ops.len(),
        failure.divergence
    );
    let trace = match failure.minimized {
        Ok(minimized) => {
            println!(
                "minimized from {} to {} ops in {} runs:\n{}",
                minimized.before, minimized.after, minimized.tests_run, minimized.divergence
            );
            minimized.trace
        }
        Err(e) => {
            println!("(not minimized: {e})");
            let mut trace = kvmodel::prefix::PrefixTrace::new(failure.config, failure.ops);
            trace.note = Some(format!("{name}, not minimized"));
            trace
        }
    };
    let dir = failures_dir(out, settings);
    let path = dir.join(format!("{name}.kvtrace.json"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let text = serde_json::to_string_pretty(&trace).map_err(std::io::Error::other)?;
        std::fs::write(&path, text + "\n")
    });
    match written {
        Ok(()) => println!(
            "saved {}\nreplay: kvcheck prefix replay {} --subject {}",
            path.display(),
            path.display(),
            shell_words::quote(&spec_text(spec))
        ),
        Err(e) => eprintln!("could not save the trace to {}: {e}", path.display()),
    }
    Err(CliError::Diverged)
}

fn spec_text(spec: &PrefixSubjectSpec) -> String {
    match spec {
        PrefixSubjectSpec::Paged => "paged".into(),
        PrefixSubjectSpec::Fault(f) => format!("fault:{f}"),
        PrefixSubjectSpec::Exec(command) => format!("exec:{command}"),
    }
}
