//! [`ExecCache`]: one opened cache in a subject process, as a [`KvCache`].

use super::process::ProcessHome;
use crate::subject::capabilities::Capabilities;
use crate::subject::exec::OkBody;
use crate::subject::exec::Process;
use crate::subject::tensor_bytes;
use crate::subject::tensor_from_bytes;
use crate::subject::SubjectFailure;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use candle_core::{Device, Tensor};
use kvcache::{KvCache, Layout, View};
use kvmodel::{Config, Op, Write};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// One case's cache in a subject process (see the module docs). Dropping it
/// returns a healthy process to its [`ExecSubject`](crate::subject::ExecSubject) for the next case.
pub struct ExecCache {
    pub(super) subject: Arc<dyn ProcessHome>,
    pub(super) process: RefCell<Option<Process>>,
    pub(super) config: Config,
    pub(super) device: Device,
    pub(super) global_end: u64,
    /// The latest reported capacity (the configured one until reported).
    pub(super) capacity: Cell<u64>,
    /// The latest reported resident bytes.
    pub(super) resident_bytes: Cell<u64>,
    /// The subject's capabilities, its declared `reports` among them.
    pub(super) capabilities: Capabilities,
    /// The index of the op being checked ([`KvCache::begin_op`]), sent with
    /// each op request as its writer id.
    pub(super) index: u64,
}

impl ExecCache {
    /// The subject's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    pub(super) fn call(&self, request: Value) -> Result<OkBody, SubjectFailure> {
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

    pub(super) fn op_request(&self, op: &Op) -> Value {
        json!({"op": op, "index": self.index})
    }

    pub(super) fn moved(&mut self, op: Op) -> kvcache::Result<u64> {
        let body = self
            .call(self.op_request(&op))
            .map_err(SubjectFailure::into_cache_error)?;
        let global_end = self.require_global_end(&body)?;
        self.global_end = global_end;
        Ok(global_end)
    }

    /// The global end of an `ok` response, after [`ExecCache::record_reports`].
    pub(super) fn require_global_end(&self, body: &OkBody) -> kvcache::Result<u64> {
        self.record_reports(body)?;
        body.global_end.ok_or_else(|| {
            self.fail("an ok response without global_end".into())
                .into_cache_error()
        })
    }

    /// Records the reported state of an `ok` response to `open`, an op or a
    /// view, which a subject that declares it must send in every one.
    pub(super) fn record_reports(&self, body: &OkBody) -> kvcache::Result<()> {
        let reports = self.capabilities.reports;
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
    pub(super) fn fail(&self, problem: String) -> SubjectFailure {
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
    pub(super) fn decode_view(&self, body: OkBody, heads: usize) -> kvcache::Result<View<'_>> {
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

impl KvCache for ExecCache {
    fn config(&self) -> &Config {
        &self.config
    }

    /// The global end of the latest `ok` response.
    fn global_end(&self) -> u64 {
        self.global_end
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

    /// The subject's failure (a refusal, an exception, misbehaviour) is the
    /// error, as for any other op; the global end stays as it was.
    fn reset(&mut self) -> kvcache::Result<u64> {
        self.moved(Op::Reset)
    }

    /// Kept and sent as `index` with every op request until the next op
    /// (the probe after a refused op included).
    fn begin_op(&mut self, index: u64) {
        self.index = index;
    }

    fn internals(&self) -> Option<&dyn kvcache::Internals> {
        Some(self)
    }
}

impl kvcache::Internals for ExecCache {
    /// The latest reported capacity; the configured one for a subject that
    /// does not report it.
    fn capacity(&self) -> usize {
        usize::try_from(self.capacity.get()).unwrap_or(usize::MAX)
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
