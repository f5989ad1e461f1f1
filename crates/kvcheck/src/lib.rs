//! kvcheck
