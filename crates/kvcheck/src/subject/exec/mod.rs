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

mod cache;
mod failure;
mod pool;
mod prefix;
mod process;
mod protocol;

pub use cache::*;
pub use failure::*;
pub use pool::*;
pub use prefix::{ExecPrefixCache, ExecPrefixSubject, PREFIX_REVISION};
#[allow(unused_imports)]
pub(crate) use process::*;
pub use protocol::*;
