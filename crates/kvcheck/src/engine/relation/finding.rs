//! A relation or differential failure with both of its runs: what the
//! explanations render and the oracles return.

use crate::check::divergence::Divergence;
use crate::check::record::{Plan, Transcript};

use super::compare::Mismatch;
use super::transform::Pair;

/// One side of a comparison: a plan and what its run showed.
#[derive(Clone, Debug)]
pub struct Side {
    /// `original run`, the transformation in words, or a subject's name.
    pub title: String,
    /// The plan run.
    pub plan: Plan,
    /// What it showed.
    pub run: Transcript,
}

/// A relation or differential failure with both runs, for explanations.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The failure as every engine reports it.
    pub divergence: Box<Divergence>,
    /// The reference side: the original run, or the oracle subject's.
    pub left: Side,
    /// The side checked against it: the transformed run, or the subject's.
    pub right: Side,
    /// Corresponding steps.
    pub pairs: Vec<Pair>,
    /// The first pair that differs (none when a run ended in misbehaviour).
    pub mismatch: Option<Mismatch>,
}
