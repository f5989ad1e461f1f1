//! A prefix cache in another process: the prefix family of
//! kvcheck-subject/1 (revision 6, docs/subject-protocol.md "The prefix
//! family"). [`ExecPrefixSubject`] spawns the command, says hello and keeps
//! the process for the next case; [`ExecPrefixSubject::open`] gives an
//! [`ExecPrefixCache`], whose every op or probe is one request and one
//! response. A process that crashed, timed out or broke the protocol is
//! dropped, and the next `open` starts a fresh one.

use std::time::Duration;

use base64::Engine as _;
use kvmodel::prefix::{
    BlockCounts, HitRule, PrefixConfig, PrefixEffect, PrefixErrorKind, PrefixOp, RequestId,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::process::{excerpt, Process};
use crate::subject::prefix::{
    Groups, Policy, PrefixCapabilities, PrefixFailure, PrefixSubjectCache, Steps, WindowCaps,
    PREFIX_OPS,
};
use crate::subject::{SubjectFailure, PROTOCOL, STARTUP_TIMEOUT};

/// The protocol revision the prefix family speaks: 5 brought the family,
/// 6 its windows (docs/contract.md §19: the config's `window`, the
/// `window` and `groups` capabilities).
pub const PREFIX_REVISION: u32 = 6;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrefixCapabilities {
    #[serde(default)]
    ops: Option<Vec<String>>,
    #[serde(default)]
    hit: Option<Vec<HitRule>>,
    #[serde(default)]
    block_sizes: Option<Vec<usize>>,
    #[serde(default)]
    policy: Policy,
    #[serde(default)]
    steps: Steps,
    #[serde(default)]
    window: Option<RawWindowCaps>,
    #[serde(default)]
    groups: Option<Groups>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindowCaps {
    #[serde(default)]
    sizes: Option<Vec<usize>>,
    #[serde(default)]
    layers: Option<Vec<usize>>,
}

#[derive(Deserialize)]
struct RawPrefixHello {
    protocol: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    family: Option<String>,
    /// Read after `family`: a streaming subject's capabilities are not
    /// this family's, and the error should say which family it is.
    #[serde(default)]
    capabilities: Option<Value>,
}

fn capabilities(raw: Option<RawPrefixCapabilities>) -> Result<PrefixCapabilities, String> {
    let Some(raw) = raw else {
        return Ok(PrefixCapabilities {
            policy: Policy::Own,
            window: WindowCaps::None,
            ..PrefixCapabilities::full()
        });
    };
    let ops = match raw.ops {
        None => PREFIX_OPS.to_vec(),
        Some(names) => names
            .iter()
            .map(|name| {
                PREFIX_OPS
                    .iter()
                    .find(|op| **op == name.as_str())
                    .copied()
                    .ok_or_else(|| format!("unknown op {name:?} in its capabilities"))
            })
            .collect::<Result<_, _>>()?,
    };
    for required in ["start", "compute", "finish"] {
        if !ops.contains(&required) {
            return Err(format!(
                "its ops lack {required:?}, which every prefix subject implements"
            ));
        }
    }
    let hit = raw
        .hit
        .unwrap_or_else(|| vec![HitRule::LeaveOne, HitRule::Whole]);
    if hit.is_empty() {
        return Err("it opens no hit rule".into());
    }
    if raw
        .block_sizes
        .as_ref()
        .is_some_and(|s| s.is_empty() || s.contains(&0))
    {
        return Err("its block_sizes must be a non-empty list of sizes of at least 1".into());
    }
    let window = match raw.window {
        None => WindowCaps::None,
        Some(w) => {
            if w.sizes
                .as_ref()
                .is_some_and(|s| s.is_empty() || s.contains(&0))
            {
                return Err(
                    "its window sizes must be a non-empty list of sizes of at least 1".into(),
                );
            }
            if w.layers.as_ref().is_some_and(Vec::is_empty) {
                return Err("its windowed layers must name at least one layer".into());
            }
            WindowCaps::Fixed {
                sizes: w.sizes,
                layers: w.layers,
            }
        }
    };
    if raw.groups.is_some_and(|g| g.total() == 0) {
        return Err("its groups hold no block table".into());
    }
    Ok(PrefixCapabilities {
        ops,
        hit,
        block_sizes: raw.block_sizes,
        policy: raw.policy,
        steps: raw.steps,
        window,
        groups: raw.groups,
    })
}

/// A prefix subject process (see the module docs).
pub struct ExecPrefixSubject {
    argv: Vec<String>,
    timeout: Duration,
    process: Option<Process>,
    name: String,
    capabilities: PrefixCapabilities,
}

impl ExecPrefixSubject {
    /// Spawns `command` (split as a POSIX shell would) and says hello; a
    /// setup failure names the command and the problem.
    pub fn spawn(command: &str, timeout: Duration) -> Result<ExecPrefixSubject, SubjectFailure> {
        let argv = shell_words::split(command).map_err(|e| SubjectFailure::Protocol {
            problem: format!("cannot split the command {command:?}: {e}"),
            stderr: Vec::new(),
        })?;
        if argv.is_empty() {
            return Err(SubjectFailure::Protocol {
                problem: "the command is empty".into(),
                stderr: Vec::new(),
            });
        }
        let mut process = Process::spawn(&argv, timeout)?;
        let (name, capabilities) = hello(&mut process)?;
        Ok(ExecPrefixSubject {
            argv,
            timeout,
            process: Some(process),
            name,
            capabilities,
        })
    }

    /// The name it gave itself.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it declared it can express.
    pub fn capabilities(&self) -> &PrefixCapabilities {
        &self.capabilities
    }

    /// Opens a fresh cache of `config` (a new process first if the last
    /// one broke); the subject's refusal or failure otherwise.
    pub fn open(&mut self, config: &PrefixConfig) -> Result<ExecPrefixCache<'_>, PrefixFailure> {
        if self.process.is_none() {
            let mut process = Process::spawn(&self.argv, self.timeout)?;
            let again = hello(&mut process)?;
            if again != (self.name.clone(), self.capabilities.clone()) {
                return Err(PrefixFailure::Subject(
                    "a new process of the subject gave another hello".into(),
                ));
            }
            self.process = Some(process);
        }
        let process = self.process.as_mut().expect("started above");
        let timeout = match process.opened {
            true => process.timeout,
            false => process.timeout.max(STARTUP_TIMEOUT),
        };
        let request = json!({"open": {"config": config}});
        let answer = answer(process, &request, timeout);
        let counts = match answer.and_then(|a| counted(a, "open")) {
            Ok((_, counts)) => counts,
            Err(failure) => {
                if matches!(failure, PrefixFailure::Subject(_)) {
                    self.process = None;
                }
                return Err(failure);
            }
        };
        process.opened = true;
        Ok(ExecPrefixCache {
            groups: self.capabilities.groups,
            home: &mut self.process,
            config: config.clone(),
            counts,
        })
    }
}

/// Says hello as the prefix family does and reads the answer.
fn hello(process: &mut Process) -> Result<(String, PrefixCapabilities), SubjectFailure> {
    let timeout = process.timeout.max(STARTUP_TIMEOUT);
    let request =
        json!({"hello": {"protocol": PROTOCOL, "revision": PREFIX_REVISION, "family": "prefix"}});
    let response = process.request_within(&request, timeout)?;
    let raw = response
        .get("hello")
        .cloned()
        .ok_or_else(|| format!("expected a hello response, got {response}"))
        .and_then(|h| {
            serde_json::from_value::<RawPrefixHello>(h)
                .map_err(|e| format!("malformed hello response ({e}): {response}"))
        });
    let raw = match raw {
        Ok(raw) => raw,
        Err(problem) => return Err(process.protocol(problem)),
    };
    if raw.protocol != PROTOCOL {
        let problem = format!("speaks {:?}, kvcheck speaks {PROTOCOL:?}", raw.protocol);
        return Err(process.protocol(problem));
    }
    if raw.family.as_deref() != Some("prefix") {
        let problem = "its hello names no \"family\": \"prefix\": it is a streaming subject, and the prefix engines drive prefix caches".to_string();
        return Err(process.protocol(problem));
    }
    let caps = raw
        .capabilities
        .map(serde_json::from_value::<RawPrefixCapabilities>)
        .transpose()
        .map_err(|e| e.to_string())
        .and_then(capabilities);
    match caps {
        Ok(caps) => Ok((raw.name.unwrap_or_default(), caps)),
        Err(problem) => Err(process.protocol(format!("malformed capabilities: {problem}"))),
    }
}

/// An `ok` answer: the effect's fields and, for reads, the rows.
struct Answer {
    hit: Option<u64>,
    read: Option<u64>,
    /// Every answer to `open` and to an op carries them; a probe's need not.
    counts: Option<BlockCounts>,
    rows: Option<Vec<f32>>,
}

fn number(body: &Value, field: &str) -> Result<Option<u64>, String> {
    match body.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{field} is not a count: {v}")),
    }
}

fn counts_of(body: &Value) -> Result<BlockCounts, String> {
    let field = |name| number(body, name)?.ok_or_else(|| format!("it lacks {name}"));
    Ok(BlockCounts {
        in_use: field("in_use")?,
        cached: field("cached")?,
        free: field("free")?,
    })
}

fn rows_of(body: &Value) -> Result<Option<Vec<f32>>, String> {
    let Some(text) = body.get("rows") else {
        return Ok(None);
    };
    let text = text.as_str().ok_or("rows is not a base64 string")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("rows is not base64: {e}"))?;
    if bytes.len() % 4 != 0 {
        return Err(format!(
            "rows holds {} bytes, not whole f32 values",
            bytes.len()
        ));
    }
    Ok(Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    ))
}

/// Sends `request` and reads an `ok`, `err`, `exception` or `outside`
/// answer; a process that misbehaves is reported as a subject failure.
fn answer(
    process: &mut Process,
    request: &Value,
    timeout: Duration,
) -> Result<Answer, PrefixFailure> {
    let response = process.request_within(request, timeout)?;
    let shape =
        |problem: String| format!("{problem}, in {}", excerpt(response.to_string().as_bytes()));
    let parsed: Result<Result<Answer, PrefixFailure>, String> =
        if let Some(body) = response.get("ok") {
            (|| {
                Ok(Ok(Answer {
                    hit: number(body, "hit")?,
                    read: number(body, "read")?,
                    counts: counts_of(body).ok(),
                    rows: rows_of(body)?,
                }))
            })()
        } else if let Some(body) = response.get("err") {
            (|| {
                let kind = body.get("kind").cloned().unwrap_or(Value::Null);
                let kind: PrefixErrorKind = serde_json::from_value(kind.clone())
                    .map_err(|_| format!("err kind {kind} is not a docs/contract.md §15 kind"))?;
                let message = body
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                Ok(Err(PrefixFailure::Refused {
                    kind,
                    error: None,
                    message,
                    counts: counts_of(body).ok(),
                }))
            })()
        } else if let Some(body) = response.get("exception") {
            let text = |f| {
                body.get(f)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let adapter = body
                .get("adapter")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let who = if adapter {
                "the adapter failed"
            } else {
                "exception"
            };
            Ok(Err(PrefixFailure::Subject(format!(
                "{who} {}: {}",
                text("type"),
                text("message")
            ))))
        } else if let Some(body) = response.get("outside") {
            let reason = body
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Ok(Err(PrefixFailure::Outside(reason)))
        } else {
            Err("expected ok, err, exception or outside".to_string())
        };
    match parsed {
        Ok(answer) => answer,
        Err(problem) => Err(process.protocol(shape(problem)).into()),
    }
}

/// The answer and its counts, which every `ok` to `open` or an op carries.
fn counted(answer: Answer, to: &str) -> Result<(Answer, BlockCounts), PrefixFailure> {
    match answer.counts {
        Some(counts) => Ok((answer, counts)),
        None => Err(PrefixFailure::Subject(format!(
            "the subject broke the protocol: its ok to {to} lacks in_use, cached or free"
        ))),
    }
}

impl From<SubjectFailure> for PrefixFailure {
    fn from(e: SubjectFailure) -> PrefixFailure {
        match e {
            SubjectFailure::Outside { reason } => PrefixFailure::Outside(reason),
            other => PrefixFailure::Subject(other.to_string()),
        }
    }
}

/// One open cache of an [`ExecPrefixSubject`].
pub struct ExecPrefixCache<'a> {
    home: &'a mut Option<Process>,
    config: PrefixConfig,
    counts: BlockCounts,
    groups: Option<Groups>,
}

impl ExecPrefixCache<'_> {
    fn call(&mut self, request: &Value) -> Result<Answer, PrefixFailure> {
        let Some(process) = self.home.as_mut() else {
            return Err(PrefixFailure::Subject(
                "the subject's process broke earlier in this case".into(),
            ));
        };
        let timeout = process.timeout;
        let result = answer(process, request, timeout);
        if matches!(result, Err(PrefixFailure::Subject(_))) {
            *self.home = None;
        }
        result
    }
}

impl PrefixSubjectCache for ExecPrefixCache<'_> {
    fn config(&self) -> &PrefixConfig {
        &self.config
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure> {
        let request = json!({"op": op, "index": index});
        match self.call(&request).and_then(|a| counted(a, op.name())) {
            Ok((answer, counts)) => {
                self.counts = counts;
                Ok(PrefixEffect {
                    hit: answer.hit,
                    read: answer.read,
                    in_use: counts.in_use,
                    cached: counts.cached,
                    free: counts.free,
                })
            }
            Err(failure) => {
                if let PrefixFailure::Refused {
                    counts: Some(counts),
                    ..
                } = &failure
                {
                    self.counts = *counts;
                }
                Err(failure)
            }
        }
    }

    fn counts(&self) -> BlockCounts {
        self.counts
    }

    fn groups(&self) -> Groups {
        self.groups.unwrap_or_else(|| Groups::of(&self.config))
    }

    /// The process computes its window's start itself (the harness's is
    /// what its rows are judged by).
    fn probe(&mut self, request: RequestId, _: usize) -> Result<Vec<f32>, PrefixFailure> {
        let answer = self.call(&json!({"read": {"request": request}}))?;
        answer.rows.ok_or_else(|| {
            PrefixFailure::Subject(format!("its answer to a read of r{request} has no rows"))
        })
    }
}
