//! What an external subject did instead of an `ok`: its refusals,
//! exceptions and the misbehaviour of the process itself.

use kvmodel::ErrorKind;
use std::fmt;
use std::time::Duration;

/// What an external subject did instead of an `ok`: a refusal, an exception,
/// or misbehaviour of the process itself. Carried to the driver inside
/// [`kvcache::Error::External`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectFailure {
    /// `err`: a refusal with a docs/contract.md kind.
    Refused {
        /// The kind given.
        kind: ErrorKind,
        /// The subject's message.
        message: String,
    },
    /// `exception`: something raised that is not a contract kind.
    Exception {
        /// The exception's type (`ValueError`).
        kind: String,
        /// Its message.
        message: String,
    },
    /// The process exited, or closed its stdout, before answering.
    Crash {
        /// The exit status in words.
        status: String,
        /// The last lines of its stderr.
        stderr: Vec<String>,
    },
    /// No response within the timeout; the process was killed.
    Timeout {
        /// The timeout that ran out.
        after: Duration,
        /// The last lines of its stderr.
        stderr: Vec<String>,
    },
    /// `exception` marked `adapter`: the adapter itself could not pass the
    /// request on to the cache it wraps. Its failure, never a refusal of
    /// the cache: it does not agree with the model's refusal.
    Adapter {
        /// The exception's type.
        kind: String,
        /// Its message.
        message: String,
    },
    /// `outside` (revision 3): the request lies outside the subject's
    /// domain. Neither a refusal nor a failure: the case is cut there.
    Outside {
        /// The subject's reason.
        reason: String,
    },
    /// The cache panicked (an in-process cache, caught by the subject's
    /// guard): the op failed and the cache is asked nothing more.
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// A line that is not JSON, a response of the wrong shape, a payload of
    /// the wrong length, or a process that could not be started.
    Protocol {
        /// What was wrong.
        problem: String,
        /// The last lines of its stderr.
        stderr: Vec<String>,
    },
}

impl SubjectFailure {
    /// The last stderr lines this failure carries (empty for responses).
    pub fn stderr(&self) -> &[String] {
        match self {
            SubjectFailure::Crash { stderr, .. }
            | SubjectFailure::Timeout { stderr, .. }
            | SubjectFailure::Protocol { stderr, .. } => stderr,
            _ => &[],
        }
    }

    /// Whether the process is unusable after this (crash, timeout,
    /// protocol); refusals and exceptions leave it in service.
    pub fn is_misbehaviour(&self) -> bool {
        matches!(
            self,
            SubjectFailure::Crash { .. }
                | SubjectFailure::Timeout { .. }
                | SubjectFailure::Protocol { .. }
                | SubjectFailure::Panicked { .. }
        )
    }

    /// Wrapped as a cache error, as the [`KvCache`](kvcache::KvCache) methods
    /// return it; an `outside` answer becomes [`kvcache::Error::Outside`],
    /// the one form every engine reads whatever the subject's kind.
    pub fn into_cache_error(self) -> kvcache::Error {
        match self {
            SubjectFailure::Outside { reason } => kvcache::Error::Outside { reason },
            other => kvcache::Error::External(Box::new(other)),
        }
    }

    /// The failure inside a cache error, if it is one.
    pub fn of(error: &kvcache::Error) -> Option<&SubjectFailure> {
        match error {
            kvcache::Error::External(inner) => inner.downcast_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for SubjectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubjectFailure::Refused { kind, message } => write!(f, "err {kind} ({message})")?,
            SubjectFailure::Exception { kind, message } => {
                write!(f, "exception {kind}: {message}")?
            }
            SubjectFailure::Adapter { kind, message } => write!(
                f,
                "the adapter could not pass the request on ({kind}: {message})"
            )?,
            SubjectFailure::Outside { reason } => write!(f, "outside its domain ({reason})")?,
            SubjectFailure::Crash { status, .. } => write!(f, "the subject crashed: {status}")?,
            SubjectFailure::Timeout { after, .. } => write!(
                f,
                "the subject did not answer within {}s and was killed",
                after.as_secs_f64()
            )?,
            SubjectFailure::Panicked { message } => write!(f, "the cache panicked: {message}")?,
            SubjectFailure::Protocol { problem, .. } => {
                write!(f, "the subject broke the protocol: {problem}")?
            }
        }
        let stderr = self.stderr();
        if !stderr.is_empty() {
            write!(f, "\n          stderr, last {} lines:", stderr.len())?;
            for line in stderr {
                write!(f, "\n          | {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for SubjectFailure {}
