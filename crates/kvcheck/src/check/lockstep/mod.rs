//! The lockstep driver: one function that every engine uses (property
//! suites, `kvcheck run`, replay, fuzz targets, the explorer).
//!
//! Each op goes to the reference model and to the cache under test. After
//! every op the driver compares the outcome kind, the global end, the
//! capacity and resident bytes, and for writes the visible positions and
//! the view tensors, bit for bit, against the values the model's writers
//! imply (see [`crate::check::payload`]). Views are taken as segments
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
//! as [`SubjectFailure`](crate::subject::SubjectFailure)s and become divergences of their own kinds.

use crate::check::coverage::{Before, Coverage};
use crate::check::divergence::{describe_outcome, Divergence, DivergenceKind};
use crate::check::payload::{payload_rows, write_tensor, write_tensors};
use crate::check::trace::Trace;
use crate::codec::Kv;
use crate::subject::{open_cache, Capabilities, Domain, Latest, SubjectSpec, Unsupported};
use candle_core::Device;
use kvcache::KvCache;
use kvmodel::{CacheError, Config, Model, Op, Outcome, Variant, Write};

mod compare;
mod cut;
mod view;

use cut::state_before;
pub use cut::Cut;
pub use view::ValueCheck;
use view::*;

/// Elements of a payload the driver builds for a write the model refuses;
/// above it the cache gets an empty payload (it must refuse before looking).
const REFUSED_PAYLOAD_LIMIT: usize = 1 << 20;

/// Why a lockstep run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The configuration breaks docs/contract.md §1.
    #[error(transparent)]
    InvalidConfig(#[from] CacheError),
    /// The model accepts the configuration but the cache does not.
    #[error("the model accepts the configuration but the cache refuses it: {0}")]
    CacheRefused(kvcache::Error),
    /// The configuration needs a capability the subject lacks: nothing to
    /// check, not a divergence.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// The subject answered that the configuration lies outside its
    /// domain ([`kvcache::Error::Outside`]): the case is cut before its
    /// first op, not a divergence.
    #[error("the configuration is outside the subject's domain: {reason}")]
    Outside {
        /// The subject's reason.
        reason: String,
    },
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
    value_check: ValueCheck,
    latest: Latest,
    cut: Option<Cut>,
    strict_domain: bool,
    served: usize,
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
        let cache = subject.open(config, device).map_err(|e| match e {
            kvcache::Error::Outside { reason } => SetupError::Outside { reason },
            e => SetupError::CacheRefused(e),
        })?;
        let mut run = Self::assemble(model, cache, &subject.name(config), device);
        run.capabilities = capabilities;
        run.exact_kinds = subject.exact_kinds();
        run.strict_domain = subject.strict_domain();
        Ok(run)
    }

    pub(super) fn assemble(
        model: Model,
        cache: Box<dyn KvCache>,
        subject: &str,
        device: &Device,
    ) -> Lockstep {
        Lockstep {
            model,
            cache,
            subject: subject.to_string(),
            device: device.clone(),
            ops: Vec::new(),
            coverage: Coverage::default(),
            capabilities: Capabilities::full(),
            exact_kinds: true,
            value_check: ValueCheck::default(),
            latest: Latest::default(),
            cut: None,
            strict_domain: false,
            served: 0,
        }
    }

    /// Takes every *outside* answer for a divergence
    /// ([`DivergenceKind::Outside`]) and sends every op, whatever domain
    /// the subject declares: for a cache that claims the whole contract.
    pub fn set_strict_domain(&mut self, strict: bool) {
        self.strict_domain = strict;
    }

    /// Where the case left the subject's domain, if it did: that op and
    /// every later one are not judged. [`Lockstep::step`] keeps applying
    /// later ops to the model alone and returns its outcomes, so a caller
    /// that steps on gets no divergence from them.
    pub fn cut(&self) -> Option<&Cut> {
        self.cut.as_ref()
    }

    /// Ops judged so far: every op before the cut, or every op.
    pub fn judged(&self) -> usize {
        self.cut.as_ref().map_or(self.ops.len(), |c| c.step)
    }

    /// Judged ops the subject served with state: writes of at least one
    /// position that the contract accepts (appends and rewrites), answered
    /// by the subject. Refusals, probes, rewinds and resets are judged
    /// too, but a subject that answers *outside* to every write still
    /// passes those; the judged floor counts these instead.
    pub fn served(&self) -> usize {
        self.served
    }

    /// The domain ops are kept inside: the declared one, unless the run is
    /// strict.
    fn domain(&self) -> Option<&Domain> {
        self.capabilities
            .domain
            .as_ref()
            .filter(|_| !self.strict_domain)
    }

    /// Whether the subject's declared domain (if any) admits `op` next.
    pub fn admits(&self, op: &Op) -> bool {
        self.domain()
            .is_none_or(|d| d.admits(&self.model, self.latest, op).is_ok())
    }

    /// `op` moved inside the subject's declared domain ([`Domain::shape`]);
    /// `op` itself without a declaration.
    pub fn shape(&self, op: Op) -> Op {
        match self.domain() {
            Some(d) => d.shape(&self.model, self.latest, op),
            None => op,
        }
    }

    /// The subject answered *outside* to op `index`: a divergence with
    /// `--strict-domain` ([`DivergenceKind::Outside`]) or where its declared
    /// domain admits the op ([`DivergenceKind::Domain`]); otherwise the
    /// case is cut there.
    pub(super) fn answered_outside(
        &mut self,
        index: usize,
        expected: &Outcome,
        reason: String,
    ) -> Result<(), Box<Divergence>> {
        let op = self.ops[index];
        let expected = describe_outcome(expected);
        if self.strict_domain {
            let actual = format!("outside its domain ({reason})");
            return Err(self.divergence(index, DivergenceKind::Outside, expected, actual));
        }
        let (before, latest) = state_before(self.model.config(), &self.ops, index);
        if let Some(domain) = &self.capabilities.domain {
            if domain.admits(&before, latest, &op).is_ok() {
                let actual = format!(
                    "outside its domain ({reason}), though its declared domain admits {op}"
                );
                return Err(self.divergence(index, DivergenceKind::Domain, expected, actual));
            }
        }
        self.cut = Some(Cut {
            step: index,
            op,
            reason,
            answered: true,
            suggestion: Domain::suggest(&before, latest, &op),
        });
        Ok(())
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
    ///
    /// An op outside the subject's declared domain is not sent, and one the
    /// subject answers *outside* is not judged: the case is cut there
    /// ([`Lockstep::cut`]); later ops go to the model alone.
    pub fn step(&mut self, op: &Op) -> Result<Outcome, Box<Divergence>> {
        let index = self.ops.len();
        if self.cut.is_some() {
            self.ops.push(*op);
            return Ok(self.model.apply(index as u64, op).into());
        }
        if let Some(excluded) = self
            .domain()
            .and_then(|d| d.admits(&self.model, self.latest, op).err())
        {
            self.cut = Some(Cut {
                step: index,
                op: *op,
                reason: excluded.to_string(),
                answered: false,
                // Already declared: nothing to suggest.
                suggestion: None,
            });
            self.ops.push(*op);
            return Ok(self.model.apply(index as u64, op).into());
        }
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
        self.cache.begin_op(index as u64);
        let before = Before::of(&self.model);
        let global_end = self.model.global_end();
        let expected: Outcome = self.model.apply(index as u64, op).into();
        match op {
            Op::Write(w) => self.step_write(index, w, &expected)?,
            _ => {
                let actual = match op {
                    Op::Rewind { to } => self.cache.rewind(*to),
                    Op::Evict { tokens } => self.cache.evict(*tokens),
                    Op::Pin { tokens } => self.cache.pin(*tokens),
                    _ => self.cache.reset(),
                };
                match actual {
                    Err(kvcache::Error::Outside { reason }) => {
                        self.answered_outside(index, &expected, reason)?
                    }
                    // The global end reported here and the cache's own are
                    // both compared: the first below, the second in check_state.
                    actual => {
                        self.compare_outcome(index, &expected, actual)?;
                    }
                }
            }
        }
        if self.cut.is_some() {
            return Ok(expected);
        }
        if matches!(op, Op::Write(w) if w.len > 0) && expected.error_kind().is_none() {
            self.served += 1;
        }
        self.latest
            .follow(global_end, op, expected.error_kind().is_none());
        self.check_state(index)?;
        if expected.error_kind().is_some() {
            self.probe(index)?;
        }
        self.coverage
            .observe_from(&before, &self.model, op, &expected);
        Ok(expected)
    }

    pub(super) fn step_write(
        &mut self,
        index: usize,
        w: &Write,
        expected: &Outcome,
    ) -> Result<(), Box<Divergence>> {
        let config = self.model.config().clone();
        // An accepted write carries its whole payload; a refused one only
        // while it is small enough to build.
        let limit = match expected.error_kind() {
            None => usize::MAX,
            Some(_) => REFUSED_PAYLOAD_LIMIT,
        };
        let (start, len, heads) = payload_rows(&config, w, limit);
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
                if let Err(kvcache::Error::Outside { reason }) = actual {
                    return self.answered_outside(index, expected, reason);
                }
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
}
