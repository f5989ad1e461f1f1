//! `kvcheck serve`: any in-process subject (a shipped cache, a fault of the
//! zoo, the reference cache) served over kvcheck-subject/1 on standard
//! input and output, so that every engine can check it as an `exec:`
//! subject: the out-of-process path tested with the same bugs as the
//! in-process one.

use std::io::{BufRead, Write as _};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use candle_core::Device;
use kvcache::KvCache;
use kvcheck::check::trace::Trace;
use kvcheck::subject::{tensor_bytes, tensor_from_bytes, Capabilities, SubjectSpec, PROTOCOL};
use kvcheck::{Op, Write};
use serde_json::{json, Value};

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The subject to serve: any in-process `--subject` form (`cache`,
    /// `cache:ring`, `reference`, `fault:NAME`, …).
    #[arg(long, default_value = "cache")]
    subject: SubjectSpec,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if matches!(args.subject, SubjectSpec::Exec(_)) {
        return Err(CliError::ServeExec);
    }
    let mut server = Server {
        subject: args.subject,
        cache: None,
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let request: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => exception("BadRequest", &format!("not JSON: {e}")),
        };
        if request.get("close").is_some() {
            break;
        }
        let response = server.answer(&request);
        if writeln!(stdout, "{response}")
            .and_then(|_| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    Ok(())
}

/// Why a view's rows could not be put on the wire (sent as an exception).
#[derive(Debug, thiserror::Error)]
enum ViewBytesError {
    /// The segments could not be concatenated.
    #[error(transparent)]
    Cache(#[from] kvcache::Error),
    /// The tensor's bytes could not be read.
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
}

/// A write's `k` or `v` field that is not base64 (sent as a `BadRequest`).
#[derive(Debug, thiserror::Error)]
#[error("{name} is not base64: {source}")]
struct NotBase64 {
    /// `k` or `v`.
    name: &'static str,
    /// What the decoder found.
    source: base64::DecodeError,
}

struct Server {
    subject: SubjectSpec,
    cache: Option<Box<dyn KvCache>>,
}

fn exception(kind: &str, message: &str) -> Value {
    json!({"exception": {"type": kind, "message": message}})
}

/// A cache's refusal as the protocol says it: `err` with a docs/contract.md kind,
/// or `exception` for anything outside the contract.
fn refusal(error: &kvcache::Error) -> Value {
    match error {
        kvcache::Error::Contract(e) => {
            json!({"err": {"kind": e.kind().name(), "message": e.to_string()}})
        }
        other => exception("Error", &other.to_string()),
    }
}

fn hello(name: &str, c: &Capabilities) -> Value {
    let mut hello = json!({"hello": {"protocol": PROTOCOL, "name": name, "capabilities": {
        "variants": c.variants, "dtypes": c.dtypes, "ops": c.ops,
        "features": c.features, "values": c.values, "view": c.view}}});
    // Revision 4: the trim modes, sent only when not the default alone.
    if c.trims != Capabilities::full().trims {
        hello["hello"]["capabilities"]["trims"] = json!(c.trims);
    }
    hello
}

impl Server {
    fn answer(&mut self, request: &Value) -> Value {
        if request.get("hello").is_some() {
            return match self.subject.capabilities() {
                Ok(c) => hello(&self.subject.to_string(), &c),
                Err(e) => exception("Error", &e.to_string()),
            };
        }
        if let Some(open) = request.get("open") {
            let text = json!({"format": "kvtrace/1", "config": open["config"], "ops": []});
            let config = match Trace::from_json(&text.to_string()) {
                Ok(trace) => trace.config,
                Err(e) => {
                    return json!({"err": {"kind": "invalid_config", "message": e.to_string()}})
                }
            };
            return match self.subject.open(&config, &Device::Cpu) {
                Ok(cache) => {
                    self.cache = Some(cache);
                    json!({"ok": {}})
                }
                Err(e) => refusal(&e),
            };
        }
        let Some(cache) = self.cache.as_mut() else {
            return exception("NotOpen", "no cache is open");
        };
        if request.get("view").is_some() {
            return match cache.view_segments() {
                Ok(view) => view_answer(view.global_end, &view.positions, &view.k, &view.v),
                Err(e) => refusal(&e),
            };
        }
        let op: Op = match serde_json::from_value(request["op"].clone()) {
            Ok(op) => op,
            Err(e) => return exception("BadRequest", &format!("not an op: {e}")),
        };
        let moved = match op {
            Op::Write(w) => return write(cache.as_mut(), &w, request),
            Op::Rewind { to } => cache.rewind(to),
            Op::Evict { tokens } => cache.evict(tokens),
            Op::Pin { tokens } => cache.pin(tokens),
            Op::Reset => cache.reset(),
        };
        match moved {
            Ok(g) => json!({"ok": {"global_end": g}}),
            Err(e) => refusal(&e),
        }
    }
}

fn view_answer(
    global_end: u64,
    positions: &[u64],
    k: &kvcache::Segments,
    v: &kvcache::Segments,
) -> Value {
    let bytes = |s: &kvcache::Segments| -> Result<String, ViewBytesError> {
        let t = s.to_contiguous()?;
        Ok(BASE64.encode(tensor_bytes(&t)?))
    };
    match (bytes(k), bytes(v)) {
        (Ok(k), Ok(v)) => {
            json!({"ok": {"global_end": global_end, "visible": positions, "k": k, "v": v}})
        }
        (Err(e), _) | (_, Err(e)) => exception("Error", &e.to_string()),
    }
}

/// A write: the payload decoded in the config's dtype, its head count
/// taken from its length (what the client sent is what the cache gets).
fn write(cache: &mut dyn KvCache, w: &Write, request: &Value) -> Value {
    let config = cache.config().clone();
    let decode = |name: &'static str| -> Result<Vec<u8>, NotBase64> {
        let text = request[name].as_str().unwrap_or_default();
        BASE64
            .decode(text.as_bytes())
            .map_err(|source| NotBase64 { name, source })
    };
    let (k, v) = match (decode("k"), decode("v")) {
        (Ok(k), Ok(v)) => (k, v),
        (Err(e), _) | (_, Err(e)) => return exception("BadRequest", &e.to_string()),
    };
    let len = usize::try_from(w.len).unwrap_or(0);
    let row = config.batch * config.head_dim * config.dtype.size_bytes();
    let heads = match (len, w.heads) {
        (0, Some([_, count])) if count >= 0 => count as usize,
        (0, _) => config.heads,
        (n, _) => k.len() / (row * n).max(1),
    };
    let shape = [config.batch, len, heads, config.head_dim];
    let tensors = (
        tensor_from_bytes(&k, shape, config.dtype, &Device::Cpu),
        tensor_from_bytes(&v, shape, config.dtype, &Device::Cpu),
    );
    let (k, v) = match tensors {
        (Ok(k), Ok(v)) => (k, v),
        (Err(e), _) | (_, Err(e)) => return exception("BadRequest", &e.to_string()),
    };
    match cache.write_segments(w, &k, &v) {
        Ok(view) => view_answer(view.global_end, &view.positions, &view.k, &view.v),
        Err(e) => refusal(&e),
    }
}
