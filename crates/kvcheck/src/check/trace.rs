//! kvtrace/1: the replayable trace format of `docs/kvtrace.md`, read and written by
//! every engine of the harness.
//!
//! Loading refuses unknown fields, wrong types and unknown ops with serde's
//! message and the line and column; it refuses a configuration that breaks
//! docs/contract.md §1 as `invalid_config` naming the field. Negative numbers in ops
//! are valid here: they become op outcomes (docs/contract.md §3).

use std::fmt;
use std::path::{Path, PathBuf};

use kvmodel::{CacheError, Config, Dtype, Model, Op, Outcome, PackedPolicy, Quant, Trim, Variant};
use serde::{Deserialize, Serialize};

use crate::check::relation::Relation;

/// The `format` tag of every kvtrace/1 file.
pub const FORMAT: &str = "kvtrace/1";

/// The file extension of trace files.
pub const EXTENSION: &str = ".kvtrace.json";

/// A trace: a configuration, operations, and optionally their outcomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// Always [`FORMAT`].
    pub format: &'static str,
    /// Free text: where the trace came from, what it shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What the trace is checked against when not the model: its own
    /// transformed runs (a relation) or another subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleTag>,
    /// A configuration that passed [`Config::validate`].
    pub config: Config,
    /// The operations, in order; op `i` is writer `i`.
    pub ops: Vec<Op>,
    /// One outcome per op, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<Vec<Outcome>>,
}

/// The version of the `oracle` field this reader understands. A reader
/// refuses a larger one by name ([`TraceError::Oracle`]); a reader
/// older than the field refuses any trace that has it, as an unknown field.
pub const ORACLE_VERSION: u32 = 1;

/// The optional top-level `oracle` field: a trace checked against
/// something other than the model (`docs/relations.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleTag {
    /// [`ORACLE_VERSION`] when written.
    pub version: u32,
    /// `self` (relations) or `subject` (another implementation).
    pub kind: OracleKind,
    /// With `self`: the relation that failed (absent: every relation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation: Option<Relation>,
    /// With `subject`: the other subject, as `--oracle` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// What an [`OracleTag`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OracleKind {
    /// The subject against its own transformed runs.
    #[serde(rename = "self")]
    SelfCheck,
    /// The subject against another subject.
    Subject,
}

impl OracleTag {
    /// The tag of a relation failure.
    pub fn relation(relation: Relation) -> OracleTag {
        OracleTag {
            version: ORACLE_VERSION,
            kind: OracleKind::SelfCheck,
            relation: Some(relation),
            subject: None,
        }
    }

    /// The tag of a trace checked by every relation.
    pub fn all_relations() -> OracleTag {
        OracleTag {
            relation: None,
            ..OracleTag::relation(Relation::RefusalPure)
        }
    }

    /// The tag of a trace checked against `subject`.
    pub fn subject(subject: &str) -> OracleTag {
        OracleTag {
            version: ORACLE_VERSION,
            kind: OracleKind::Subject,
            relation: None,
            subject: Some(subject.to_string()),
        }
    }
}

/// Why a trace could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not a kvtrace/1 document: serde's message names the field
    /// or op and the line and column.
    #[error("{origin}not a valid kvtrace/1 document: {message}")]
    Syntax {
        /// `"path: "` or empty.
        origin: String,
        /// serde_json's message with line and column.
        message: String,
    },
    /// The `format` field is not `kvtrace/1`.
    #[error("{origin}format is {found:?}, expected \"kvtrace/1\"")]
    Format {
        /// `"path: "` or empty.
        origin: String,
        /// The value found.
        found: String,
    },
    /// The configuration breaks a rule of docs/contract.md §1.
    #[error("{origin}config.{error}")]
    InvalidConfig {
        /// `"path: "` or empty.
        origin: String,
        /// The `invalid_config` error naming the field.
        error: CacheError,
    },
    /// The `oracle` field is of a newer version, or names no subject.
    #[error("{origin}oracle: {problem}")]
    Oracle {
        /// `"path: "` or empty.
        origin: String,
        /// What is wrong.
        problem: String,
    },
    /// `expect` does not have one outcome per op.
    #[error("{origin}expect has {expect} outcomes but there are {ops} ops")]
    ExpectLength {
        /// `"path: "` or empty.
        origin: String,
        /// Number of ops.
        ops: usize,
        /// Number of outcomes.
        expect: usize,
    },
}

impl TraceError {
    /// The docs/contract.md kind, when the file is refused for its configuration.
    pub fn is_invalid_config(&self) -> bool {
        matches!(self, TraceError::InvalidConfig { .. })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    format: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    oracle: Option<OracleTag>,
    config: RawConfig,
    ops: Vec<Op>,
    #[serde(default)]
    expect: Option<Vec<Outcome>>,
}

fn one() -> i64 {
    1
}

/// The config as written: signed so that a negative value is reported as a
/// config rule, not as a type error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    variant: Variant,
    #[serde(default = "one")]
    batch: i64,
    #[serde(default = "one")]
    heads: i64,
    #[serde(default = "one")]
    head_dim: i64,
    #[serde(default = "default_dtype")]
    dtype: Dtype,
    capacity: i64,
    #[serde(default)]
    sink: i64,
    #[serde(default)]
    window: Option<i64>,
    #[serde(default)]
    growth: bool,
    #[serde(default)]
    global_sink: i64,
    #[serde(default)]
    trim: Trim,
    #[serde(default)]
    packed: Option<RawPacked>,
    #[serde(default)]
    seed: u64,
}

fn default_dtype() -> Dtype {
    Dtype::F32
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPacked {
    #[serde(default)]
    keep_recent_chunks: Option<i64>,
    #[serde(default)]
    quant: Option<Quant>,
    #[serde(default)]
    pack_sink: Option<bool>,
}

fn field(name: &'static str, value: i64, min: i64) -> Result<usize, CacheError> {
    if value < min {
        return Err(CacheError::InvalidConfig {
            field: name,
            reason: format!("must be at least {min}, got {value}"),
        });
    }
    usize::try_from(value).map_err(|_| CacheError::InvalidConfig {
        field: name,
        reason: format!("{value} does not fit this platform"),
    })
}

impl RawConfig {
    fn into_config(self) -> Result<Config, CacheError> {
        let packed = match self.packed {
            None => None,
            Some(raw) => {
                let defaults = PackedPolicy::default();
                Some(PackedPolicy {
                    keep_recent_chunks: match raw.keep_recent_chunks {
                        Some(k) => field("packed.keep_recent_chunks", k, 0)?,
                        None => defaults.keep_recent_chunks,
                    },
                    quant: raw.quant.unwrap_or(defaults.quant),
                    pack_sink: raw.pack_sink.unwrap_or(defaults.pack_sink),
                })
            }
        };
        let config = Config {
            variant: self.variant,
            batch: field("batch", self.batch, 1)?,
            heads: field("heads", self.heads, 1)?,
            head_dim: field("head_dim", self.head_dim, 1)?,
            dtype: self.dtype,
            capacity: field("capacity", self.capacity, 1)?,
            sink: field("sink", self.sink, 0)?,
            window: self.window.map(|w| field("window", w, 0)).transpose()?,
            growth: self.growth,
            global_sink: field("global_sink", self.global_sink, 0)?,
            trim: self.trim,
            packed,
            seed: self.seed,
        };
        config.validate()?;
        Ok(config)
    }
}

fn origin(path: Option<&Path>) -> String {
    path.map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

impl Trace {
    /// A trace of `ops` on `config` without expectations.
    pub fn new(config: Config, ops: Vec<Op>) -> Trace {
        Trace {
            format: FORMAT,
            note: None,
            oracle: None,
            config,
            ops,
            expect: None,
        }
    }

    /// Parses a kvtrace/1 document.
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        Self::parse(text, None)
    }

    /// Reads and parses a kvtrace/1 file; errors name the file.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, Some(path))
    }

    fn parse(text: &str, path: Option<&Path>) -> Result<Trace, TraceError> {
        let raw: RawTrace = serde_json::from_str(text).map_err(|e| TraceError::Syntax {
            origin: origin(path),
            message: e.to_string(),
        })?;
        if raw.format != FORMAT {
            return Err(TraceError::Format {
                origin: origin(path),
                found: raw.format,
            });
        }
        let config = raw
            .config
            .into_config()
            .map_err(|error| TraceError::InvalidConfig {
                origin: origin(path),
                error,
            })?;
        if let Some(tag) = &raw.oracle {
            let problem = if tag.version != ORACLE_VERSION {
                Some(format!(
                    "version {} is not understood by this reader (it reads version {ORACLE_VERSION})",
                    tag.version
                ))
            } else if tag.kind == OracleKind::Subject && tag.subject.is_none() {
                Some("kind subject names no subject".to_string())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(TraceError::Oracle {
                    origin: origin(path),
                    problem,
                });
            }
        }
        if let Some(expect) = &raw.expect {
            if expect.len() != raw.ops.len() {
                return Err(TraceError::ExpectLength {
                    origin: origin(path),
                    ops: raw.ops.len(),
                    expect: expect.len(),
                });
            }
        }
        Ok(Trace {
            format: FORMAT,
            note: raw.note,
            oracle: raw.oracle,
            config,
            ops: raw.ops,
            expect: raw.expect,
        })
    }

    /// The document as pretty JSON (one trailing newline).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a trace always serializes");
        text.push('\n');
        text
    }

    /// Writes the trace to `path`, creating parent directories, atomically
    /// (a reader sees the old file or the new one, never half of one).
    pub fn save(&self, path: &Path) -> Result<(), TraceError> {
        let io = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Atomic: suites and workers running in parallel save traces
        // under the same directory.
        crate::check::atomic::write(path, self.to_json().as_bytes()).map_err(io)
    }

    /// The outcomes the reference model gives for every op, or
    /// [`TraceError::InvalidConfig`] naming the field when the
    /// configuration breaks docs/contract.md §1 ([`Trace::new`] does not check it;
    /// [`Trace::checked`] does).
    pub fn model_outcomes(&self) -> Result<Vec<Outcome>, TraceError> {
        let mut model = Model::new(&self.config).map_err(|error| TraceError::InvalidConfig {
            origin: String::new(),
            error,
        })?;
        Ok(self
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| model.apply(i as u64, op).into())
            .collect())
    }

    /// This trace with `expect` filled in by the reference model. A trace
    /// whose configuration breaks docs/contract.md §1 has no outcomes to fill in: it
    /// is returned without `expect` (and refused, naming the field, when it
    /// is loaded or checked).
    pub fn with_model_expect(mut self) -> Trace {
        self.expect = self.model_outcomes().ok();
        self
    }

    /// [`Trace::new`] for a configuration that may break docs/contract.md §1: the
    /// error names the field, as loading such a file does.
    pub fn checked(config: Config, ops: Vec<Op>) -> Result<Trace, TraceError> {
        Model::new(&config).map_err(|error| TraceError::InvalidConfig {
            origin: String::new(),
            error,
        })?;
        Ok(Trace::new(config, ops))
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// Every `*.kvtrace.json` file under each path (files are taken as given,
/// directories are walked recursively), sorted within each directory.
pub fn collect_trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TraceError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), TraceError> {
        let io = |source| TraceError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        entries.sort();
        for entry in entries {
            if entry.is_dir() {
                walk(&entry, out)?;
            } else if entry.to_string_lossy().ends_with(EXTENSION) {
                out.push(entry);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            walk(path, &mut out)?;
        } else {
            std::fs::metadata(path).map_err(|source| TraceError::Io {
                path: path.clone(),
                source,
            })?;
            out.push(path.clone());
        }
    }
    Ok(out)
}
