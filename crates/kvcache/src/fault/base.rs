//! [`FaultBase`]: which correct cache a fault of the zoo is injected into.

use std::fmt;
use std::str::FromStr;

/// The correct cache a [`FaultyCache`](super::FaultyCache) wraps. The
/// faults change only what the contract lets a caller observe (requests,
/// returned rows and positions, state after a refusal), so each one
/// applies unchanged on top of any cache that implements the dense or
/// packed contract; the base decides which storage and which code moves
/// the bytes underneath.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FaultBase {
    /// The shipped cache of the configuration's variant (`DenseCache` or
    /// `PackedCache`) on its default path.
    #[default]
    Shipped,
    /// The shipped cache forced onto the device-generic path
    /// ([`Path::Generic`](crate::Path::Generic)).
    Generic,
    /// The [`RingCache`](crate::RingCache): dense configurations only (a
    /// packed one is refused with `invalid_config`).
    Ring,
}

impl FaultBase {
    /// Every base, in a fixed order.
    pub const ALL: [FaultBase; 3] = [FaultBase::Shipped, FaultBase::Generic, FaultBase::Ring];

    /// The name used on command lines: `shipped`, `generic` or `ring`.
    pub fn name(self) -> &'static str {
        match self {
            FaultBase::Shipped => "shipped",
            FaultBase::Generic => "generic",
            FaultBase::Ring => "ring",
        }
    }

    /// Whether a fault living in `variant` can be injected into this base
    /// (the ring has no packed variant).
    pub fn holds(self, variant: kvmodel::Variant) -> bool {
        self != FaultBase::Ring || variant == kvmodel::Variant::Dense
    }
}

impl fmt::Display for FaultBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault base name that is not `shipped`, `generic` or `ring`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache {text:?}: expected shipped, generic or ring")]
pub struct UnknownFaultBase {
    /// The text parsed.
    pub text: String,
}

impl FromStr for FaultBase {
    type Err = UnknownFaultBase;

    /// Parses `shipped`, `generic` or `ring`; the error names the accepted
    /// values.
    fn from_str(text: &str) -> Result<FaultBase, UnknownFaultBase> {
        FaultBase::ALL
            .into_iter()
            .find(|b| b.name() == text)
            .ok_or_else(|| UnknownFaultBase {
                text: text.to_string(),
            })
    }
}
