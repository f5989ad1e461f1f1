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
    // Shared like the function: a subject handle stays small.
    capabilities: Arc<Capabilities>,
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
            capabilities: Arc::new(capabilities),
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

/// A kind of subject another crate adds: the forms `PREFIX:ARGS` (or
/// `PREFIX` alone) that [`SubjectSpec::parse`](super::SubjectSpec::parse)
/// hands to `parse` once the kind is [`register`]ed. The factory `parse`
/// returns should be named by the same form, so that its name prints and
/// parses back (every replay command kvcheck prints runs as printed).
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// The form's prefix, without the colon (`toy` for `toy:3`).
    pub prefix: &'static str,
    /// The subject of `ARGS` (empty for the bare prefix), or what was
    /// expected instead.
    pub parse: fn(&str) -> Result<Factory, KindArgs>,
}

/// A kind's arguments that name no subject: what the kind expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected}")]
pub struct KindArgs {
    /// The forms the kind takes, in words (`a capacity limit, toy:N`).
    pub expected: String,
}

/// The kinds registered so far; read by every parse.
static KINDS: std::sync::RwLock<Vec<Kind>> = std::sync::RwLock::new(Vec::new());

/// Adds `kind` to the forms [`SubjectSpec::parse`](super::SubjectSpec::parse)
/// takes, for the whole process (a kind registered twice is kept once).
/// Built-in forms (`cache`, `exec:`, `fault:`, …) win over a kind with
/// the same prefix.
pub fn register(kind: Kind) {
    let mut kinds = KINDS.write().unwrap_or_else(|e| e.into_inner());
    if !kinds.iter().any(|k| k.prefix == kind.prefix) {
        kinds.push(kind);
    }
}

/// The factory of the registered kind `text` names: `None` when no kind
/// has its prefix, else what the kind's parser says.
pub fn parse_kind(text: &str) -> Option<Result<Factory, (String, KindArgs)>> {
    let (prefix, args) = text.split_once(':').unwrap_or((text, ""));
    let kinds = KINDS.read().unwrap_or_else(|e| e.into_inner());
    let kind = kinds.iter().find(|k| k.prefix == prefix)?;
    Some((kind.parse)(args).map_err(|why| (kind.prefix.to_string(), why)))
}
