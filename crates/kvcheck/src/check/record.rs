//! What a caller sees: a plan (ops with the payload each write carries)
//! driven through a subject, recorded op by op with no model.
//!
//! Every write's K and V come from [`Payload`]: the rows of the op the
//! payload names (see [`crate::check::payload`]), so two runs whose corresponding
//! writes name the same source carry identical bytes whatever their op
//! indices. A salt replaces the rows of one batch row or one head with
//! those of another source, which is how relations M3 and M4 change a part
//! of the payload and nothing else.

use std::ops::Range;

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::{Config, ErrorKind, Model, Op, Write};

use crate::check::divergence::{misbehaviour, DivergenceKind};
use crate::check::payload::{mixed_write_tensors, payload_rows};
use crate::subject::{tensor_bytes, Latest, SubjectFailure, SubjectSpec};

/// Payload elements above which a write is sent with an empty payload: a
/// request that large must be refused before its payload is looked at.
const PAYLOAD_LIMIT: usize = 1 << 22;

/// Source ids of salted rows and of writes that have no counterpart start
/// here, far above any op index.
pub const FRESH_SOURCE: u64 = 1 << 40;

/// Which part of a write's payload is replaced by another source's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Salt {
    /// The rows of this batch row.
    Batch(usize),
    /// The rows of this head.
    Head(usize),
}

/// Where a write's K and V rows come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The source whose rows are written (the op index of the original
    /// write for corresponding writes).
    pub source: u64,
    /// The part written from source `source + FRESH_SOURCE` instead.
    pub salt: Option<Salt>,
}

impl Payload {
    /// The unsalted rows of `source`.
    pub fn of(source: u64) -> Payload {
        Payload { source, salt: None }
    }

    /// The source whose rows batch row `batch` and head `head` carry: the
    /// writer id of [`crate::check::payload::RowId`] for those rows.
    pub fn writer(&self, batch: usize, head: usize) -> u64 {
        match self.salt {
            Some(Salt::Batch(b)) if b == batch => self.source + FRESH_SOURCE,
            Some(Salt::Head(h)) if h == head => self.source + FRESH_SOURCE,
            _ => self.source,
        }
    }
}

/// One op of a plan and, for a write, its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The op.
    pub op: Op,
    /// The payload of a write (ignored for other ops).
    pub payload: Payload,
}

/// A configuration and the steps to run on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The configuration the subject is opened with.
    pub config: Config,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Plan {
    /// `ops` on `config`, each write carrying its own rows (source = index).
    pub fn of(config: &Config, ops: &[Op]) -> Plan {
        Plan {
            config: config.clone(),
            steps: ops
                .iter()
                .enumerate()
                .map(|(i, op)| Step {
                    op: *op,
                    payload: Payload::of(i as u64),
                })
                .collect(),
        }
    }

    /// The ops of the plan.
    pub fn ops(&self) -> Vec<Op> {
        self.steps.iter().map(|s| s.op).collect()
    }
}

/// A view as a caller sees it: positions and the bytes of K and V.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewBytes {
    /// Global end the view reports.
    pub global_end: u64,
    /// Visible positions, in the order returned.
    pub positions: Vec<u64>,
    /// The heads the view reports.
    pub heads: Range<usize>,
    /// K, `[B, len, heads, D]` little-endian (empty without values).
    pub k: Vec<u8>,
    /// V, likewise.
    pub v: Vec<u8>,
}

/// What one op showed its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Success: the global end returned and, for a write, the view.
    Ok {
        /// The global end returned.
        global_end: u64,
        /// The view a write returned.
        view: Option<ViewBytes>,
    },
    /// Refusal: the contract kind when the subject gave one (an exception
    /// of a library or an error outside the contract has none).
    Refused {
        /// The kind, when there is one.
        kind: Option<ErrorKind>,
        /// The message, for reports.
        message: String,
    },
}

impl Seen {
    /// The global end of a success.
    pub fn global_end(&self) -> Option<u64> {
        match self {
            Seen::Ok { global_end, .. } => Some(*global_end),
            Seen::Refused { .. } => None,
        }
    }

    /// Whether the op was refused.
    pub fn is_refused(&self) -> bool {
        matches!(self, Seen::Refused { .. })
    }

    /// A short description: `ok G=5 visible [0, 5)`, `refused evicted`.
    pub fn describe(&self) -> String {
        match self {
            Seen::Ok {
                global_end,
                view: None,
            } => format!("ok G={global_end}"),
            Seen::Ok {
                global_end,
                view: Some(view),
            } => format!(
                "ok G={global_end} visible {}",
                kvmodel::format_ranges(view.positions.iter().copied())
            ),
            Seen::Refused {
                kind: Some(kind), ..
            } => format!("refused {kind}"),
            Seen::Refused { message, .. } => format!("refused ({message})"),
        }
    }
}

/// A run of a plan: what every op showed, and the capacity after it for
/// subjects that report their internals.
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    /// One entry per step run.
    pub seen: Vec<Seen>,
    /// Capacity after each step (empty without internals).
    pub capacity: Vec<usize>,
    /// The subject's misbehaviour (crash, timeout, protocol, a view that
    /// cannot be read), which ended the run at `seen.len()`.
    pub failure: Option<(DivergenceKind, String)>,
    /// Where the run left the subject's domain (an op outside its declared
    /// domain, not sent, or one it answered *outside*), which ended it at
    /// `seen.len()` without a verdict: the reason.
    pub cut: Option<String>,
}

impl Transcript {
    /// The global end a caller knows before step `index`: that of the last
    /// success before it (0 at the start).
    pub fn global_end_before(&self, index: usize) -> u64 {
        self.seen[..index.min(self.seen.len())]
            .iter()
            .rev()
            .find_map(Seen::global_end)
            .unwrap_or(0)
    }
}

/// Why [`observe`] could not run a plan: the subject could not
/// say what it can express, or refused to open the plan's config. The
/// caller decides whether that is a failure or a skip.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Asking the subject for its capabilities failed (an `exec:` subject
    /// that did not start or did not say `hello`).
    #[error(transparent)]
    Capabilities(#[from] SubjectFailure),
    /// The subject refused to open the plan's config.
    #[error(transparent)]
    Open(#[from] kvcache::Error),
}

/// Opens `subject` for `plan.config` and runs every step, recording what it
/// shows. A subject that cannot be opened is an error (the caller decides
/// whether that is a failure or a skip).
pub fn observe(subject: &SubjectSpec, plan: &Plan) -> Result<Transcript, ObserveError> {
    let device = Device::Cpu;
    let capabilities = subject.capabilities()?;
    let mut cache = subject.open(&plan.config, &device)?;
    let mut transcript = Transcript::default();
    let strict = subject.strict_domain();
    // The domain is a property of the ops alone: the contract's state
    // before each op says whether the declaration admits it.
    let domain = capabilities.domain.as_ref().filter(|_| !strict);
    let mut model = Model::new(&plan.config).ok();
    let mut latest = Latest::default();
    // Whether the subject has accepted an op the contract refuses, or the
    // reverse: its state then differs from the contract's, so the domain
    // computed from the contract's state no longer says what the subject
    // can be asked, and an *outside* answer cuts the case instead of being
    // a violation (the oracle judges the difference itself).
    let mut departed = false;
    for (index, step) in plan.steps.iter().enumerate() {
        if let (Some(domain), Some(model)) = (domain, model.as_ref()) {
            if let Err(excluded) = domain.admits(model, latest, &step.op) {
                transcript.cut = Some(excluded.to_string());
                return Ok(transcript);
            }
        }
        let mut contract_ok = None;
        if let Some(model) = model.as_mut() {
            let before = model.global_end();
            let ok = model.apply(index as u64, &step.op).is_ok();
            latest.follow(before, &step.op, ok);
            contract_ok = Some(ok);
        }
        cache.begin_op(index as u64);
        let result = match &step.op {
            Op::Write(w) => write(cache.as_mut(), &plan.config, &device, w, step.payload)
                .map(|view| (view.global_end, Some(view))),
            Op::Rewind { to } => cache.rewind(*to).map(|g| (g, None)),
            Op::Evict { tokens } => cache.evict(*tokens).map(|g| (g, None)),
            Op::Pin { tokens } => cache.pin(*tokens).map(|g| (g, None)),
            Op::Reset => cache.reset().map(|g| (g, None)),
        };
        let seen = match result {
            Ok((global_end, mut view)) => {
                if let (Some(v), false) = (view.as_mut(), capabilities.values) {
                    v.k.clear();
                    v.v.clear();
                }
                Seen::Ok { global_end, view }
            }
            Err(kvcache::Error::Outside { reason }) => {
                let answer = format!("outside its domain ({reason})");
                if strict || (domain.is_some() && !departed) {
                    // Under --strict-domain, or inside the declared domain.
                    let kind = if strict {
                        DivergenceKind::Outside
                    } else {
                        DivergenceKind::Domain
                    };
                    transcript.failure = Some((kind, answer));
                } else {
                    transcript.cut = Some(answer);
                }
                return Ok(transcript);
            }
            Err(error) => match refusal(&error) {
                Ok(seen) => seen,
                Err(failure) => {
                    transcript.failure = Some(failure);
                    return Ok(transcript);
                }
            },
        };
        if contract_ok.is_some_and(|ok| ok != matches!(seen, Seen::Ok { .. })) {
            departed = true;
        }
        transcript.seen.push(seen);
        if let Some(internals) = cache.internals().filter(|_| capabilities.internals) {
            transcript.capacity.push(internals.capacity());
        }
    }
    Ok(transcript)
}

/// A refusal as a caller sees it, or the subject's misbehaviour (the
/// same classification the lockstep driver makes, [`misbehaviour`]).
fn refusal(error: &kvcache::Error) -> Result<Seen, (DivergenceKind, String)> {
    let message = error.to_string();
    match (error, SubjectFailure::of(error)) {
        (kvcache::Error::Contract(e), _) => Ok(Seen::Refused {
            kind: Some(e.kind()),
            message,
        }),
        (_, Some(failure)) => match (misbehaviour(failure), failure) {
            (Some(kind), _) => Err((kind, failure.to_string())),
            (None, SubjectFailure::Refused { kind, .. }) => Ok(Seen::Refused {
                kind: Some(*kind),
                message,
            }),
            (None, _) => Ok(Seen::Refused {
                kind: None,
                message,
            }),
        },
        // An in-process cache failing outside the contract on a payload
        // the harness built right: a bug of its own, as in lockstep.
        _ => Err((
            DivergenceKind::Backend,
            format!("error outside the contract: {message}"),
        )),
    }
}

/// Sends one write with its payload and reads the view back as bytes.
fn write(
    cache: &mut dyn KvCache,
    config: &Config,
    device: &Device,
    w: &Write,
    payload: Payload,
) -> kvcache::Result<ViewBytes> {
    // No model says whether the request is accepted: its payload is built
    // while it is small enough.
    let (start, len, heads) = payload_rows(config, w, PAYLOAD_LIMIT);
    let writer = |batch, head| payload.writer(batch, head);
    let (k, v) = mixed_write_tensors(config, device, writer, start, len, heads)?;
    let view = cache.write_segments(w, &k, &v)?;
    let heads = match w.heads {
        Some([first, count]) if first >= 0 && count >= 1 => {
            first as usize..(first + count) as usize
        }
        _ => 0..config.heads,
    };
    Ok(ViewBytes {
        global_end: view.global_end,
        positions: view.positions.clone(),
        heads,
        k: tensor_bytes(&view.k.to_contiguous()?)?,
        v: tensor_bytes(&view.v.to_contiguous()?)?,
    })
}
