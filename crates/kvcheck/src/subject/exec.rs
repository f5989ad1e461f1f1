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

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use candle_core::{DType, Device, Tensor};
use half::{bf16, f16};
use kvcache::{KvCache, Layout, View};
use kvmodel::{Config, Dtype, ErrorKind, Op, Variant, Write};
use serde::Deserialize;
use serde_json::{json, Value};

use super::capabilities::{Capabilities, Feature, OpKind};

/// The protocol version said in `hello`.
pub const PROTOCOL: &str = "kvcheck-subject/1";

/// The revision of [`PROTOCOL`] this harness speaks, sent in its `hello`.
/// Revision 2 adds `reports` (capacity and resident bytes in responses) and
/// `adapter` exceptions; a subject written for revision 1 ignores the field
/// and keeps working.
pub const REVISION: u64 = 2;

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

/// The timeout from `KVCHECK_SUBJECT_TIMEOUT` (seconds, fractions allowed),
/// else [`DEFAULT_TIMEOUT`]. A value that is not a positive number is an
/// error naming the variable.
pub fn timeout_from_env() -> Result<Duration, String> {
    match std::env::var("KVCHECK_SUBJECT_TIMEOUT") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(text) => {
            parse_timeout(&text).map_err(|e| format!("KVCHECK_SUBJECT_TIMEOUT={text:?}: {e}"))
        }
    }
}

/// Parses a timeout in seconds (`10`, `0.5`).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a positive number of seconds")),
    }
}

/// Whether `KVCHECK_EXACT_KINDS` asks for exact error kinds (`1`, `true`).
pub fn exact_kinds_from_env() -> bool {
    std::env::var("KVCHECK_EXACT_KINDS").is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// What an external subject did instead of an `ok`: a refusal, an exception,
/// or misbehaviour of the process itself. Carried to the driver inside
/// [`kvcache::Error::External`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectFailure {
    /// `err`: a refusal with a SPEC.md kind.
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
        )
    }

    /// Wrapped as a cache error, as the [`KvCache`] methods return it.
    pub fn into_cache_error(self) -> kvcache::Error {
        kvcache::Error::External(Box::new(self))
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
            SubjectFailure::Crash { status, .. } => write!(f, "the subject crashed: {status}")?,
            SubjectFailure::Timeout { after, .. } => write!(
                f,
                "the subject did not answer within {}s and was killed",
                after.as_secs_f64()
            )?,
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

/// The `hello` answer: the subject's name and capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The name it gives itself.
    pub name: String,
    /// What it can express (`internals` is always false).
    pub capabilities: Capabilities,
    /// What its `ok` responses report for comparison (revision 2).
    pub reports: Reports,
}

/// The state a subject reports in every `ok` response to an op or a view,
/// declared in its `hello` capabilities as `reports`. Each is compared with
/// the model after every op, as for in-process caches: capacity (SPEC.md §3
/// step 7 growth) and resident bytes (§6, §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reports {
    /// `capacity` is reported.
    pub capacity: bool,
    /// `resident_bytes` is reported.
    pub resident_bytes: bool,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Report {
    Capacity,
    ResidentBytes,
}

#[derive(Deserialize)]
struct RawHello {
    protocol: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    capabilities: Option<RawCapabilities>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    variants: Option<Vec<Variant>>,
    #[serde(default)]
    dtypes: Option<Vec<Dtype>>,
    #[serde(default)]
    ops: Option<Vec<OpKind>>,
    #[serde(default)]
    features: Vec<Feature>,
    #[serde(default)]
    values: bool,
    #[serde(default)]
    view: bool,
    #[serde(default)]
    reports: Vec<Report>,
}

impl RawCapabilities {
    fn reports(&self) -> Reports {
        let mut reports = Reports::default();
        for report in &self.reports {
            match report {
                Report::Capacity => reports.capacity = true,
                Report::ResidentBytes => reports.resident_bytes = true,
            }
        }
        reports
    }

    fn into_capabilities(self) -> Capabilities {
        let full = Capabilities::full();
        let mut ops = self.ops.unwrap_or(full.ops);
        if !ops.contains(&OpKind::Write) {
            ops.insert(0, OpKind::Write);
        }
        Capabilities {
            variants: self.variants.unwrap_or(full.variants),
            dtypes: self.dtypes.unwrap_or(full.dtypes),
            ops,
            features: self.features,
            values: self.values,
            view: self.view,
            internals: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Response {
    Ok(OkBody),
    Err(ErrBody),
    Exception(ExceptionBody),
}

#[derive(Deserialize)]
struct OkBody {
    #[serde(default)]
    global_end: Option<u64>,
    #[serde(default)]
    visible: Option<Vec<u64>>,
    #[serde(default)]
    k: Option<String>,
    #[serde(default)]
    v: Option<String>,
    #[serde(default)]
    capacity: Option<u64>,
    #[serde(default)]
    resident_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct ErrBody {
    kind: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct ExceptionBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    adapter: bool,
}

/// A running subject process.
struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
    timeout: Duration,
    /// Whether an `open` has been answered (the first one has the start-up
    /// allowance).
    opened: bool,
}

/// Longest excerpt of a bad line quoted in a report.
const QUOTED: usize = 160;

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.chars().count() > QUOTED {
        format!("{}…", text.chars().take(QUOTED).collect::<String>())
    } else {
        text.to_string()
    }
}

impl Process {
    fn spawn(argv: &[String], timeout: Duration) -> Result<Process, SubjectFailure> {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SubjectFailure::Protocol {
                problem: format!("cannot start {:?}: {e}", argv.join(" ")),
                stderr: Vec::new(),
            })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr_pipe = child.stderr.take().expect("stderr is piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if sender.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let ring = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr_pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.by_ref().read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let mut ring = ring.lock().unwrap_or_else(|e| e.into_inner());
                        if ring.len() == STDERR_LINES {
                            ring.pop_front();
                        }
                        ring.push_back(excerpt(&line));
                    }
                }
            }
        });
        Ok(Process {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
            timeout,
            opened: false,
        })
    }

    /// The last stderr lines; waits briefly for the stderr reader to reach
    /// the end when the process is gone, so a dying message is not lost.
    fn stderr_tail(&mut self) -> Vec<String> {
        if let Some(reader) = self.stderr_reader.take() {
            let deadline = Instant::now() + Duration::from_millis(500);
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if !reader.is_finished() {
                self.stderr_reader = Some(reader);
            }
        }
        let ring = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().cloned().collect()
    }

    /// The failure of a process that stopped answering: its exit status,
    /// waited for briefly.
    fn crashed(&mut self) -> SubjectFailure {
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break "closed its standard output without exiting (killed)".to_string();
                }
                Err(e) => break format!("unknown ({e})"),
            }
        };
        SubjectFailure::Crash {
            status,
            stderr: self.stderr_tail(),
        }
    }

    fn protocol(&mut self, problem: String) -> SubjectFailure {
        SubjectFailure::Protocol {
            problem,
            stderr: self.stderr_tail(),
        }
    }

    /// Sends one request line and returns the response line, within
    /// `timeout`, parsed as JSON.
    fn request_within(
        &mut self,
        request: &Value,
        timeout: Duration,
    ) -> Result<Value, SubjectFailure> {
        let mut line = request.to_string();
        line.push('\n');
        let sent = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if sent.is_err() {
            return Err(self.crashed());
        }
        match self.lines.recv_timeout(timeout) {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(value) => Ok(value),
                Err(e) => Err(self.protocol(format!(
                    "a response line is not JSON ({e}): {:?}",
                    excerpt(&bytes)
                ))),
            },
            Err(RecvTimeoutError::Disconnected) => Err(self.crashed()),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(SubjectFailure::Timeout {
                    after: timeout,
                    stderr: self.stderr_tail(),
                })
            }
        }
    }

    /// Says hello and reads the name and capabilities.
    fn hello(&mut self) -> Result<Hello, SubjectFailure> {
        let timeout = self.timeout.max(STARTUP_TIMEOUT);
        let hello = json!({"hello": {"protocol": PROTOCOL, "revision": REVISION}});
        let response = self.request_within(&hello, timeout)?;
        let raw = response
            .get("hello")
            .cloned()
            .ok_or_else(|| format!("expected a hello response, got {response}"))
            .and_then(|hello| {
                serde_json::from_value::<RawHello>(hello)
                    .map_err(|e| format!("malformed hello response ({e}): {response}"))
            });
        let raw = match raw {
            Ok(raw) => raw,
            Err(problem) => return Err(self.protocol(problem)),
        };
        if raw.protocol != PROTOCOL {
            let problem = format!("speaks {:?}, kvcheck speaks {PROTOCOL:?}", raw.protocol);
            return Err(self.protocol(problem));
        }
        let capabilities = raw.capabilities.unwrap_or(RawCapabilities {
            variants: None,
            dtypes: None,
            ops: None,
            features: Vec::new(),
            values: false,
            view: false,
            reports: Vec::new(),
        });
        Ok(Hello {
            name: raw.name.unwrap_or_default(),
            reports: capabilities.reports(),
            capabilities: capabilities.into_capabilities(),
        })
    }

    /// Sends a request and parses its `ok` / `err` / `exception` response.
    fn call(&mut self, request: &Value) -> Result<OkBody, SubjectFailure> {
        self.call_within(request, self.timeout)
    }

    /// [`Process::call`] with its own timeout.
    fn call_within(
        &mut self,
        request: &Value,
        timeout: Duration,
    ) -> Result<OkBody, SubjectFailure> {
        let value = self.request_within(request, timeout)?;
        let response = match serde_json::from_value::<Response>(value.clone()) {
            Ok(response) => response,
            Err(e) => {
                let problem = format!(
                    "expected ok, err or exception ({e}), got {}",
                    excerpt(value.to_string().as_bytes())
                );
                return Err(self.protocol(problem));
            }
        };
        match response {
            Response::Ok(body) => Ok(body),
            Response::Exception(body) if body.adapter => Err(SubjectFailure::Adapter {
                kind: body.kind,
                message: body.message,
            }),
            Response::Exception(body) => Err(SubjectFailure::Exception {
                kind: body.kind,
                message: body.message,
            }),
            Response::Err(body) => {
                match serde_json::from_value::<ErrorKind>(Value::String(body.kind.clone())) {
                    Ok(kind) => Err(SubjectFailure::Refused {
                        kind,
                        message: body.message,
                    }),
                    Err(_) => Err(self.protocol(format!(
                        "err kind {:?} is not a SPEC.md error kind",
                        body.kind
                    ))),
                }
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Closing stdin is the `close` of the protocol; a subject that does
        // not exit promptly is killed.
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command that speaks kvcheck-subject/1, with its idle processes.
pub struct ExecSubject {
    command: String,
    argv: Vec<String>,
    timeout: Duration,
    exact_kinds: bool,
    idle: Mutex<Vec<Process>>,
    hello: Mutex<Option<Hello>>,
    spawned: AtomicUsize,
}

impl fmt::Debug for ExecSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSubject")
            .field("command", &self.command)
            .field("timeout", &self.timeout)
            .field("exact_kinds", &self.exact_kinds)
            .finish_non_exhaustive()
    }
}

impl ExecSubject {
    /// The subject `command_line` (split like a shell would). The timeout
    /// defaults to `KVCHECK_SUBJECT_TIMEOUT` or 10 s, exact kinds to
    /// `KVCHECK_EXACT_KINDS`. Nothing is spawned until it is needed.
    pub fn new(command_line: &str) -> Result<ExecSubject, String> {
        let argv = shell_words::split(command_line)
            .map_err(|e| format!("cannot split the subject command {command_line:?}: {e}"))?;
        if argv.is_empty() {
            return Err(
                "exec: needs a command, e.g. exec:'python3 adapters/reference_subject.py'".into(),
            );
        }
        Ok(ExecSubject {
            command: command_line.trim().to_string(),
            argv,
            timeout: timeout_from_env()?,
            exact_kinds: exact_kinds_from_env(),
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

    fn spawn(&self) -> Result<Process, SubjectFailure> {
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

    fn take_process(&self) -> Result<Process, SubjectFailure> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(process) => Ok(process),
            None => self.spawn(),
        }
    }

    fn give_back(&self, process: Process) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(process);
    }

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
                    subject: Arc::clone(self),
                    process: RefCell::new(Some(process)),
                    config: config.clone(),
                    device: device.clone(),
                    global_end: 0,
                    capacity: Cell::new(config.capacity as u64),
                    resident_bytes: Cell::new(0),
                    capabilities: hello.capabilities,
                    link: Arc::new(OpLink {
                        reports: hello.reports,
                        ..OpLink::default()
                    }),
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

/// One case's cache in a subject process (see the module docs). Dropping it
/// returns a healthy process to its [`ExecSubject`] for the next case.
pub struct ExecCache {
    subject: Arc<ExecSubject>,
    process: RefCell<Option<Process>>,
    config: Config,
    device: Device,
    global_end: u64,
    /// The latest reported capacity (the configured one until reported).
    capacity: Cell<u64>,
    /// The latest reported resident bytes.
    resident_bytes: Cell<u64>,
    capabilities: Capabilities,
    link: Arc<OpLink>,
}

/// What the driver and an [`ExecCache`] share beyond the [`KvCache`] trait:
/// the index of the op being checked (sent with each request as its writer
/// id), and the failure of a `reset`, which the trait cannot return.
#[derive(Debug, Default)]
pub struct OpLink {
    index: AtomicU64,
    reset_failure: Mutex<Option<SubjectFailure>>,
    reports: Reports,
}

impl OpLink {
    /// Sets the index sent with the next requests.
    pub fn set_index(&self, index: u64) {
        self.index.store(index, Ordering::Relaxed);
    }

    /// What the subject reports in its responses, to be compared.
    pub fn reports(&self) -> Reports {
        self.reports
    }

    /// The failure of the latest `reset`, once.
    pub fn take_reset_failure(&self) -> Option<SubjectFailure> {
        self.reset_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl ExecCache {
    /// The link the driver uses (see [`OpLink`]).
    pub fn link(&self) -> Arc<OpLink> {
        Arc::clone(&self.link)
    }

    /// The subject's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn call(&self, request: Value) -> Result<OkBody, SubjectFailure> {
        let mut slot = self.process.borrow_mut();
        let Some(process) = slot.as_mut() else {
            return Err(SubjectFailure::Protocol {
                problem: "the process already failed earlier in this case".into(),
                stderr: Vec::new(),
            });
        };
        let result = process.call(&request);
        if let Err(failure) = &result {
            if failure.is_misbehaviour() {
                // Killed (or dead) and never reused.
                *slot = None;
            }
        }
        result
    }

    fn op_request(&self, op: &Op) -> Value {
        json!({"op": op, "index": self.link.index.load(Ordering::Relaxed)})
    }

    fn moved(&mut self, op: Op) -> kvcache::Result<u64> {
        let body = self
            .call(self.op_request(&op))
            .map_err(SubjectFailure::into_cache_error)?;
        let global_end = self.require_global_end(&body)?;
        self.global_end = global_end;
        Ok(global_end)
    }

    /// The global end of an `ok` response, after [`ExecCache::record_reports`].
    fn require_global_end(&self, body: &OkBody) -> kvcache::Result<u64> {
        self.record_reports(body)?;
        body.global_end.ok_or_else(|| {
            self.fail("an ok response without global_end".into())
                .into_cache_error()
        })
    }

    /// Records the reported state of an `ok` response to `open`, an op or a
    /// view, which a subject that declares it must send in every one.
    fn record_reports(&self, body: &OkBody) -> kvcache::Result<()> {
        let reports = self.link.reports;
        for (declared, name, value, cell) in [
            (reports.capacity, "capacity", body.capacity, &self.capacity),
            (
                reports.resident_bytes,
                "resident_bytes",
                body.resident_bytes,
                &self.resident_bytes,
            ),
        ] {
            match value {
                Some(value) if declared => cell.set(value),
                None if declared => {
                    let problem = format!("an ok response without {name}, which it reports");
                    return Err(self.fail(problem).into_cache_error());
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A protocol failure found while decoding a response: the process is
    /// retired like after any misbehaviour.
    fn fail(&self, problem: String) -> SubjectFailure {
        let mut slot = self.process.borrow_mut();
        match slot.take() {
            Some(mut process) => process.protocol(problem),
            None => SubjectFailure::Protocol {
                problem,
                stderr: Vec::new(),
            },
        }
    }

    /// The view in an `ok` response: positions and (with `values`) tensors
    /// of `heads` heads. Bytes for another whole number of heads are kept
    /// as such, so the driver reports the shape; any other length is a
    /// protocol error.
    fn decode_view(&self, body: OkBody, heads: usize) -> kvcache::Result<View<'_>> {
        let global_end = self.require_global_end(&body)?;
        let Some(positions) = body.visible else {
            return Err(self
                .fail("an ok response to a write or view without visible".into())
                .into_cache_error());
        };
        let c = &self.config;
        let dtype = kvcache::candle_dtype(c.dtype);
        if !self.capabilities.values {
            let empty = Tensor::zeros((c.batch, 0, heads, c.head_dim), dtype, &self.device)?;
            return Ok(View::new(
                global_end,
                positions,
                empty.clone(),
                empty,
                false,
            ));
        }
        let mut tensors = Vec::new();
        for (name, text) in [("k", body.k), ("v", body.v)] {
            let Some(text) = text else {
                return Err(self
                    .fail(format!(
                        "an ok view without {name} from a subject with values"
                    ))
                    .into_cache_error());
            };
            let bytes = match BASE64.decode(text.as_bytes()) {
                Ok(bytes) => bytes,
                Err(e) => {
                    return Err(self
                        .fail(format!("{name} is not base64: {e}"))
                        .into_cache_error())
                }
            };
            let row = c.batch * positions.len() * c.head_dim * c.dtype.size_bytes();
            let heads_held = match row {
                0 if bytes.is_empty() => heads,
                0 => usize::MAX,
                row if bytes.len() % row == 0 => bytes.len() / row,
                _ => usize::MAX,
            };
            if heads_held == usize::MAX {
                let problem = format!(
                    "{name} has {} bytes, expected {} for shape [{}, {}, {heads}, {}] {}",
                    bytes.len(),
                    row * heads,
                    c.batch,
                    positions.len(),
                    c.head_dim,
                    c.dtype.name()
                );
                return Err(self.fail(problem).into_cache_error());
            }
            let shape = [c.batch, positions.len(), heads_held, c.head_dim];
            tensors.push(tensor_from_bytes(&bytes, shape, c.dtype, &self.device)?);
        }
        let v = tensors.pop().expect("two tensors");
        let k = tensors.pop().expect("two tensors");
        Ok(View::new(global_end, positions, k, v, false))
    }
}

impl Drop for ExecCache {
    fn drop(&mut self) {
        if let Some(process) = self.process.get_mut().take() {
            self.subject.give_back(process);
        }
    }
}

/// A tensor's elements as little-endian bytes, row-major.
pub fn tensor_bytes(tensor: &Tensor) -> candle_core::Result<Vec<u8>> {
    let flat = tensor.flatten_all()?;
    Ok(match flat.dtype() {
        DType::F16 => flat
            .to_vec1::<f16>()?
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => flat
            .to_vec1::<bf16>()?
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        _ => flat
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?
            .into_iter()
            .flat_map(f32::to_le_bytes)
            .collect(),
    })
}

/// The tensor of `shape` in `dtype` whose little-endian bytes are `bytes`
/// (whose length the caller checked).
pub fn tensor_from_bytes(
    bytes: &[u8],
    shape: [usize; 4],
    dtype: Dtype,
    device: &Device,
) -> candle_core::Result<Tensor> {
    match dtype {
        Dtype::F32 => {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
        Dtype::F16 => {
            let values: Vec<f16> = bytes
                .chunks_exact(2)
                .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
        Dtype::Bf16 => {
            let values: Vec<bf16> = bytes
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
    }
}

impl KvCache for ExecCache {
    fn config(&self) -> &Config {
        &self.config
    }

    /// The global end of the latest `ok` response.
    fn global_end(&self) -> u64 {
        self.global_end
    }

    /// The latest reported capacity; the configured one for a subject that
    /// does not report it.
    fn capacity(&self) -> usize {
        usize::try_from(self.capacity.get()).unwrap_or(usize::MAX)
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        let mut message = self.op_request(&Op::Write(*request));
        message["k"] = Value::String(BASE64.encode(tensor_bytes(k)?));
        message["v"] = Value::String(BASE64.encode(tensor_bytes(v)?));
        let body = self
            .call(message)
            .map_err(SubjectFailure::into_cache_error)?;
        let heads = match request.heads {
            Some([_, count]) if count >= 1 => count as usize,
            _ => self.config.heads,
        };
        if let Some(g) = body.global_end {
            self.global_end = g;
        }
        self.decode_view(body, heads)
    }

    fn view(&self) -> kvcache::Result<View<'_>> {
        let body = self
            .call(json!({"view": {}}))
            .map_err(SubjectFailure::into_cache_error)?;
        self.decode_view(body, self.config.heads)
    }

    fn rewind(&mut self, to: i64) -> kvcache::Result<u64> {
        self.moved(Op::Rewind { to })
    }

    fn evict(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.moved(Op::Evict { tokens })
    }

    fn pin(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.moved(Op::Pin { tokens })
    }

    /// The trait's reset cannot fail: a subject's failure goes to the
    /// [`OpLink`] and the global end stays as it was.
    fn reset(&mut self) -> u64 {
        match self.moved(Op::Reset) {
            Ok(g) => g,
            Err(e) => {
                if let kvcache::Error::External(inner) = e {
                    if let Ok(failure) = inner.downcast::<SubjectFailure>() {
                        *self
                            .link
                            .reset_failure
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) = Some(*failure);
                    }
                }
                self.global_end
            }
        }
    }

    /// The latest reported resident bytes; 0 for a subject that does not
    /// report them.
    fn resident_bytes(&self) -> u64 {
        self.resident_bytes.get()
    }

    /// Not reported by the protocol: no slots.
    fn layout(&self) -> Layout {
        Layout { slots: Vec::new() }
    }
}
