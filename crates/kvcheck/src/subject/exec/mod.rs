//! The out-of-process subject: a cache in another process, driven over the
//! kvcheck-subject/1 line protocol of `docs/subject-protocol.md`.
//!
//! [`ExecSubject`] spawns `COMMAND ARGS` once (split like a POSIX shell
//! would, with `shell-words`), says `hello`, and keeps the process for the
//! next case: every [`ExecSubject::open`] sends `open` to an idle process
//! (or spawns one when all are busy) and returns an [`ExecCache`], a
//! [`KvCache`] whose every call is one request and one response. Payloads go
//! out as the exact little-endian bytes of the harness's tensors (base64);
//! returned view bytes are decoded back into tensors, so the driver's value
//! comparison and row decoding work unchanged.
//!
//! A reader thread turns the process's stdout into lines on a channel, so a
//! response that does not come within the timeout is a [`SubjectFailure::Timeout`]
//! (the process is killed) rather than a hang. Another thread keeps the last
//! [`STDERR_LINES`] lines of stderr for the reports. A process that crashed,
//! timed out or broke the protocol is never reused: the next case spawns a
//! fresh one.

use std::time::Duration;

mod cache;
mod failure;
mod pool;
mod process;
mod protocol;

pub use cache::*;
pub use failure::*;
pub use pool::*;
#[allow(unused_imports)]
pub(crate) use process::*;
pub use protocol::*;

/// The protocol version said in `hello`.
pub const PROTOCOL: &str = "kvcheck-subject/1";

/// The revision of [`PROTOCOL`] this harness speaks, sent in its `hello`.
/// Revision 2 adds `reports` (capacity and resident bytes in responses) and
/// `adapter` exceptions, revision 3 the `outside` answer and the `domain`
/// capability, revision 4 the `trims` capability (the trim modes a subject
/// opens); a subject written for an older revision ignores the field
/// and keeps working.
pub const REVISION: u64 = 4;

/// Response timeout when neither `--subject-timeout` nor
/// `KVCHECK_SUBJECT_TIMEOUT` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time a new process has for its `hello` and its first `open`:
/// starting an interpreter and importing a framework (an adapter may answer
/// `hello` at once and import in the background until `open`) can take far
/// longer than answering one op.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of the subject's stderr kept for reports.
pub const STDERR_LINES: usize = 20;

/// A `--subject-timeout` that is not a positive, finite number of seconds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a positive number of seconds")]
pub struct InvalidTimeout {
    /// The text parsed.
    pub text: String,
}

/// Parses a timeout in seconds (`10`, `0.5`); anything but a positive,
/// finite number is an [`InvalidTimeout`] quoting the text.
pub fn parse_timeout(text: &str) -> Result<Duration, InvalidTimeout> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(InvalidTimeout {
            text: text.to_string(),
        }),
    }
}
