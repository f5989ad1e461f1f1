//! `kvcheck prefix serve`: the shipped paged cache (or one of its faults)
//! as a prefix subject process, speaking the prefix family of
//! kvcheck-subject/1 on stdin and stdout. It is what `exec:` subjects are
//! tested against without another language, and a reference answer for
//! an adapter's author to compare lines with.

use std::io::{BufRead, Write};

use base64::Engine as _;
use candle_core::Device;
use kvcache::fault::FaultyPagedCache;
use kvcache::{PagedCache, PrefixCache, PrefixCacheError};
use kvmodel::prefix::{BlockCounts, PrefixConfig, PrefixEffect, PrefixOp, RequestId};
use serde_json::{json, Value};

use super::prefix_args::PrefixSubjectSpec;
use super::CliError;
use kvcheck::subject::prefix::PREFIX_OPS;
use kvcheck::subject::PROTOCOL;

/// One open cache, whichever kind.
enum Open {
    Paged(PagedCache),
    Faulty(FaultyPagedCache),
}

impl Open {
    fn cache(&mut self) -> &mut dyn PrefixCache {
        match self {
            Open::Paged(c) => c,
            Open::Faulty(c) => c,
        }
    }
}

fn counts(c: BlockCounts) -> Value {
    json!({"in_use": c.in_use, "cached": c.cached, "free": c.free})
}

fn exception(message: String) -> Value {
    json!({"exception": {"type": "AdapterError", "message": message, "adapter": true}})
}

/// The request's rows as the protocol sends them, and how many positions
/// they hold.
fn rows(cache: &dyn PrefixCache, request: RequestId) -> Result<(String, usize), PrefixCacheError> {
    let values = cache.read_values(request)?;
    let config = cache.config();
    let positions = values.len() / (config.layers * config.row_width);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok((
        base64::engine::general_purpose::STANDARD.encode(bytes),
        positions,
    ))
}

fn refusal(e: PrefixCacheError, after: BlockCounts) -> Value {
    match e.kind() {
        Some(kind) => {
            let mut body = counts(after);
            body["kind"] = json!(kind.name());
            body["message"] = json!(e.to_string());
            json!({"err": body})
        }
        None => json!({"exception": {"type": "BackendError", "message": e.to_string()}}),
    }
}

fn effect(e: &PrefixEffect) -> Value {
    serde_json::to_value(e).unwrap_or_else(|_| json!({}))
}

/// Answers one request; `None` for `close`.
fn answer(spec: &PrefixSubjectSpec, open: &mut Option<Open>, request: &Value) -> Option<Value> {
    if request.get("close").is_some() {
        return None;
    }
    if request.get("hello").is_some() {
        let name = match spec {
            PrefixSubjectSpec::Fault(f) => format!("kvcheck paged fault:{f}"),
            _ => "kvcheck paged".into(),
        };
        return Some(
            json!({"hello": {"protocol": PROTOCOL, "name": name, "family": "prefix",
            "capabilities": {"ops": PREFIX_OPS, "hit": ["leave_one", "whole"],
                             "policy": "contract", "steps": "free"}}}),
        );
    }
    if let Some(body) = request.get("open") {
        let config = match serde_json::from_value::<PrefixConfig>(body["config"].clone()) {
            Ok(config) => config,
            Err(e) => {
                return Some(json!({"err": {"kind": "invalid_config", "message": e.to_string()}}))
            }
        };
        if config.window.is_some() {
            // Its hello declares no window: a read would have to know where
            // each request's window stands, which only the harness's record
            // keeps here.
            return Some(json!({"outside": {"reason": "kvcheck prefix serve opens no window"}}));
        }
        let made = match spec {
            PrefixSubjectSpec::Fault(f) => {
                FaultyPagedCache::new(&config, &Device::Cpu, *f).map(Open::Faulty)
            }
            _ => PagedCache::new(&config, &Device::Cpu).map(Open::Paged),
        };
        return Some(match made {
            Ok(mut cache) => {
                let fresh = counts(cache.cache().counts());
                *open = Some(cache);
                json!({"ok": fresh})
            }
            Err(e) => refusal(e, BlockCounts::default()),
        });
    }
    let Some(cache) = open.as_mut().map(Open::cache) else {
        return Some(exception("no cache is open: send open first".into()));
    };
    if let Some(body) = request.get("read").filter(|_| request.get("op").is_none()) {
        let Some(id) = body["request"].as_u64().and_then(|r| u32::try_from(r).ok()) else {
            return Some(exception(format!("a read names no request id: {body}")));
        };
        return Some(match rows(cache, id) {
            Ok((rows, positions)) => json!({"ok": {"read": positions, "rows": rows}}),
            Err(e) => refusal(e, cache.counts()),
        });
    }
    let (Some(op), Some(index)) = (request.get("op"), request["index"].as_u64()) else {
        return Some(exception(format!(
            "expected hello, open, op (with index), read or close: {request}"
        )));
    };
    let op: PrefixOp = match serde_json::from_value(op.clone()) {
        Ok(op) => op,
        Err(e) => return Some(exception(format!("not a prefix op ({e}): {op}"))),
    };
    Some(match cache.apply(index, &op) {
        Ok(done) => {
            let mut body = effect(&done);
            if let PrefixOp::Read { request } = op {
                if let Ok((rows, _)) = rows(cache, request) {
                    body["rows"] = json!(rows);
                }
            }
            json!({"ok": body})
        }
        Err(e) => refusal(e, cache.counts()),
    })
}

/// Serves `spec` (not `exec:`) until `close` or the end of input.
pub fn serve(spec: &PrefixSubjectSpec) -> Result<(), CliError> {
    if matches!(spec, PrefixSubjectSpec::Exec(_)) {
        return Err(CliError::ServeExec);
    }
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut open = None;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let response = match serde_json::from_str::<Value>(&line) {
            Ok(request) => match answer(spec, &mut open, &request) {
                Some(response) => response,
                None => break,
            },
            Err(e) => exception(format!("a request line is not JSON: {e}")),
        };
        if writeln!(stdout, "{response}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    Ok(())
}
