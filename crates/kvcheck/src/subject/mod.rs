//! The implementations the driver can check against the model: the
//! extension point of kvcheck, one file per kind of subject.
//!
//! - `shipped`: [`open_cache`], the shipped cache for a configuration's
//!   variant (`DenseCache` or `PackedCache`).
//! - `reference`: [`ReferenceCache`], a deliberately naive [`KvCache`] that
//!   keeps every row in a map and asks the model what is resident. It is
//!   obviously right, which makes it the base for constructed failing
//!   subjects.
//! - `faults`: [`Fault`], bugs injected into the reference cache, so the
//!   tests of the driver, the minimizer, the explainer and the explorer can
//!   prove that they catch and shrink real failures without planting bugs in
//!   the shipped caches.
//!
//! Every engine opens its subject through [`SubjectSpec::open`] and drives it
//! with the one lockstep driver.

mod faults;
mod reference;
mod shipped;

pub use faults::Fault;
pub use reference::ReferenceCache;
pub use shipped::open_cache;

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::{Config, Variant};

/// Which implementation a command checks against the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SubjectSpec {
    /// The shipped cache for the trace's variant (`cache`).
    #[default]
    Cache,
    /// The naive [`ReferenceCache`] (`reference`).
    Reference,
    /// The naive cache with a fault injected (`fault:NAME`): a constructed
    /// failing subject for checking the harness itself.
    Fault(Fault),
}

impl SubjectSpec {
    /// Parses `cache`, `reference` or `fault:NAME`.
    pub fn parse(text: &str) -> Result<SubjectSpec, String> {
        match text {
            "cache" => Ok(SubjectSpec::Cache),
            "reference" => Ok(SubjectSpec::Reference),
            _ => match text.strip_prefix("fault:").and_then(Fault::from_name) {
                Some(fault) => Ok(SubjectSpec::Fault(fault)),
                None => Err(format!(
                    "unknown subject {text:?}: expected cache, reference or fault:NAME with NAME one of {}",
                    Fault::ALL.map(Fault::name).join(", ")
                )),
            },
        }
    }

    /// The name used in reports (`dense`, `packed`, `reference`, `fault:…`).
    pub fn name(self, config: &Config) -> String {
        match self {
            SubjectSpec::Cache => match config.variant {
                Variant::Dense => "dense".to_string(),
                Variant::Packed => "packed".to_string(),
            },
            SubjectSpec::Reference => "reference".to_string(),
            SubjectSpec::Fault(fault) => format!("fault:{}", fault.name()),
        }
    }

    /// Builds the subject for `config` on `device`.
    pub fn open(self, config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
        Ok(match self {
            SubjectSpec::Cache => open_cache(config, device)?,
            SubjectSpec::Reference => Box::new(ReferenceCache::new(config, device)?),
            SubjectSpec::Fault(fault) => {
                Box::new(ReferenceCache::with_fault(config, device, fault)?)
            }
        })
    }
}

impl std::str::FromStr for SubjectSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<SubjectSpec, String> {
        SubjectSpec::parse(text)
    }
}
