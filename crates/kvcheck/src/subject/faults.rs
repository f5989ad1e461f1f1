//! Constructed failing subjects: bugs injected into the naive
//! [`ReferenceCache`](super::ReferenceCache), so that the harness can prove
//! it catches and shrinks real failures without planting bugs in the shipped
//! caches.

/// A bug to inject into a [`ReferenceCache`](super::ReferenceCache).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Rewrites of positions below the global end keep the old values (a
    /// denoise step that never lands): a value divergence.
    StaleRewrite,
    /// Writes that overlap the global end are refused as `non_sequential`:
    /// an outcome divergence.
    RefuseOverlap,
    /// Once anything has been evicted, position 0 drops out of the view: a
    /// visible-positions divergence.
    ForgetSinkAfterEviction,
    /// Declares and opens `trim = "after_read"` (docs/contract.md §3) but
    /// trims before the read, as the default mode does: a chunk at a full
    /// cache sees `W − n` older positions instead of the whole old view,
    /// and a chunk longer than the room is refused. Correct under
    /// `before_read`.
    TrimBeforeRead,
}

impl Fault {
    /// Every fault, for tests that sweep them.
    pub const ALL: [Fault; 4] = [
        Fault::StaleRewrite,
        Fault::RefuseOverlap,
        Fault::ForgetSinkAfterEviction,
        Fault::TrimBeforeRead,
    ];

    /// Name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::StaleRewrite => "stale-rewrite",
            Fault::RefuseOverlap => "refuse-overlap",
            Fault::ForgetSinkAfterEviction => "forget-sink-after-eviction",
            Fault::TrimBeforeRead => "trim-before-read",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}
