//! The bodies of the fuzz targets: a decoded case through the lockstep
//! driver, the model's invariants, and loaded traces.

use arbitrary::{Arbitrary, Unstructured};
use candle_core::Device;
use kvmodel::{Model, Op, Outcome, Variant};

use crate::check::lockstep::{Lockstep, ValueCheck};
use crate::check::trace::Trace;
use crate::engine::replay::replay;
use crate::subject::{Capabilities, SubjectSpec};

use super::config::*;
use super::limits::*;
use super::ops::*;

use crate::check::divergence::Divergence;
use crate::check::lockstep::SetupError;
use kvmodel::CacheError;

/// What a fuzz target's body reports as a crash (libFuzzer panics with the
/// message): a divergence or broken invariant with the kvtrace JSON that
/// replays it, or a setup failure on input the decoder made valid.
#[derive(Debug, thiserror::Error)]
pub enum FuzzFailure {
    /// The lockstep driver could not open a subject on a config the
    /// decoder made valid.
    #[error("setup failed for a valid config: {0}")]
    Setup(#[source] SetupError),
    /// A trace that loads could not be replayed (`trace_load`); the
    /// replay's own message.
    #[error("setup failed for a loaded trace: {0}")]
    TraceSetup(String),
    /// The subject diverged from the model: the report, then the trace.
    #[error("{0}\n──── kvtrace ────\n{json}", json = .0.trace.to_json())]
    Diverged(Box<Divergence>),
    /// The model refused the case's config (`model_invariants`; the
    /// decoder always makes valid ones).
    #[error(transparent)]
    InvalidConfig(#[from] CacheError),
    /// A docs/contract.md invariant of the model broke after an op
    /// (`model_invariants`).
    #[error(
        "model invariant broken at step {step} ({op}): {what}\n──── kvtrace ────\n{json}",
        json = .trace.to_json()
    )]
    Invariant {
        /// Index of the op after which it broke.
        step: usize,
        /// That op.
        op: Op,
        /// The invariant and how it broke.
        what: String,
        /// The ops up to and including that one, `expect` from the model.
        trace: Box<Trace>,
    },
}

impl From<Box<Divergence>> for FuzzFailure {
    fn from(divergence: Box<Divergence>) -> FuzzFailure {
        FuzzFailure::Diverged(divergence)
    }
}

/// The body of `dense_lockstep` / `packed_lockstep`: the case through the
/// lockstep driver, on the shipped cache and again on its device-generic
/// path (`cache:generic`, the code a GPU runs). `Err` holds the divergence
/// (its message: the report and the kvtrace JSON).
pub fn check_lockstep(case: &FuzzCase) -> Result<(), FuzzFailure> {
    check_lockstep_with(case, ValueCheck::default())
}

/// [`check_lockstep`] comparing views with `value_check`.
pub fn check_lockstep_with(case: &FuzzCase, value_check: ValueCheck) -> Result<(), FuzzFailure> {
    check_subject_with(case, &SubjectSpec::Cache, value_check)?;
    check_subject_with(
        case,
        &SubjectSpec::CachePath(kvcache::Path::Generic),
        value_check,
    )
}

/// [`check_lockstep`] on `subject` (decode the case with
/// [`FuzzCase::decode_for`] and the subject's capabilities).
pub fn check_lockstep_on(case: &FuzzCase, subject: &SubjectSpec) -> Result<(), FuzzFailure> {
    check_subject_with(case, subject, ValueCheck::default())
}

/// [`check_lockstep_on`] comparing views with `value_check`.
pub fn check_subject_with(
    case: &FuzzCase,
    subject: &SubjectSpec,
    value_check: ValueCheck,
) -> Result<(), FuzzFailure> {
    let mut run =
        Lockstep::open(&case.config, subject, &Device::Cpu).map_err(FuzzFailure::Setup)?;
    run.set_value_check(value_check);
    Ok(run.run(&case.ops)?)
}

/// The lockstep targets' body on raw bytes: the case of
/// [`FuzzCase::from_bytes`] through the driver on each subject in turn.
/// The first run decodes op by op against its own model (the same ops, as
/// the decoder's model would be in the same state: no second model runs);
/// the next runs replay the ops it decoded.
pub(super) fn check_bytes(
    variant: Variant,
    data: &[u8],
    subjects: &[SubjectSpec],
    value_check: ValueCheck,
) -> Result<(), FuzzFailure> {
    let mut u = Unstructured::new(data);
    let capabilities = Capabilities::full();
    let fuzz_config = FuzzConfig::arbitrary(&mut u).unwrap_or_default();
    let config = restrict_config(fuzz_config.to_config(variant), &capabilities);
    let mut decoded: Option<Vec<Op>> = None;
    for subject in subjects {
        let mut run = Lockstep::open(&config, subject, &Device::Cpu).map_err(FuzzFailure::Setup)?;
        run.set_value_check(value_check);
        match &decoded {
            Some(ops) => run.run(ops)?,
            None => {
                decode_into(&mut run, &mut u, &capabilities)?;
                decoded = Some(run.ops().to_vec());
            }
        }
    }
    Ok(())
}

/// Decodes the ops left in `u` as [`FuzzCase::decode_for`] does, stepping
/// `run` with each as it is decoded (its model is the decoder's).
pub(super) fn decode_into(
    run: &mut Lockstep,
    u: &mut Unstructured<'_>,
    capabilities: &Capabilities,
) -> Result<(), Box<Divergence>> {
    let mut cursor = Cursor::default();
    while !u.is_empty() && run.ops().len() < MAX_OPS {
        let mut bytes = [0u8; OP_BYTES];
        // Fills with zeros past the end: never fails.
        let _ = u.fill_buffer(&mut bytes);
        let op = restrict_op(decode_op(bytes, &cursor), &cursor, capabilities);
        // Inside the subject's declared domain, where it declares one.
        let op = run.shape(op);
        let outcome = run.step(&op)?;
        if run.cut().is_some() {
            // Left the subject's domain: nothing after it is judged.
            break;
        }
        cursor.follow(
            &op,
            outcome.error_kind().is_none(),
            run.model().global_end(),
        );
    }
    Ok(())
}

/// The body of `model_invariants`: docs/contract.md invariants of the model alone,
/// checked after every op. `Err` names the broken invariant
/// ([`FuzzFailure::Invariant`]).
pub fn check_model_invariants(case: &FuzzCase) -> Result<(), FuzzFailure> {
    let mut model = Model::new(&case.config)?;
    for (index, op) in case.ops.iter().enumerate() {
        let before = model.clone();
        let outcome: Outcome = model.apply(index as u64, op).into();
        let fail = |what: String| {
            Err(FuzzFailure::Invariant {
                step: index,
                op: *op,
                what,
                trace: Box::new(
                    Trace::new(case.config.clone(), case.ops[..=index].to_vec())
                        .with_model_expect(),
                ),
            })
        };
        if model.resident_len() > model.capacity() {
            return fail(format!(
                "|R| = {} > C = {}",
                model.resident_len(),
                model.capacity()
            ));
        }
        let view = model.view(None);
        if !view.windows(2).all(|p| p[0] < p[1]) {
            return fail(format!("view not strictly ascending: {view:?}"));
        }
        if model.capacity() < before.capacity() {
            return fail("capacity shrank".to_string());
        }
        let effect = match outcome {
            Outcome::Err(kind) => {
                if model != before {
                    return fail(format!("refused op ({kind}) changed the state"));
                }
                continue;
            }
            Outcome::Ok(effect) => effect,
        };
        if effect.global_end != model.global_end() {
            return fail("outcome's global end differs from the state".to_string());
        }
        // Protected positions survive every op but rewind (below `to`) and reset.
        let survivor_limit = match op {
            Op::Reset => 0,
            Op::Rewind { to } => *to as u64,
            _ => u64::MAX,
        };
        for p in before.protected() {
            if p < survivor_limit && model.writers(p).is_none() {
                return fail(format!("protected position {p} was evicted"));
            }
        }
        match op {
            Op::Rewind { .. } | Op::Reset => {}
            _ if model.global_end() < before.global_end() => {
                return fail(format!(
                    "global end went back from {} to {}",
                    before.global_end(),
                    model.global_end()
                ))
            }
            _ => {}
        }
        match op {
            Op::Evict { tokens } => {
                if before.resident_len() - model.resident_len() != *tokens as usize {
                    return fail(format!("evict {tokens} did not drop exactly {tokens}"));
                }
            }
            Op::Pin { .. } => {
                if before.resident().ne(model.resident()) {
                    return fail("pin changed the resident positions".to_string());
                }
            }
            Op::Rewind { to } => {
                if model.resident().any(|p| p >= *to as u64) {
                    return fail("rewind left a position at or above `to`".to_string());
                }
            }
            Op::Reset => {
                if model.resident_len() != 0 || model.global_end() != 0 {
                    return fail("reset left state behind".to_string());
                }
            }
            Op::Write(w) => {
                let visible = effect.visible.unwrap_or_default();
                if !visible.windows(2).all(|p| p[0] < p[1]) {
                    return fail(format!("visible not strictly ascending: {visible:?}"));
                }
                if let Some(p) = visible.iter().find(|&&p| model.writers(p).is_none()) {
                    return fail(format!("visible position {p} is not resident"));
                }
                let (s, n) = (w.start as u64, w.len as u64);
                if let Some(p) = (s..s + n).find(|p| !visible.contains(p)) {
                    return fail(format!("written position {p} is not visible"));
                }
                if w.recent_window.is_none() {
                    let protected = model.protected().len();
                    if visible.len() > model.window().max(protected) {
                        return fail(format!(
                            "{} visible > max(W = {}, |P| = {protected})",
                            visible.len(),
                            model.window()
                        ));
                    }
                }
                let reported = w
                    .heads
                    .map_or(case.config.heads, |[_, count]| count as usize);
                let writers = effect.writers.unwrap_or_default();
                if writers.len() != reported || writers.iter().any(|w| w.len() != visible.len()) {
                    return fail("writers do not match the reported heads and view".to_string());
                }
                if let Some(h) = writers.iter().position(|hw| {
                    visible.iter().zip(hw).any(|(&p, &writer)| {
                        (s..s + n).contains(&p) && writer != Some(index as u64)
                    })
                }) {
                    return fail(format!(
                        "reported head {h} of a written position has another writer"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether `trace_load` replays `trace`: its buffers, payloads and possible
/// growth stay below [`TRACE_LOAD_ELEMENTS`] and it has at most
/// [`TRACE_LOAD_OPS`] ops.
pub fn trace_load_replays(trace: &Trace) -> bool {
    let c = &trace.config;
    let per_token = c.elements_per_token();
    let written: u64 = trace
        .ops
        .iter()
        .map(|op| match op {
            Op::Write(w) => w.len.clamp(0, 1 << 32) as u64,
            _ => 0,
        })
        .fold(0u64, u64::saturating_add);
    // Growth can at most double past everything ever written.
    let tokens = (c.capacity as u64)
        .saturating_add(written)
        .saturating_mul(2);
    trace.ops.len() <= TRACE_LOAD_OPS && tokens.saturating_mul(per_token) <= TRACE_LOAD_ELEMENTS
}

/// The body of `trace_load`: bytes into [`Trace::from_json`] and, when it
/// loads and is small enough, through the model and the shipped cache (the
/// reference cache for `trim = "after_read"`).
/// Refused input is fine (`Ok`); `Err` is a divergence or a setup failure.
/// A mismatch with the file's own `expect` is not a bug (the bytes are
/// arbitrary) and is ignored.
pub fn check_trace_load(data: &[u8]) -> Result<(), FuzzFailure> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let Ok(trace) = Trace::from_json(text) else {
        return Ok(());
    };
    if !trace_load_replays(&trace) {
        return Ok(());
    }
    // The shipped caches trim before the read only; a trace of the other
    // mode (docs/contract.md §3) replays on the reference cache instead.
    let subject = if trace.config.trim.is_default() {
        SubjectSpec::Cache
    } else {
        SubjectSpec::Reference
    };
    let report = replay(&trace, None, Some(subject), None);
    if let Some(e) = report.setup_error {
        return Err(FuzzFailure::TraceSetup(e));
    }
    match report.divergence {
        Some(d) => Err(FuzzFailure::Diverged(d)),
        None => Ok(()),
    }
}
