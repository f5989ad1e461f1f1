//! One subject process: spawning it, its reader threads, one request and
//! one response under a timeout, and its clean shutdown.

use crate::subject::exec::OkBody;
use crate::subject::exec::RawCapabilities;
use crate::subject::exec::RawHello;
use crate::subject::exec::Response;
use crate::subject::exec::REVISION;
use crate::subject::Hello;
use crate::subject::SubjectFailure;
use crate::subject::PROTOCOL;
use crate::subject::STARTUP_TIMEOUT;
use crate::subject::STDERR_LINES;
use kvmodel::ErrorKind;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where an open cache returns its process when it is done with it (the
/// subject that started it), so that a cache needs only this of its
/// subject.
pub(super) trait ProcessHome: Send + Sync {
    /// Takes back a healthy process for the next case.
    fn give_back(&self, process: Process);
}

/// A running subject process.
pub(super) struct Process {
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) lines: Receiver<Vec<u8>>,
    pub(super) stderr: Arc<Mutex<VecDeque<String>>>,
    pub(super) stderr_reader: Option<JoinHandle<()>>,
    pub(super) timeout: Duration,
    /// Whether an `open` has been answered (the first one has the start-up
    /// allowance).
    pub(super) opened: bool,
}

/// Longest excerpt of a bad line quoted in a report.
pub(super) const QUOTED: usize = 160;

pub(super) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.chars().count() > QUOTED {
        format!("{}…", text.chars().take(QUOTED).collect::<String>())
    } else {
        text.to_string()
    }
}

impl Process {
    pub(super) fn spawn(argv: &[String], timeout: Duration) -> Result<Process, SubjectFailure> {
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
    pub(super) fn stderr_tail(&mut self) -> Vec<String> {
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
    pub(super) fn crashed(&mut self) -> SubjectFailure {
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

    pub(super) fn protocol(&mut self, problem: String) -> SubjectFailure {
        SubjectFailure::Protocol {
            problem,
            stderr: self.stderr_tail(),
        }
    }

    /// Sends one request line and returns the response line, within
    /// `timeout`, parsed as JSON.
    pub(super) fn request_within(
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
    pub(super) fn hello(&mut self) -> Result<Hello, SubjectFailure> {
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
            domain: None,
            trims: None,
        });
        Ok(Hello {
            name: raw.name.unwrap_or_default(),
            capabilities: capabilities.into_capabilities(),
        })
    }

    /// Sends a request and parses its `ok` / `err` / `exception` response.
    pub(super) fn call(&mut self, request: &Value) -> Result<OkBody, SubjectFailure> {
        self.call_within(request, self.timeout)
    }

    /// [`Process::call`] with its own timeout.
    pub(super) fn call_within(
        &mut self,
        request: &Value,
        timeout: Duration,
    ) -> Result<OkBody, SubjectFailure> {
        let value = self.request_within(request, timeout)?;
        let response = match serde_json::from_value::<Response>(value.clone()) {
            Ok(response) => response,
            Err(e) => {
                let problem = format!(
                    "expected ok, err, exception or outside ({e}), got {}",
                    excerpt(value.to_string().as_bytes())
                );
                return Err(self.protocol(problem));
            }
        };
        match response {
            Response::Ok(body) => Ok(body),
            Response::Outside(body) => Err(SubjectFailure::Outside {
                reason: body.reason,
            }),
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
                        "err kind {:?} is not a docs/contract.md error kind",
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
