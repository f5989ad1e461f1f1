//! The lockstep driver: one function that every engine uses (property
//! suites, `kvcheck run`, replay, fuzz targets, the explorer).
//!
//! Each op goes to the reference model and to the cache under test. After
//! every op the driver compares the outcome kind, the global end, the
//! capacity and resident bytes, and for writes the visible positions and
//! the view tensors, bit for bit, against the values the model's writers
//! imply (see [`crate::payload`]). Views are taken as segments
//! ([`KvCache::write_segments`]): their concatenation is what is compared,
//! and every segment that claims to alias the cache's buffers must be a
//! `narrow` of one buffer at the slots the cache's layout gives for its
//! positions (a cache laid out as a ring must not copy at all); a false
//! claim is an `aliasing` divergence. After every refused op a read-only probe
//! proves that nothing changed. A disagreement is returned as a
//! [`Divergence`] value; the driver never panics on a cache's behaviour.
//!
//! What is compared follows the subject's [`Capabilities`]: a subject
//! without `values` is compared on outcome, global end and visible
//! positions only; one without `internals` (an external process) is not
//! asked for capacity and resident bytes. An external subject's own
//! misbehaviour (crash, timeout, protocol error) and its exceptions arrive
//! as [`SubjectFailure`]s and become divergences of their own kinds.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{Device, Tensor};
use kvcache::{KvCache, SegmentedView, Slot, View};
use kvmodel::{CacheError, Config, Effect, Model, Op, Outcome, Variant, Write};

use crate::coverage::{Before, Coverage};
use crate::divergence::{
    decode_row, describe_outcome, Divergence, DivergenceKind, RowMismatch, RowSource,
};
use crate::payload::{expected_view, tensor_values, write_tensor, write_tensors, Kv};
use crate::segments::{check_claims, check_segments, materialize, Claim};
use crate::subject::{open_cache, Capabilities, OpLink, SubjectFailure, SubjectSpec, Unsupported};
use crate::trace::Trace;
use crate::viewcheck::{compare_values, REPORTED_ROWS};

/// Elements of a payload the driver builds for a write the model refuses;
/// above it the cache gets an empty payload (it must refuse before looking).
const REFUSED_PAYLOAD_LIMIT: usize = 1 << 20;

/// Why a lockstep run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The configuration breaks SPEC.md §1.
    #[error(transparent)]
    InvalidConfig(#[from] CacheError),
    /// The model accepts the configuration but the cache does not.
    #[error("the model accepts the configuration but the cache refuses it: {0}")]
    CacheRefused(kvcache::Error),
    /// The configuration needs a capability the subject lacks: nothing to
    /// check, not a divergence.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
}

/// How the driver compares a view's values with what the model's writers
/// imply. Both compare every element of every view bit for bit (as f32,
/// which every dtype widens to exactly), check the same segment shapes and
/// aliasing claims first and report the same divergences, rows included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueCheck {
    /// Each segment read in place from the storage the cache handed out,
    /// row by row against expected rows built K and V together
    /// ([`crate::payload::row_bits`]); nothing copied or converted to a
    /// tensor. Payloads are built the same way.
    #[default]
    InPlace,
    /// The consumer's route: the segments concatenated with
    /// [`kvcache::Segments::to_contiguous_into`] into fresh tensors,
    /// converted to f32 vectors and compared with payload rows computed
    /// one element at a time ([`crate::payload::element`], the payload's
    /// definition). Several times slower; kept as the independent second
    /// implementation that [`ValueCheck::InPlace`] is tested against and
    /// as the baseline of the `fuzz_exec` benchmark.
    Materialized,
}

/// The model and one cache, driven in lockstep.
pub struct Lockstep {
    model: Model,
    cache: Box<dyn KvCache>,
    subject: String,
    device: Device,
    ops: Vec<Op>,
    coverage: Coverage,
    capabilities: Capabilities,
    exact_kinds: bool,
    link: Option<Arc<OpLink>>,
    value_check: ValueCheck,
}

impl Lockstep {
    /// The model and the shipped cache for `config.variant`, on the CPU.
    pub fn new(config: &Config) -> Result<Lockstep, SetupError> {
        Self::on_device(config, &Device::Cpu)
    }

    /// The model and the shipped cache for `config.variant`, on `device`.
    pub fn on_device(config: &Config, device: &Device) -> Result<Lockstep, SetupError> {
        let model = Model::new(config)?;
        let cache = open_cache(config, device).map_err(SetupError::CacheRefused)?;
        let subject = match config.variant {
            Variant::Dense => "dense",
            Variant::Packed => "packed",
        };
        Ok(Self::assemble(model, cache, subject, device))
    }

    /// The model and any cache (a constructed failing subject, say), named
    /// `subject` in reports, compared with every capability (use
    /// [`Lockstep::open`] for a subject that has fewer).
    pub fn with_cache(
        config: &Config,
        cache: Box<dyn KvCache>,
        subject: &str,
        device: &Device,
    ) -> Result<Lockstep, SetupError> {
        Ok(Self::assemble(Model::new(config)?, cache, subject, device))
    }

    /// The model and `subject` opened for `config`, compared as its
    /// capabilities allow. A config the subject cannot express is
    /// [`SetupError::Unsupported`].
    pub fn open(
        config: &Config,
        subject: &SubjectSpec,
        device: &Device,
    ) -> Result<Lockstep, SetupError> {
        let model = Model::new(config)?;
        let capabilities = subject
            .capabilities()
            .map_err(|f| SetupError::CacheRefused(f.into_cache_error()))?;
        capabilities.supports_config(config)?;
        let (cache, link) = subject
            .open_linked(config, device)
            .map_err(SetupError::CacheRefused)?;
        let mut run = Self::assemble(model, cache, &subject.name(config), device);
        run.capabilities = capabilities;
        run.exact_kinds = subject.exact_kinds();
        run.link = link;
        Ok(run)
    }

    fn assemble(model: Model, cache: Box<dyn KvCache>, subject: &str, device: &Device) -> Lockstep {
        Lockstep {
            model,
            cache,
            subject: subject.to_string(),
            device: device.clone(),
            ops: Vec::new(),
            coverage: Coverage::default(),
            capabilities: Capabilities::full(),
            exact_kinds: true,
            link: None,
            value_check: ValueCheck::default(),
        }
    }

    /// Compares views with `check` from now on (see [`ValueCheck`]).
    pub fn set_value_check(&mut self, check: ValueCheck) {
        self.value_check = check;
    }

    /// What the subject can express, which decides what is compared.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The reference model's current state.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The cache under test.
    pub fn cache(&self) -> &dyn KvCache {
        self.cache.as_ref()
    }

    /// The events labelled so far.
    pub fn coverage(&self) -> &Coverage {
        &self.coverage
    }

    /// Ops applied so far.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The ops so far as a trace with `expect` filled in by the model.
    pub fn trace(&self) -> Trace {
        Trace::new(self.model.config().clone(), self.ops.clone()).with_model_expect()
    }

    /// Applies every op in order; stops at the first divergence.
    pub fn run<'a>(
        &mut self,
        ops: impl IntoIterator<Item = &'a Op>,
    ) -> Result<(), Box<Divergence>> {
        for op in ops {
            self.step(op)?;
        }
        Ok(())
    }

    /// Applies `op` to both sides and compares everything. Returns the
    /// model's outcome, which the cache matched.
    ///
    /// An op the subject cannot express is not sent: it comes back as an
    /// [`DivergenceKind::Unsupported`] report (engines check
    /// [`Capabilities::supports_op`] first and never get there).
    pub fn step(&mut self, op: &Op) -> Result<Outcome, Box<Divergence>> {
        let index = self.ops.len();
        self.ops.push(*op);
        if let Err(unsupported) = self.capabilities.supports_op(op) {
            let expected = describe_outcome(&self.model.clone().apply(index as u64, op).into());
            return Err(self.divergence(
                index,
                DivergenceKind::Unsupported,
                expected,
                unsupported.to_string(),
            ));
        }
        if let Some(link) = &self.link {
            link.set_index(index as u64);
        }
        let before = Before::of(&self.model);
        let expected: Outcome = self.model.apply(index as u64, op).into();
        match op {
            Op::Write(w) => self.step_write(index, w, &expected)?,
            _ => {
                let actual = match op {
                    Op::Rewind { to } => self.cache.rewind(*to),
                    Op::Evict { tokens } => self.cache.evict(*tokens),
                    Op::Pin { tokens } => self.cache.pin(*tokens),
                    _ => {
                        let g = self.cache.reset();
                        match self.link.as_ref().and_then(|l| l.take_reset_failure()) {
                            Some(failure) => Err(failure.into_cache_error()),
                            None => Ok(g),
                        }
                    }
                };
                // The global end reported here and the cache's own are
                // both compared: the first below, the second in check_state.
                self.compare_outcome(index, &expected, actual)?;
            }
        }
        self.check_state(index)?;
        if expected.error_kind().is_some() {
            self.probe(index)?;
        }
        self.coverage
            .observe_from(&before, &self.model, op, &expected);
        Ok(expected)
    }

    fn step_write(
        &mut self,
        index: usize,
        w: &Write,
        expected: &Outcome,
    ) -> Result<(), Box<Divergence>> {
        let config = self.model.config().clone();
        let heads = payload_heads(w, config.heads);
        let len = usize::try_from(w.len).unwrap_or(0);
        let elements = config
            .batch
            .saturating_mul(len)
            .saturating_mul(heads.len())
            .saturating_mul(config.head_dim);
        // A negative start only changes which rows the payload's values
        // name; the payload keeps the request's shape.
        let feasible = expected.error_kind().is_none()
            || (elements <= REFUSED_PAYLOAD_LIMIT && heads.len() <= REFUSED_PAYLOAD_LIMIT);
        let (start, len, heads) = if feasible {
            (w.start.max(0) as u64, len, heads)
        } else {
            (0, 0, 0..config.heads)
        };
        let built = match self.value_check {
            ValueCheck::InPlace => write_tensors(
                &config,
                &self.device,
                index as u64,
                start,
                len,
                heads.clone(),
            ),
            ValueCheck::Materialized => {
                let payload = |kv| {
                    write_tensor(
                        &config,
                        &self.device,
                        kv,
                        index as u64,
                        start,
                        len,
                        heads.clone(),
                    )
                };
                payload(Kv::K).and_then(|k| Ok((k, payload(Kv::V)?)))
            }
        };
        let (k, v) = match built {
            Ok(pair) => pair,
            Err(e) => {
                return Err(self.divergence(
                    index,
                    DivergenceKind::Backend,
                    describe_outcome(expected),
                    format!("building the payload failed: {e}"),
                ))
            }
        };
        let ring = self.cache.ring().is_some();
        let actual = self.cache.write_segments(w, &k, &v);
        let (view, effect) = match (actual, expected) {
            (Ok(view), Outcome::Ok(effect)) => (view, effect.clone()),
            (actual, expected) => {
                let actual = actual.map(|view| view.global_end);
                self.compare_outcome(index, expected, actual)?;
                return Ok(());
            }
        };
        let reported = if w.heads.is_some() {
            heads
        } else {
            0..config.heads
        };
        let values = self.capabilities.values;
        let checked = check_segmented(
            &self.model,
            &self.ops,
            &self.device,
            &view,
            &effect,
            reported,
            values,
            ring,
            self.value_check,
        );
        drop(view);
        match self.check_layout(checked) {
            None => Ok(()),
            Some((kind, actual, rows)) => {
                let mut d = self.divergence(index, kind, describe_outcome(expected), actual);
                d.rows = rows;
                Err(d)
            }
        }
    }

    /// Completes a segmented view's check once its borrow of the cache has
    /// ended: aliasing claims against the layout, and the slot of each
    /// wrong row (for subjects that report their layout).
    fn check_layout(&self, checked: SegmentedCheck) -> Option<ViewFailure> {
        let layout = self.capabilities.internals.then(|| self.cache.layout());
        match (checked, layout) {
            (Ok(_), None) => None,
            (Ok((claims, positions)), Some(layout)) => check_claims(&claims, &positions, &layout)
                .err()
                .map(|(kind, actual)| (kind, actual, Vec::new())),
            (Err((kind, actual, mut rows)), layout) => {
                if let Some(layout) = layout {
                    for row in &mut rows {
                        row.slot = layout.slots.iter().position(|s| {
                            *s == Slot::Hot(row.position) || *s == Slot::Cold(row.position)
                        });
                    }
                }
                Some((kind, actual, rows))
            }
        }
    }

    /// Compares a refusal or a non-write success; returns the model's effect
    /// when both succeeded.
    fn compare_outcome(
        &self,
        index: usize,
        expected: &Outcome,
        actual: kvcache::Result<u64>,
    ) -> Result<Option<Effect>, Box<Divergence>> {
        let actual = match actual {
            Ok(g) => Ok(g),
            Err(kvcache::Error::Contract(e)) => Err(e),
            Err(other) if SubjectFailure::of(&other).is_some() => {
                let failure = SubjectFailure::of(&other).expect("checked");
                return self.compare_failure(index, expected, failure);
            }
            Err(other) => {
                return Err(self.divergence(
                    index,
                    DivergenceKind::Backend,
                    describe_outcome(expected),
                    format!("error outside the contract: {other}"),
                ))
            }
        };
        match (expected, actual) {
            (Outcome::Ok(effect), Ok(g)) => {
                if effect.global_end != g {
                    return Err(self.divergence(
                        index,
                        DivergenceKind::GlobalEnd,
                        describe_outcome(expected),
                        format!("ok G={g}"),
                    ));
                }
                Ok(Some(effect.clone()))
            }
            (Outcome::Err(kind), Err(e)) if e.kind() == *kind => Ok(None),
            (_, Ok(g)) => Err(self.divergence(
                index,
                DivergenceKind::Outcome,
                describe_outcome(expected),
                format!("ok G={g}"),
            )),
            (_, Err(e)) => Err(self.divergence(
                index,
                DivergenceKind::Outcome,
                describe_outcome(expected),
                format!("err {} ({e})", e.kind()),
            )),
        }
    }

    /// An external subject's answer other than `ok` against the model's
    /// outcome: refusals agree with refusals (kinds compared only with
    /// exact kinds), misbehaviour is a divergence of its own kind.
    fn compare_failure(
        &self,
        index: usize,
        expected: &Outcome,
        failure: &SubjectFailure,
    ) -> Result<Option<Effect>, Box<Divergence>> {
        let exact = self.exact_kinds;
        let kind = match (failure, expected) {
            (SubjectFailure::Refused { kind, .. }, Outcome::Err(model)) => {
                if !exact || kind == model {
                    return Ok(None);
                }
                DivergenceKind::Outcome
            }
            (SubjectFailure::Exception { .. }, Outcome::Err(_)) => {
                if !exact {
                    return Ok(None);
                }
                DivergenceKind::Exception
            }
            (SubjectFailure::Refused { .. } | SubjectFailure::Exception { .. }, Outcome::Ok(_)) => {
                DivergenceKind::Outcome
            }
            // The adapter's own failure is never the cache's refusal.
            (SubjectFailure::Adapter { .. }, _) => DivergenceKind::Protocol,
            (SubjectFailure::Crash { .. }, _) => DivergenceKind::Crash,
            (SubjectFailure::Timeout { .. }, _) => DivergenceKind::Timeout,
            (SubjectFailure::Protocol { .. }, _) => DivergenceKind::Protocol,
        };
        Err(self.divergence(index, kind, describe_outcome(expected), failure.to_string()))
    }

    /// Global end, capacity and resident bytes after every op (the last two
    /// only for subjects that report their internals, or, external ones,
    /// declare them in `reports`).
    fn check_state(&self, index: usize) -> Result<(), Box<Divergence>> {
        let internals = self.capabilities.internals;
        let reports = self.link.as_ref().map(|l| l.reports()).unwrap_or_default();
        let compared = [
            true,
            internals || reports.capacity,
            internals || reports.resident_bytes,
        ];
        let (m, c) = (&self.model, self.cache.as_ref());
        let checks = [
            (
                DivergenceKind::GlobalEnd,
                "global end",
                m.global_end(),
                c.global_end(),
            ),
            (
                DivergenceKind::Capacity,
                "capacity",
                m.capacity() as u64,
                c.capacity() as u64,
            ),
            (
                DivergenceKind::ResidentBytes,
                "resident bytes",
                m.resident_bytes(),
                c.resident_bytes(),
            ),
        ];
        for ((kind, what, expected, actual), compared) in checks.into_iter().zip(compared) {
            if compared && expected != actual {
                return Err(self.divergence(
                    index,
                    kind,
                    format!("{what} {expected}"),
                    format!("{what} {actual}"),
                ));
            }
        }
        Ok(())
    }

    /// SPEC.md §3: after a refused op the cache must be unchanged. Dense
    /// caches are probed with a zero-length write at the global end; the
    /// packed variant refuses that write, so it is probed with `view()`.
    fn probe(&mut self, index: usize) -> Result<(), Box<Divergence>> {
        let config = self.model.config().clone();
        let all_heads = 0..config.heads;
        let visible = self.model.view(None);
        let effect = Effect {
            global_end: self.model.global_end(),
            visible: Some(visible),
            writers: None,
        };
        let empty = match Tensor::zeros(
            (config.batch, 0, config.heads, config.head_dim),
            kvcache::candle_dtype(config.dtype),
            &self.device,
        ) {
            Ok(t) => t,
            Err(e) => {
                return Err(self.divergence(
                    index,
                    DivergenceKind::Backend,
                    "a probe".into(),
                    format!("building the probe failed: {e}"),
                ))
            }
        };
        let ring = self.cache.ring().is_some();
        let viewed = match config.variant {
            Variant::Dense => {
                let probe = Write::new(self.model.global_end() as i64, 0);
                self.cache.write_segments(&probe, &empty, &empty)
            }
            Variant::Packed if self.capabilities.view => self.cache.view_segments(),
            // Nothing to probe a packed subject with.
            Variant::Packed => return Ok(()),
        };
        let values = self.capabilities.values;
        let failure = match viewed {
            Ok(view) => {
                let checked = check_segmented(
                    &self.model,
                    &self.ops,
                    &self.device,
                    &view,
                    &effect,
                    all_heads,
                    values,
                    ring,
                    self.value_check,
                );
                drop(view);
                self.check_layout(checked)
            }
            Err(e) if SubjectFailure::of(&e).is_some_and(SubjectFailure::is_misbehaviour) => {
                let failure = SubjectFailure::of(&e).expect("checked");
                return self
                    .compare_failure(index, &Outcome::Ok(effect), failure)
                    .map(|_| ());
            }
            Err(e) => Some((
                DivergenceKind::Probe,
                format!("the read-only probe failed: {e}"),
                Vec::new(),
            )),
        };
        match failure {
            None => Ok(()),
            Some((_, actual, rows)) => {
                let expected = format!(
                    "unchanged after the refusal: {}",
                    describe_outcome(&Outcome::Ok(effect))
                );
                let mut d = self.divergence(
                    index,
                    DivergenceKind::Probe,
                    expected,
                    format!("probe shows {actual}"),
                );
                d.rows = rows;
                Err(d)
            }
        }
    }

    fn divergence(
        &self,
        index: usize,
        kind: DivergenceKind,
        expected: String,
        actual: String,
    ) -> Box<Divergence> {
        Box::new(Divergence {
            step: index,
            op: self.ops[index],
            kind,
            expected,
            actual,
            rows: Vec::new(),
            trace: self.trace(),
            subject: self.subject.clone(),
            saved: None,
        })
    }
}

/// The head range of a write, when its arguments are valid.
pub fn valid_heads(w: &Write, heads: usize) -> Option<Range<usize>> {
    w.check_arguments(heads).ok().map(|checked| checked.heads)
}

/// The heads a write's payload carries: its valid range; else, for a range
/// `[h0, hc]` the contract refuses, `hc` heads whenever `hc >= 0` (what a
/// caller of a real library passes, so a foreign cache sees the request a
/// caller would make), named from `h0` (or 0 when `h0 < 0`); else all heads.
pub fn payload_heads(w: &Write, heads: usize) -> Range<usize> {
    if let Some(range) = valid_heads(w, heads) {
        return range;
    }
    match w.heads {
        Some([first, count]) if count >= 0 => {
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            let first = usize::try_from(first).unwrap_or(0);
            match first.checked_add(count) {
                Some(end) => first..end,
                None => 0..count,
            }
        }
        _ => 0..heads,
    }
}

type ViewFailure = (DivergenceKind, String, Vec<RowMismatch>);

/// A segmented view's check before the layout is consulted: its aliasing
/// claims and positions, or what failed.
type SegmentedCheck = Result<(Vec<Claim>, Vec<u64>), ViewFailure>;

/// Checks a segmented view: segment shapes and storage, then the
/// concatenation against the model's expectation like [`check_view`].
/// `ring` demands zero-copy segments.
#[allow(clippy::too_many_arguments)]
fn check_segmented(
    model: &Model,
    ops: &[Op],
    device: &Device,
    view: &SegmentedView<'_>,
    effect: &Effect,
    heads: Range<usize>,
    values: bool,
    ring: bool,
    value_check: ValueCheck,
) -> SegmentedCheck {
    // Global end and positions first: the shapes follow from them.
    if let Some(failure) = check_positions(&view.positions, view.global_end, effect) {
        return Err(failure);
    }
    let positions = view.positions.clone();
    if !values {
        return Ok((Vec::new(), positions));
    }
    let config = model.config();
    match value_check {
        ValueCheck::InPlace => {
            let claims = check_segments(view, config, heads.clone(), ring)
                .map_err(|(kind, actual)| (kind, actual, Vec::new()))?;
            match compare_values(model, ops, view, heads) {
                Some(failure) => Err(failure),
                None => Ok((claims, positions)),
            }
        }
        ValueCheck::Materialized => {
            let materialized = materialize(view, config, heads.clone(), device, ring)
                .map_err(|(kind, actual)| (kind, actual, Vec::new()))?;
            match check_view(model, ops, &materialized.view, effect, heads, true) {
                Some(failure) => Err(failure),
                None => Ok((materialized.claims, positions)),
            }
        }
    }
}

/// The view's global end and visible positions against the model's.
fn check_positions(positions: &[u64], global_end: u64, effect: &Effect) -> Option<ViewFailure> {
    let expected = effect.visible.as_deref().unwrap_or(&[]);
    if global_end != effect.global_end {
        return Some((
            DivergenceKind::GlobalEnd,
            format!("ok G={global_end}"),
            Vec::new(),
        ));
    }
    if positions != expected {
        return Some((
            DivergenceKind::Visible,
            format!(
                "ok G={global_end} visible {}",
                kvmodel::format_ranges(positions.iter().copied())
            ),
            Vec::new(),
        ));
    }
    None
}

/// Compares a view against the model's expectation (tensors only when the
/// subject returns `values`). `None` when equal.
fn check_view(
    model: &Model,
    ops: &[Op],
    view: &View<'_>,
    effect: &Effect,
    heads: Range<usize>,
    values: bool,
) -> Option<ViewFailure> {
    let config = model.config();
    let positions = effect.visible.as_deref().unwrap_or(&[]);
    let shown = |positions: &[u64]| kvmodel::format_ranges(positions.iter().copied());
    if let Some(failure) = check_positions(&view.positions, view.global_end, effect) {
        return Some(failure);
    }
    if !values {
        return None;
    }
    let shape = [config.batch, positions.len(), heads.len(), config.head_dim];
    for (kv, tensor) in [(Kv::K, &view.k), (Kv::V, &view.v)] {
        if tensor.dims() != shape || tensor.dtype() != kvcache::candle_dtype(config.dtype) {
            return Some((
                DivergenceKind::Shape,
                format!(
                    "{kv:?} has shape {:?} {:?}, expected {shape:?} {:?}",
                    tensor.dims(),
                    tensor.dtype(),
                    config.dtype
                ),
                Vec::new(),
            ));
        }
        let actual = match tensor_values(tensor) {
            Ok(values) => values,
            Err(e) => {
                return Some((
                    DivergenceKind::Backend,
                    format!("reading the view failed: {e}"),
                    Vec::new(),
                ))
            }
        };
        let expected = expected_view(model, kv, positions, heads.clone());
        let d = config.head_dim;
        let mut rows = Vec::new();
        let mut wrong = 0;
        for (r, (a, e)) in actual.chunks(d).zip(expected.chunks(d)).enumerate() {
            if a.iter().zip(e).all(|(x, y)| x.to_bits() == y.to_bits()) {
                continue;
            }
            wrong += 1;
            if rows.len() < REPORTED_ROWS {
                let hc = heads.len();
                let (batch, rest) = (r / (positions.len() * hc), r % (positions.len() * hc));
                let (i, head) = (rest / hc, heads.start + rest % hc);
                let position = positions[i];
                rows.push(RowMismatch {
                    kv,
                    row: i,
                    position,
                    head,
                    batch,
                    expected: RowSource::expected(model, position, batch, head),
                    found: decode_row(config, ops, kv, batch, a),
                    slot: None,
                });
            }
        }
        if wrong > 0 {
            return Some((
                DivergenceKind::Values,
                format!(
                    "ok G={} visible {} but {wrong} {kv:?} rows hold wrong values",
                    view.global_end,
                    shown(&view.positions)
                ),
                rows,
            ));
        }
    }
    None
}
