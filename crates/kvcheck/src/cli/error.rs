//! [`CliError`]: why a command ends with a non-zero exit status, and the
//! one place that chooses the status ([`CliError::exit_code`]).

use std::path::PathBuf;

use kvcache::fault::{CacheFault, FaultBase};
use kvcheck::check::lockstep::SetupError;
use kvcheck::check::trace::TraceError;
use kvcheck::engine::minimize::MinimizeError;
use kvcheck::engine::oracle::{NotChecked, OracleEnvError, OracleError};
use kvcheck::engine::scale::CampaignError;
use kvcheck::engine::suite::SaveError;
use kvcheck::report::shard::Shard;
use kvcheck::report::ReportError;
use kvcheck::settings::SettingError;
use kvcheck::subject::{SubjectFailure, Unsupported};
use kvcheck::CacheError;

/// Exit status for a mismatch or divergence.
pub const EXIT_MISMATCH: u8 = 1;
/// Exit status for unreadable input or bad arguments.
pub const EXIT_INPUT: u8 = 2;

/// Why fuzzer bytes do not decode (`from-fuzz`); nothing can fail to
/// decode without the fuzz cases of feature `arbitrary`.
#[cfg(feature = "arbitrary")]
pub type DecodeError = kvcheck::engine::fuzzcase::DecodeError;
/// Why fuzzer bytes do not decode (`from-fuzz`); nothing can fail to
/// decode without the fuzz cases of feature `arbitrary`.
#[cfg(not(feature = "arbitrary"))]
pub type DecodeError = std::convert::Infallible;

/// A `--variant` that is neither `dense` nor `packed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown variant {text:?}: expected dense or packed")]
pub struct UnknownVariant {
    /// The text given.
    pub text: String,
}

/// Why a command ends with a non-zero exit status: bad arguments or input
/// (exit 2), or a check that failed (exit 1). [`CliError::exit_code`] is
/// the only place that maps one to the other; `docs/commands.md` and each
/// command's `--help` document the statuses.
///
/// A check that fails has printed its report (the divergence, the table,
/// the events never reached) before it returns the error:
/// [`CliError::is_reported`] says so, and [`CliError::report`] prints only
/// the errors that are not.
#[derive(Debug, thiserror::Error)]
// `from-fuzz` and `power` need feature `arbitrary`; so do their variants.
#[cfg_attr(not(feature = "arbitrary"), allow(dead_code))]
pub enum CliError {
    // ---- Bad arguments or environment (exit 2) ----
    /// A `KVCHECK_*` variable holds something it cannot.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// `KVCHECK_ORACLE` names no oracle (and no `--oracle` was given).
    #[error(transparent)]
    OracleSetting(#[from] OracleEnvError),
    /// `run --profile` names no profile.
    #[error("unknown profile {0:?}; `kvcheck run --list` shows them")]
    UnknownProfile(String),
    /// `--variant` is neither `dense` nor `packed`.
    #[error(transparent)]
    UnknownVariant(#[from] UnknownVariant),
    /// `--time` is not a positive number of seconds.
    #[error("--time must be a positive number of seconds, got {0}")]
    InvalidTime(f64),
    /// `run --shard` without `--seed`: the shards would draw different
    /// cases.
    #[error("--shard {0} needs --seed: every shard of a campaign must draw from the same seed")]
    ShardWithoutSeed(Shard),
    /// `run`: the filters and the subject's capabilities leave no profile.
    #[error("no profile matches the filters and the subject's capabilities")]
    NoProfile,
    /// `save --name` is not usable as a file name.
    #[error("--name {0:?} must be letters, digits, '_' or '-' (it becomes a file name)")]
    InvalidName(String),
    /// `serve` was given an `exec:` subject.
    #[error("serve an in-process subject (an exec: subject already is a process)")]
    ServeExec,
    /// `from-fuzz` without `--keep-going` was given several inputs.
    #[error("one input file at a time; --keep-going triages many")]
    OneInputAtATime,
    /// `power --oracle` names another subject.
    #[error("power measures --oracle model or self")]
    PowerOracle,
    /// `power --engine` names no engine.
    #[error(
        "unknown engine {0:?}: expected suites, run, explore, fuzz or all (or a comma-separated list)"
    )]
    UnknownEngine(String),
    /// `power --fault` names no fault of the zoo.
    #[error(
        "unknown fault {name:?}: expected one of {}",
        CacheFault::ALL.map(CacheFault::name).join(", ")
    )]
    UnknownFault {
        /// The fault named.
        name: String,
    },
    /// `power --fault` names a packed fault for a base without a packed
    /// variant.
    #[error("fault {name:?} lives in the packed cache and --cache {base} has no packed variant")]
    PackedFault {
        /// The fault named.
        name: String,
        /// The `--cache` given.
        base: FaultBase,
    },

    // ---- Unreadable or unusable input (exit 2) ----
    /// A trace could not be read, parsed or written (the message names the
    /// file).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A trace's `oracle` field names no oracle.
    #[error("{}: the trace's oracle: {source}", .file.display())]
    TraceOracle {
        /// The trace file.
        file: PathBuf,
        /// Why the field does not parse.
        source: OracleError,
    },
    /// `replay`: the paths hold no trace file.
    #[error("no *.kvtrace.json files under {0:?}")]
    NoTraces(Vec<PathBuf>),
    /// `replay`: some traces could not be read (each was reported as it
    /// was met).
    #[error("{count} traces could not be read")]
    Unreadable {
        /// How many.
        count: usize,
    },
    /// A file or directory could not be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("{}: {source}", .path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `from-fuzz`: fuzzer bytes that make no trace.
    #[error("{}: {source}", .file.display())]
    Decode {
        /// The input file.
        file: PathBuf,
        /// Why it does not decode.
        source: DecodeError,
    },
    /// `explore`: a configuration breaks docs/contract.md §1.
    #[error("{config}: {source}")]
    InvalidConfig {
        /// The configuration, described.
        config: String,
        /// The `invalid_config` error naming the field.
        source: CacheError,
    },
    /// `explore`: the subject cannot express the configuration or prefix.
    #[error("{config}: {source}")]
    Unsupported {
        /// The configuration, described.
        config: String,
        /// What the subject lacks.
        source: Unsupported,
    },
    /// `explain`: the trace could not be walked on the subject.
    #[error("{}: {source}", .file.display())]
    Walk {
        /// The trace file.
        file: PathBuf,
        /// Why the subject could not run it.
        source: SetupError,
    },
    /// `explain`: the trace could not be checked against its oracle.
    #[error("{}: {source}", .file.display())]
    NotChecked {
        /// The trace file.
        file: PathBuf,
        /// Why.
        source: NotChecked,
    },
    /// `minimize`: the trace does not fail, or the subject cannot run it.
    #[error("{}: {source}", .file.display())]
    Minimize {
        /// The trace file.
        file: PathBuf,
        /// Why.
        source: MinimizeError,
    },
    /// `save`: the trace could not be stored.
    #[error("{}: {source}", .file.display())]
    Save {
        /// The trace file.
        file: PathBuf,
        /// Why.
        source: SaveError,
    },
    /// A prefix-family trace could not be read (the message names the
    /// file and the problem).
    #[error(transparent)]
    PrefixTrace(kvcheck::engine::prefix::PrefixLoadError),
    /// `minimize` of a prefix trace: it does not fail, or the cache could
    /// not be built.
    #[error("{}: {why}", .file.display())]
    PrefixMinimize {
        /// The trace file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// A prefix trace given to a subject other than the shipped paged
    /// cache.
    #[error("{0}")]
    PrefixSubject(String),
    /// `merge`: a report could not be read, or the reports do not merge.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// `--json`: the report could not be written.
    #[error("cannot write the report: {0}")]
    WriteReport(#[source] ReportError),
    /// `run`: a profile's cases could not be drawn or run.
    #[error(transparent)]
    Campaign(#[from] CampaignError),

    // ---- The check failed (exit 1) ----
    /// The subject could not say what it can express (an `exec:` subject
    /// that does not start or does not say `hello`): a broken subject, so
    /// a failed check rather than bad input.
    #[error("cannot ask the subject for its capabilities: {0}")]
    Capabilities(#[source] SubjectFailure),
    /// A divergence, an `expect` mismatch or a relation failure was found
    /// (reported).
    #[error("a divergence was found")]
    Diverged,
    /// `minimize`: the minimized trace still fails, as it should; the
    /// status says so to scripts that pipe it on (reported).
    #[error("the minimized trace still fails")]
    StillFails,
    /// `explore`: required "sometimes" events were never reached
    /// (reported).
    #[error("never reached: {}", .0.join(", "))]
    EventsMissed(Vec<String>),
    /// `power`: faults escaped every engine, or an engine diverged on the
    /// correct cache (reported).
    #[error(
        "escaped every engine: [{}]; diverged on a correct cache: [{}]",
        .escaped.join(", "),
        .false_positives.join(", ")
    )]
    PowerVerdict {
        /// The faults no engine caught.
        escaped: Vec<String>,
        /// The control rows where an engine diverged.
        false_positives: Vec<String>,
    },
    /// `power --oracle self`: a relation failed on the correct cache
    /// (reported).
    #[error("a relation failed on the correct cache")]
    FalsePositive,
    /// `run`: fewer ops were judged than the floor: a subject that answers
    /// `outside` to (nearly) everything cannot pass.
    #[error(
        "only {served} of the {judged} ops judged were served with state (appends and rewrites the contract accepts), fewer than --min-judged {floor}: the subject answered outside its domain to {outside} of {drawn} drawn ops; declare its domain or check that it serves the requests it declares"
    )]
    TooFewJudged {
        /// Ops judged.
        judged: u64,
        /// Judged ops served with state (accepted writes of at least one position).
        served: u64,
        /// The floor.
        floor: u64,
        /// Drawn ops outside the domain.
        outside: u64,
        /// Drawn ops.
        drawn: u64,
    },
    /// `merge`: some shards of the campaign are absent, so the totals are
    /// partial (reported).
    #[error("shards {} are absent", .0.join(" "))]
    ShardsAbsent(Vec<String>),
}

impl CliError {
    /// The process exit status for this error: 1 when the check failed (a
    /// divergence, a mismatch, a missing event, an escaped fault or false
    /// positive, absent shards, a subject that cannot be asked), 2 for bad
    /// arguments, environment or input. A command that returns no error
    /// exits 0.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Capabilities(_)
            | CliError::Diverged
            | CliError::StillFails
            | CliError::EventsMissed(_)
            | CliError::PowerVerdict { .. }
            | CliError::FalsePositive
            | CliError::TooFewJudged { .. }
            | CliError::ShardsAbsent(_) => EXIT_MISMATCH,
            CliError::Setting(_)
            | CliError::OracleSetting(_)
            | CliError::UnknownProfile(_)
            | CliError::UnknownVariant(_)
            | CliError::InvalidTime(_)
            | CliError::ShardWithoutSeed(_)
            | CliError::NoProfile
            | CliError::InvalidName(_)
            | CliError::ServeExec
            | CliError::OneInputAtATime
            | CliError::PowerOracle
            | CliError::UnknownEngine(_)
            | CliError::UnknownFault { .. }
            | CliError::PackedFault { .. }
            | CliError::Trace(_)
            | CliError::TraceOracle { .. }
            | CliError::NoTraces(_)
            | CliError::Unreadable { .. }
            | CliError::Read { .. }
            | CliError::Write { .. }
            | CliError::Decode { .. }
            | CliError::InvalidConfig { .. }
            | CliError::Unsupported { .. }
            | CliError::Walk { .. }
            | CliError::NotChecked { .. }
            | CliError::Minimize { .. }
            | CliError::Save { .. }
            | CliError::PrefixTrace(_)
            | CliError::PrefixMinimize { .. }
            | CliError::PrefixSubject(_)
            | CliError::Report(_)
            | CliError::WriteReport(_)
            | CliError::Campaign(_) => EXIT_INPUT,
        }
    }

    /// Whether the command printed this error's details itself (a
    /// divergence report, a table and its verdict, the traces it could not
    /// read), so that nothing more is printed for it.
    pub fn is_reported(&self) -> bool {
        matches!(
            self,
            CliError::Diverged
                | CliError::StillFails
                | CliError::EventsMissed(_)
                | CliError::PowerVerdict { .. }
                | CliError::FalsePositive
                | CliError::TooFewJudged { .. }
                | CliError::ShardsAbsent(_)
                | CliError::Unreadable { .. }
        )
    }

    /// Prints `error: MESSAGE` on standard error, unless the command has
    /// reported it already ([`CliError::is_reported`]).
    pub fn report(&self) {
        if !self.is_reported() {
            eprintln!("error: {self}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses `docs/commands.md` and the commands' `--help` document:
    /// 1 for a failed check, 2 for bad arguments or input.
    #[test]
    fn exit_codes_are_the_documented_ones() {
        let failed = [
            CliError::Diverged,
            CliError::StillFails,
            CliError::EventsMissed(vec!["evict".into()]),
            CliError::FalsePositive,
            CliError::ShardsAbsent(vec!["2/2".into()]),
            CliError::TooFewJudged {
                judged: 0,
                served: 0,
                floor: 100,
                outside: 40,
                drawn: 40,
            },
            CliError::PowerVerdict {
                escaped: vec!["roll-one-short".into()],
                false_positives: Vec::new(),
            },
        ];
        for error in &failed {
            assert_eq!(error.exit_code(), 1, "{error:?}");
            assert!(error.is_reported(), "{error:?}");
        }
        let input = [
            CliError::NoProfile,
            CliError::InvalidTime(-1.0),
            CliError::UnknownProfile("nope".into()),
            CliError::ServeExec,
            CliError::Unreadable { count: 2 },
        ];
        for error in &input {
            assert_eq!(error.exit_code(), 2, "{error:?}");
        }
    }

    #[test]
    fn messages_name_the_problem() {
        assert_eq!(
            CliError::UnknownProfile("nope".into()).to_string(),
            "unknown profile \"nope\"; `kvcheck run --list` shows them"
        );
        assert_eq!(
            CliError::InvalidTime(0.0).to_string(),
            "--time must be a positive number of seconds, got 0"
        );
        assert_eq!(
            CliError::from(UnknownVariant {
                text: "sparse".into()
            })
            .to_string(),
            "unknown variant \"sparse\": expected dense or packed"
        );
        assert!(!CliError::NoProfile.is_reported());
    }
}
