//! The implementations the driver can check against the model: the
//! extension point of kvcheck, one file per kind of subject.
//!
//! - `shipped`: [`open_cache`], the shipped cache for a configuration's
//!   variant (`DenseCache` or `PackedCache`), and [`open_ring`], the
//!   `RingCache` (dense configurations).
//! - `reference`: [`ReferenceCache`], a deliberately naive [`KvCache`] that
//!   keeps every row in a map and asks the model what is resident. It is
//!   obviously right, which makes it the base for constructed failing
//!   subjects.
//! - `exec`: [`ExecSubject`], a cache in another process speaking the
//!   kvcheck-subject/1 line protocol (`docs/subject-protocol.md`).
//! - `factory`: [`Factory`], a cache built by user code (bring your own
//!   [`KvCache`]).
//! - `capabilities`: [`Capabilities`], what a subject can express; engines
//!   generate nothing else for it.
//! - `faults`: [`Fault`], bugs injected into the reference cache, so the
//!   tests of the driver, the minimizer, the explainer and the explorer can
//!   prove that they catch and shrink real failures without planting bugs in
//!   the shipped caches. `fault:NAME` also names the zoo of
//!   [`kvcache::fault::CacheFault`]: shipped caches with a realistic bug.
//!
//! Every engine opens its subject through [`Lockstep::open`], which asks
//! for its [`Capabilities`] first, and drives it with the one lockstep
//! driver.
//!
//! [`Lockstep::open`]: crate::check::lockstep::Lockstep::open

mod capabilities;
pub mod domain;
mod exec;
mod factory;
mod faults;
pub mod guard;
pub mod prefix;
mod reference;
mod shipped;

pub use capabilities::{Capabilities, Feature, OpKind, Reports, Unsupported};
pub use domain::{Domain, Excluded, Latest};
pub use exec::{
    parse_timeout, tensor_bytes, tensor_from_bytes, ExecCache, ExecCommandError, ExecPrefixCache,
    ExecPrefixSubject, ExecSubject, Hello, InvalidTimeout, SubjectFailure, PREFIX_REVISION,
    PROTOCOL, STARTUP_TIMEOUT, STDERR_LINES,
};
pub use factory::{parse_kind, register, Factory, Kind, KindArgs, OpenFn};
pub use faults::Fault;
pub use reference::ReferenceCache;
pub use shipped::{open_cache, open_cache_on, open_ring, ring_capabilities};

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use kvcache::fault::{CacheFault, FaultBase, FaultyCache};
use kvcache::KvCache;
use kvmodel::{Config, Variant};

use crate::settings::Settings;

/// Why a subject form does not parse ([`SubjectSpec::parse`]); the message
/// quotes the text and names the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// `exec:` with a command line that cannot be used.
    #[error(transparent)]
    Exec(#[from] ExecCommandError),
    /// `cache:PATH` (or `dense:PATH`, `packed:PATH`) with an unknown path.
    #[error(transparent)]
    Path(#[from] kvcache::UnknownPath),
    /// `fault:NAME@BASE` with an unknown base.
    #[error(transparent)]
    FaultBase(#[from] kvcache::fault::UnknownFaultBase),
    /// `fault:NAME@BASE` whose `NAME` is no fault of the zoo.
    #[error(
        "unknown fault {fault:?} in {text:?}: expected one of {}",
        CacheFault::ALL.map(CacheFault::name).join(", ")
    )]
    UnknownFault {
        /// The fault name given.
        fault: String,
        /// The whole subject text.
        text: String,
    },
    /// `fault:NAME@ring` with a fault that lives in the packed cache.
    #[error("{text:?}: {fault} is a packed fault and the ring has no packed variant")]
    PackedFaultOnRing {
        /// The whole subject text.
        text: String,
        /// The packed fault.
        fault: CacheFault,
    },
    /// No subject form at all.
    #[error(
        "unknown subject {text:?}: expected cache, cache:ring, cache:in-place, cache:generic, reference, exec:'COMMAND ARGS' or fault:NAME with NAME one of {}, {}",
        Fault::ALL.map(Fault::name).join(", "),
        CacheFault::ALL.map(CacheFault::name).join(", ")
    )]
    Unknown {
        /// The text given.
        text: String,
    },
    /// A registered kind ([`factory::register`]) refused its arguments.
    #[error("{text:?} names no {kind} subject: {why}")]
    Kind {
        /// The kind's prefix.
        kind: String,
        /// The text given.
        text: String,
        /// What the kind expected.
        why: KindArgs,
    },
}

/// `KVCHECK_SUBJECT` holds something [`SubjectSpec::parse`] refuses
/// ([`SubjectSpec::configured`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("KVCHECK_SUBJECT: {source}")]
pub struct SubjectEnvError {
    /// Why the value does not parse.
    pub source: SubjectError,
}

/// Which implementation a command checks against the model. Cheap to
/// clone: an external process and a factory are shared handles.
#[derive(Clone, Debug, Default)]
pub enum SubjectSpec {
    /// The shipped cache for the trace's variant (`cache`).
    #[default]
    Cache,
    /// The shipped `RingCache` (`cache:ring`): dense configurations only.
    Ring,
    /// The shipped cache forced onto one implementation path
    /// (`cache:in-place`, `cache:generic`): how the device-generic path,
    /// which a GPU runs, is checked on the CPU.
    CachePath(kvcache::Path),
    /// The naive [`ReferenceCache`] (`reference`).
    Reference,
    /// The naive cache with a fault injected (`fault:NAME`): a constructed
    /// failing subject for checking the harness itself.
    Fault(Fault),
    /// A shipped cache with a bug of the zoo (`fault:NAME`,
    /// [`kvcache::fault::CacheFault`]): what the power of the engines is
    /// measured on.
    CacheFault(CacheFault),
    /// A bug of the zoo injected into another correct cache
    /// (`fault:NAME@generic`, `fault:NAME@ring`): the same fault on the
    /// device-generic path or on the `RingCache`. Never built with
    /// [`FaultBase::Shipped`] (that is [`SubjectSpec::CacheFault`]); use
    /// [`SubjectSpec::cache_fault`].
    CacheFaultOn(CacheFault, FaultBase),
    /// A process speaking kvcheck-subject/1 (`exec:COMMAND ARGS`); its
    /// processes are reused across cases.
    Exec(Arc<ExecSubject>),
    /// A cache built by user code ([`Factory`]).
    Factory(Factory),
}

impl PartialEq for SubjectSpec {
    /// Same kind and same fault; external subjects and factories are equal
    /// when they are the same handle.
    fn eq(&self, other: &SubjectSpec) -> bool {
        match (self, other) {
            (SubjectSpec::Cache, SubjectSpec::Cache)
            | (SubjectSpec::Ring, SubjectSpec::Ring)
            | (SubjectSpec::Reference, SubjectSpec::Reference) => true,
            (SubjectSpec::Fault(a), SubjectSpec::Fault(b)) => a == b,
            (SubjectSpec::CachePath(a), SubjectSpec::CachePath(b)) => a == b,
            (a, b) if a.zoo_fault().is_some() => a.zoo_fault() == b.zoo_fault(),
            (SubjectSpec::Exec(a), SubjectSpec::Exec(b)) => Arc::ptr_eq(a, b),
            (SubjectSpec::Factory(a), SubjectSpec::Factory(b)) => a.same(b),
            _ => false,
        }
    }
}

impl SubjectSpec {
    /// This subject with the `exec:` options of `settings` (response
    /// timeout, exact kinds, strict domain); other subjects are returned
    /// unchanged.
    pub fn with_settings(self, settings: &Settings) -> SubjectSpec {
        self.with_exec_options(Some(settings.subject_timeout), settings.exact_kinds)
            .with_strict_domain(settings.strict_domain)
    }

    /// The subject of the property suites: [`Settings::subject`] parsed
    /// (any form [`SubjectSpec::parse`] takes), else the shipped caches,
    /// with the settings' options ([`SubjectSpec::with_settings`]). Text
    /// that does not parse is an error naming `KVCHECK_SUBJECT`.
    pub fn configured(settings: &Settings) -> Result<SubjectSpec, SubjectEnvError> {
        let subject = match &settings.subject {
            None => SubjectSpec::Cache,
            Some(text) => SubjectSpec::parse(text).map_err(|source| SubjectEnvError { source })?,
        };
        Ok(subject.with_settings(settings))
    }

    /// The subject of `fault` injected into `base`.
    pub fn cache_fault(fault: CacheFault, base: FaultBase) -> SubjectSpec {
        match base {
            FaultBase::Shipped => SubjectSpec::CacheFault(fault),
            base => SubjectSpec::CacheFaultOn(fault, base),
        }
    }

    /// The bug of the zoo and its base, for a zoo subject.
    pub fn zoo_fault(&self) -> Option<(CacheFault, FaultBase)> {
        match self {
            SubjectSpec::CacheFault(fault) => Some((*fault, FaultBase::Shipped)),
            SubjectSpec::CacheFaultOn(fault, base) => Some((*fault, *base)),
            _ => None,
        }
    }

    /// Parses `cache`, `cache:ring` (or `ring`), `cache:in-place`,
    /// `cache:generic`, `reference`, `fault:NAME`, `fault:NAME@BASE` (a
    /// fault of the zoo on `shipped`, `generic` or `ring`) or
    /// `exec:COMMAND ARGS`, and every name [`SubjectSpec::name`] reports
    /// (`dense`, `packed`, `dense:generic`, …) but a factory's: a report's
    /// subject parses back to the subject that produced it.
    pub fn parse(text: &str) -> Result<SubjectSpec, SubjectError> {
        if let Some(command) = text.strip_prefix("exec:") {
            return Ok(SubjectSpec::Exec(Arc::new(ExecSubject::new(command)?)));
        }
        if text == "cache:ring" || text == "ring" {
            return Ok(SubjectSpec::Ring);
        }
        // A report names the shipped cache by its variant (`dense`,
        // `packed:generic`, see `name`); those names parse back to the same
        // subject so that every printed replay command runs as printed.
        if let Some(path) = ["cache:", "dense:", "packed:"]
            .iter()
            .find_map(|prefix| text.strip_prefix(prefix))
        {
            return Ok(SubjectSpec::CachePath(path.parse()?));
        }
        match text {
            "cache" | "dense" | "packed" => Ok(SubjectSpec::Cache),
            "reference" => Ok(SubjectSpec::Reference),
            _ => {
                let name = text.strip_prefix("fault:");
                if let Some(fault) = name.and_then(Fault::from_name) {
                    return Ok(SubjectSpec::Fault(fault));
                }
                if let Some((fault, base)) = name.and_then(|n| n.split_once('@')) {
                    let base: FaultBase = base.parse()?;
                    let fault =
                        CacheFault::from_name(fault).ok_or_else(|| SubjectError::UnknownFault {
                            fault: fault.to_string(),
                            text: text.to_string(),
                        })?;
                    if !base.holds(fault.variant()) {
                        return Err(SubjectError::PackedFaultOnRing {
                            text: text.to_string(),
                            fault,
                        });
                    }
                    return Ok(SubjectSpec::cache_fault(fault, base));
                }
                if let Some(fault) = name.and_then(CacheFault::from_name) {
                    return Ok(SubjectSpec::CacheFault(fault));
                }
                match factory::parse_kind(text) {
                    Some(Ok(factory)) => Ok(SubjectSpec::Factory(factory)),
                    Some(Err((kind, why))) => Err(SubjectError::Kind {
                        kind,
                        text: text.to_string(),
                        why,
                    }),
                    None => Err(SubjectError::Unknown {
                        text: text.to_string(),
                    }),
                }
            }
        }
    }

    /// An external subject with the command line's settings: a response
    /// timeout (when given) and exact error kinds (when `exact`). Other
    /// subjects are returned unchanged.
    pub fn with_exec_options(self, timeout: Option<Duration>, exact: bool) -> SubjectSpec {
        match self {
            SubjectSpec::Exec(subject) => {
                let mut fresh = ExecSubject::new(subject.command())
                    .expect("the command line was split before")
                    .with_timeout(timeout.unwrap_or(subject.timeout()));
                fresh = fresh.with_exact_kinds(exact || subject.exact_kinds());
                fresh = fresh.with_strict_domain(subject.strict_domain());
                SubjectSpec::Exec(Arc::new(fresh))
            }
            other => other,
        }
    }

    /// An external subject whose every *outside* answer is a divergence
    /// and whose declared domain is ignored (`--strict-domain`), for a
    /// cache that claims the whole contract. In-process subjects never
    /// answer *outside* unless they say so themselves, and are returned
    /// unchanged.
    pub fn with_strict_domain(self, strict: bool) -> SubjectSpec {
        match self {
            SubjectSpec::Exec(subject) if strict && !subject.strict_domain() => {
                let mut fresh = ExecSubject::new(subject.command())
                    .expect("the command line was split before")
                    .with_timeout(subject.timeout())
                    .with_exact_kinds(subject.exact_kinds());
                fresh = fresh.with_strict_domain(true);
                SubjectSpec::Exec(Arc::new(fresh))
            }
            other => other,
        }
    }

    /// Whether every *outside* answer is a divergence
    /// ([`SubjectSpec::with_strict_domain`]).
    pub fn strict_domain(&self) -> bool {
        match self {
            SubjectSpec::Exec(subject) => subject.strict_domain(),
            _ => false,
        }
    }

    /// The subject as suites name it, whatever the configuration: `the
    /// shipped caches` (every variant), `cache:PATH`, or its
    /// [`name`](SubjectSpec::name).
    pub fn label(&self) -> String {
        match self {
            SubjectSpec::Cache => "the shipped caches".to_string(),
            SubjectSpec::CachePath(path) => format!("cache:{path}"),
            other => other.name(&Config::dense(1)),
        }
    }

    /// The name used in reports (`dense`, `packed`, `ring`, `reference`, `fault:…`,
    /// `exec:…`, a factory's name).
    pub fn name(&self, config: &Config) -> String {
        match self {
            SubjectSpec::Cache => match config.variant {
                Variant::Dense => "dense".to_string(),
                Variant::Packed => "packed".to_string(),
            },
            SubjectSpec::Ring => "ring".to_string(),
            SubjectSpec::CachePath(path) => match config.variant {
                Variant::Dense => format!("dense:{path}"),
                Variant::Packed => format!("packed:{path}"),
            },
            SubjectSpec::Reference => "reference".to_string(),
            SubjectSpec::Fault(fault) => format!("fault:{}", fault.name()),
            SubjectSpec::CacheFault(fault) => format!("fault:{}", fault.name()),
            SubjectSpec::CacheFaultOn(fault, base) => format!("fault:{}@{base}", fault.name()),
            SubjectSpec::Exec(subject) => format!("exec:{}", subject.command()),
            SubjectSpec::Factory(factory) => factory.name().to_string(),
        }
    }

    /// What the subject can express. An external subject is asked (its
    /// first process is started for that); the others say it themselves.
    pub fn capabilities(&self) -> Result<Capabilities, SubjectFailure> {
        match self {
            SubjectSpec::Exec(subject) => Ok(subject.hello()?.capabilities),
            SubjectSpec::Factory(factory) => Ok(factory.capabilities().clone()),
            SubjectSpec::Ring => Ok(ring_capabilities()),
            SubjectSpec::CacheFault(fault)
            | SubjectSpec::CacheFaultOn(fault, FaultBase::Shipped | FaultBase::Generic) => {
                Ok(Capabilities {
                    variants: vec![fault.variant()],
                    ..Capabilities::full()
                })
            }
            SubjectSpec::CacheFaultOn(fault, FaultBase::Ring) => {
                let mut capabilities = ring_capabilities();
                capabilities.variants.retain(|v| *v == fault.variant());
                Ok(capabilities)
            }
            // The naive cache implements both trim modes; the fault that
            // trims before the read claims both as well (that is its bug).
            SubjectSpec::Reference | SubjectSpec::Fault(Fault::TrimBeforeRead) => {
                Ok(Capabilities::full_with_after_read())
            }
            _ => Ok(Capabilities::full()),
        }
    }

    /// Whether error kinds are compared exactly. Always for in-process
    /// caches (their refusals carry docs/contract.md kinds); for an external subject
    /// only with `--exact-kinds` / `KVCHECK_EXACT_KINDS`, otherwise every
    /// `err` and `exception` agrees with every refusal of the model.
    pub fn exact_kinds(&self) -> bool {
        match self {
            SubjectSpec::Exec(subject) => subject.exact_kinds(),
            _ => true,
        }
    }

    /// How refusals are compared, in words, for reports.
    pub fn kinds_mode(&self) -> &'static str {
        if self.exact_kinds() {
            "error kinds compared exactly"
        } else {
            "refusals compared as refused (any err or exception agrees with any refusal; --exact-kinds compares kinds)"
        }
    }

    /// Builds the subject for `config` on `device`. Everything a driver
    /// needs beyond the cache is known before: what it can express and
    /// reports ([`SubjectSpec::capabilities`]) and how refusals compare
    /// ([`SubjectSpec::exact_kinds`]); the cache itself takes the index of
    /// each op ([`KvCache::begin_op`]) and fails a reset like any other op.
    ///
    /// The cache comes [`guard::Guarded`]: a panic of any op (or of the
    /// constructor) is the subject's failure, never the harness's.
    pub fn open(&self, config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
        let cache = guard::catching(|| self.open_unguarded(config, device))?;
        Ok(Box::new(guard::Guarded::new(cache)))
    }

    fn open_unguarded(
        &self,
        config: &Config,
        device: &Device,
    ) -> kvcache::Result<Box<dyn KvCache>> {
        Ok(match self {
            SubjectSpec::Cache => open_cache(config, device)?,
            SubjectSpec::Ring => open_ring(config, device)?,
            SubjectSpec::CachePath(path) => open_cache_on(config, device, *path)?,
            SubjectSpec::Reference => Box::new(ReferenceCache::new(config, device)?),
            SubjectSpec::Fault(fault) => {
                Box::new(ReferenceCache::with_fault(config, device, *fault)?)
            }
            SubjectSpec::CacheFault(fault) => Box::new(FaultyCache::new(config, device, *fault)?),
            SubjectSpec::CacheFaultOn(fault, base) => {
                Box::new(FaultyCache::on(config, device, *fault, *base)?)
            }
            SubjectSpec::Exec(subject) => Box::new(subject.open(config, device)?),
            SubjectSpec::Factory(factory) => factory.open(config, device)?,
        })
    }
}

impl std::fmt::Display for SubjectSpec {
    /// The form [`SubjectSpec::parse`] takes back (a factory shows its
    /// name, which cannot be parsed).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubjectSpec::Cache => f.write_str("cache"),
            SubjectSpec::Ring => f.write_str("cache:ring"),
            SubjectSpec::CachePath(path) => write!(f, "cache:{path}"),
            SubjectSpec::Reference => f.write_str("reference"),
            SubjectSpec::Fault(fault) => write!(f, "fault:{}", fault.name()),
            SubjectSpec::CacheFault(fault) => write!(f, "fault:{}", fault.name()),
            SubjectSpec::CacheFaultOn(fault, base) => write!(f, "fault:{}@{base}", fault.name()),
            SubjectSpec::Exec(subject) => write!(f, "exec:{}", subject.command()),
            SubjectSpec::Factory(factory) => f.write_str(factory.name()),
        }
    }
}

impl std::str::FromStr for SubjectSpec {
    type Err = SubjectError;

    fn from_str(text: &str) -> Result<SubjectSpec, SubjectError> {
        SubjectSpec::parse(text)
    }
}

#[cfg(test)]
mod tests;
