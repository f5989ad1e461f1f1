//! [`ExecSubject`]: the command, its settings, and the idle processes kept
//! for the next case.

use super::process::ProcessHome;
use crate::settings::DEFAULT_TIMEOUT;
use crate::subject::exec::Process;
use crate::subject::ExecCache;
use crate::subject::Hello;
use crate::subject::SubjectFailure;
use crate::subject::STARTUP_TIMEOUT;
use candle_core::Device;
use kvmodel::{Config, Variant};
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why an `exec:` command line cannot make an [`ExecSubject`]: nothing is
/// spawned before it is checked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecCommandError {
    /// The command line does not split like a shell would (an unclosed
    /// quote, a trailing backslash).
    #[error("cannot split the subject command {command:?}: {source}")]
    Split {
        /// The command line as given.
        command: String,
        /// What `shell-words` found wrong.
        source: shell_words::ParseError,
    },
    /// The command line holds no word.
    #[error("exec: needs a command, e.g. exec:'python3 adapters/reference_subject.py'")]
    Empty,
}

/// A command that speaks kvcheck-subject/1, with its idle processes.
pub struct ExecSubject {
    pub(super) command: String,
    pub(super) argv: Vec<String>,
    pub(super) timeout: Duration,
    pub(super) exact_kinds: bool,
    pub(super) strict_domain: bool,
    pub(super) idle: Mutex<Vec<Process>>,
    pub(super) hello: Mutex<Option<Hello>>,
    pub(super) spawned: AtomicUsize,
}

impl fmt::Debug for ExecSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSubject")
            .field("command", &self.command)
            .field("timeout", &self.timeout)
            .field("exact_kinds", &self.exact_kinds)
            .field("strict_domain", &self.strict_domain)
            .finish_non_exhaustive()
    }
}

impl ExecSubject {
    /// The subject `command_line` (split like a shell would), with the
    /// default timeout ([`DEFAULT_TIMEOUT`]) and refusals compared as
    /// refused; the caller sets its own ([`ExecSubject::with_timeout`],
    /// [`ExecSubject::with_exact_kinds`], from `--subject-timeout`,
    /// `KVCHECK_SUBJECT_TIMEOUT` and the like). Nothing is spawned until it
    /// is needed.
    pub fn new(command_line: &str) -> Result<ExecSubject, ExecCommandError> {
        let argv = shell_words::split(command_line).map_err(|source| ExecCommandError::Split {
            command: command_line.to_string(),
            source,
        })?;
        if argv.is_empty() {
            return Err(ExecCommandError::Empty);
        }
        Ok(ExecSubject {
            command: command_line.trim().to_string(),
            argv,
            timeout: DEFAULT_TIMEOUT,
            exact_kinds: false,
            strict_domain: false,
            idle: Mutex::new(Vec::new()),
            hello: Mutex::new(None),
            spawned: AtomicUsize::new(0),
        })
    }

    /// The same command with another response timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> ExecSubject {
        self.timeout = timeout;
        self
    }

    /// The same command comparing error kinds exactly (`true`) or treating
    /// every refusal and exception as agreeing with every refusal (`false`).
    pub fn with_exact_kinds(mut self, exact: bool) -> ExecSubject {
        self.exact_kinds = exact;
        self
    }

    /// The same command with every *outside* answer taken for a
    /// divergence and its declared domain ignored (`--strict-domain`).
    pub fn with_strict_domain(mut self, strict: bool) -> ExecSubject {
        self.strict_domain = strict;
        self
    }

    /// Whether every *outside* answer is a divergence.
    pub fn strict_domain(&self) -> bool {
        self.strict_domain
    }

    /// The command line as given.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The response timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether error kinds must match exactly.
    pub fn exact_kinds(&self) -> bool {
        self.exact_kinds
    }

    /// Processes started so far (one per crash, timeout or protocol error,
    /// plus one per case running at the same time).
    pub fn spawned(&self) -> usize {
        self.spawned.load(Ordering::Relaxed)
    }

    pub(super) fn spawn(&self) -> Result<Process, SubjectFailure> {
        let mut process = Process::spawn(&self.argv, self.timeout)?;
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let hello = process.hello()?;
        let mut known = self.hello.lock().unwrap_or_else(|e| e.into_inner());
        match known.as_ref() {
            None => *known = Some(hello),
            Some(first) if *first != hello => {
                let problem = format!(
                    "a new process said hello differently: {:?}, the first said {:?}",
                    hello, first
                );
                return Err(process.protocol(problem));
            }
            Some(_) => {}
        }
        Ok(process)
    }

    pub(super) fn take_process(&self) -> Result<Process, SubjectFailure> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(process) => Ok(process),
            None => self.spawn(),
        }
    }

    pub(super) fn give_back(&self, process: Process) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(process);
    }
}

impl ProcessHome for ExecSubject {
    fn give_back(&self, process: Process) {
        ExecSubject::give_back(self, process);
    }
}

impl ExecSubject {
    /// The subject's `hello`, starting a process if none has said it yet.
    pub fn hello(&self) -> Result<Hello, SubjectFailure> {
        if let Some(hello) = self.hello.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(hello);
        }
        let process = self.spawn()?;
        self.give_back(process);
        Ok(self
            .hello
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .expect("spawn records the hello"))
    }

    /// Opens a fresh cache for `config` in an idle process (or a new one).
    pub fn open(self: &Arc<Self>, config: &Config, device: &Device) -> kvcache::Result<ExecCache> {
        let hello = self.hello().map_err(SubjectFailure::into_cache_error)?;
        let mut process = self
            .take_process()
            .map_err(SubjectFailure::into_cache_error)?;
        let mut filled = config.clone();
        if filled.variant == Variant::Packed {
            filled.packed = Some(filled.packed_policy());
        }
        let timeout = if process.opened {
            process.timeout
        } else {
            process.timeout.max(STARTUP_TIMEOUT)
        };
        let answer = process.call_within(&json!({"open": {"config": filled}}), timeout);
        process.opened = true;
        match answer {
            Ok(body) => {
                let cache = ExecCache {
                    subject: Arc::clone(self) as Arc<dyn ProcessHome>,
                    process: RefCell::new(Some(process)),
                    config: config.clone(),
                    device: device.clone(),
                    global_end: 0,
                    capacity: Cell::new(config.capacity as u64),
                    resident_bytes: Cell::new(0),
                    capabilities: hello.capabilities,
                    index: 0,
                };
                // A fresh cache's state is compared too (before any op
                // succeeds, e.g. after a first refused write).
                cache.record_reports(&body)?;
                Ok(cache)
            }
            Err(failure) => {
                if !failure.is_misbehaviour() {
                    self.give_back(process);
                }
                Err(failure.into_cache_error())
            }
        }
    }
}
