//! Bring your own cache: a [`Factory`] makes any crate's [`KvCache`] a
//! subject, so every engine (the property suites of [`crate::engine::suite`],
//! explore, minimize, explain, save) checks it like the shipped caches.
//!
//! ```
//! use kvcheck::subject::{Capabilities, Factory, ReferenceCache};
//!
//! // Any `Fn(&Config, &Device) -> kvcache::Result<Box<dyn KvCache>>`.
//! let factory = Factory::new("naive", Capabilities::full(), |config, device| {
//!     Ok(Box::new(ReferenceCache::new(config, device)?))
//! });
//! assert_eq!(factory.name(), "naive");
//! ```

use std::fmt;
use std::sync::Arc;

use candle_core::Device;
use kvcache::KvCache;
use kvmodel::Config;

use super::capabilities::Capabilities;

/// The function a [`Factory`] wraps: builds a fresh cache for a config.
pub type OpenFn = dyn Fn(&Config, &Device) -> kvcache::Result<Box<dyn KvCache>> + Send + Sync;

/// A user-supplied cache constructor with its name and capabilities.
/// Cheap to clone (the function is shared).
#[derive(Clone)]
pub struct Factory {
    name: String,
    capabilities: Capabilities,
    open: Arc<OpenFn>,
}

impl Factory {
    /// A subject named `name` (in reports and saved file names) that can
    /// express `capabilities`, built by `open` for each case. `open` is
    /// only called with configs the capabilities allow.
    pub fn new(
        name: &str,
        capabilities: Capabilities,
        open: impl Fn(&Config, &Device) -> kvcache::Result<Box<dyn KvCache>> + Send + Sync + 'static,
    ) -> Factory {
        Factory {
            name: name.to_string(),
            capabilities,
            open: Arc::new(open),
        }
    }

    /// The name given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The capabilities given.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// Builds a cache for `config` on `device`.
    pub fn open(&self, config: &Config, device: &Device) -> kvcache::Result<Box<dyn KvCache>> {
        (self.open)(config, device)
    }

    /// Whether two handles share one function.
    pub fn same(&self, other: &Factory) -> bool {
        Arc::ptr_eq(&self.open, &other.open)
    }
}

impl fmt::Debug for Factory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Factory")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}
