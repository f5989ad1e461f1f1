//! The reducer: the smallest failing trace so far and the passes that try
//! to make it smaller (ops, arguments, configuration) until it is 1-minimal.

use crate::check::divergence::Divergence;
use crate::engine::oracle::Oracle;
use crate::subject::SubjectSpec;
use kvmodel::{Config, Op};

use super::candidates::*;
use super::measure::{Signature, Size};

/// The minimizer's working state: the smallest failing trace so far.
pub(super) struct Reducer {
    pub(super) subject: SubjectSpec,
    pub(super) oracle: Oracle,
    pub(super) signature: Signature,
    /// A further test of "the same failure" ([`minimize_keeping`]).
    pub(super) keep: Box<dyn Fn(&Divergence) -> bool>,
    pub(super) config: Config,
    pub(super) ops: Vec<Op>,
    pub(super) divergence: Box<Divergence>,
    pub(super) tests: usize,
    pub(super) max_tests: usize,
}

impl Reducer {
    pub(super) fn size(&self) -> Size {
        Size::of(&self.config, &self.ops)
    }

    /// The candidate's divergence against the oracle, if any (a candidate
    /// the subject cannot run counts as passing).
    pub(super) fn run(&self, config: &Config, ops: &[Op]) -> Option<Box<Divergence>> {
        self.oracle.check(config, ops, &self.subject).ok().flatten()
    }

    /// `ops` cut after the divergence step, since later ops never matter
    /// to the model's lockstep driver. A relation picks its transformations
    /// from the whole trace, so there the cut is kept only when it still
    /// fails the same way (one more test).
    pub(super) fn cut(
        &mut self,
        config: &Config,
        ops: &[Op],
        d: Box<Divergence>,
    ) -> (Vec<Op>, Box<Divergence>) {
        let cut = ops[..=d.step.min(ops.len() - 1)].to_vec();
        if self.oracle.stepwise() || cut.len() == ops.len() || self.exhausted() {
            return (cut, d);
        }
        self.tests += 1;
        match self.run(config, &cut) {
            Some(shorter) if Signature::of(&shorter) == self.signature => (cut, shorter),
            _ => (ops.to_vec(), d),
        }
    }

    pub(super) fn exhausted(&self) -> bool {
        self.tests >= self.max_tests
    }

    /// Runs a candidate; if it fails the same way and is no bigger, it
    /// becomes the current trace (cut after its divergence step).
    pub(super) fn try_candidate(&mut self, config: &Config, ops: &[Op]) -> bool {
        // A candidate of the other trim mode is tried in the default mode
        // first (docs/contract.md §3): where the failure shows there too,
        // the simpler contract reproduces it, and the shrinking that
        // follows is not held back by what the trim after the read needs
        // (a chunk that survives its own trim, say).
        if !config.trim.is_default() {
            let default = Config {
                trim: kvmodel::Trim::BeforeRead,
                ..config.clone()
            };
            if self.try_one(&default, ops) {
                return true;
            }
        }
        self.try_one(config, ops)
    }

    fn try_one(&mut self, config: &Config, ops: &[Op]) -> bool {
        if self.exhausted() || config.validate().is_err() || ops.is_empty() {
            return false;
        }
        self.tests += 1;
        let Some(d) = self.run(config, ops) else {
            return false;
        };
        if Signature::of(&d) != self.signature || !(self.keep)(&d) {
            return false;
        }
        let (ops, d) = self.cut(config, ops, d);
        if Size::of(config, &ops) > self.size() {
            return false;
        }
        self.config = config.clone();
        self.ops = ops;
        self.divergence = d;
        true
    }

    /// Delta debugging over the op list: remove chunks of decreasing size.
    pub(super) fn ops_pass(&mut self) -> usize {
        let mut accepted = 0;
        let mut chunk = (self.ops.len() / 2).max(1);
        loop {
            let mut start = 0;
            while start < self.ops.len() && !self.exhausted() {
                let end = (start + chunk).min(self.ops.len());
                let mut candidate = self.ops.clone();
                candidate.drain(start..end);
                let config = self.config.clone();
                if self.try_candidate(&config, &candidate) {
                    accepted += 1;
                } else {
                    start += chunk;
                }
            }
            if chunk == 1 || self.exhausted() {
                return accepted;
            }
            chunk = (chunk / 2).max(1);
        }
    }

    /// Smaller arguments, one op at a time, then positions renumbered down.
    pub(super) fn arguments_pass(&mut self) -> usize {
        let mut accepted = 0;
        let mut i = 0;
        while i < self.ops.len() && !self.exhausted() {
            let mut progress = true;
            while progress && i < self.ops.len() {
                progress = false;
                for op in simpler_ops(&self.ops[i]) {
                    let mut candidate = self.ops.clone();
                    candidate[i] = op;
                    let config = self.config.clone();
                    if self.try_candidate(&config, &candidate) {
                        accepted += 1;
                        progress = true;
                        break;
                    }
                }
            }
            i += 1;
        }
        // Renumber positions downward: shift every op from `from` on by -1,
        // which removes one position from the middle of the stream.
        let mut from = 0;
        while from < self.ops.len() && !self.exhausted() {
            let shifted: Vec<Op> = self
                .ops
                .iter()
                .enumerate()
                .map(|(j, op)| if j >= from { shift_down(op) } else { *op })
                .collect();
            let config = self.config.clone();
            if shifted != self.ops && self.try_candidate(&config, &shifted) {
                accepted += 1;
            } else {
                from += 1;
            }
        }
        accepted
    }

    /// Smaller configs, one field at a time, until none is taken.
    pub(super) fn config_pass(&mut self) -> usize {
        let mut accepted = 0;
        let mut progress = true;
        while progress && !self.exhausted() {
            progress = false;
            for config in simpler_configs(&self.config) {
                let ops = self.ops.clone();
                if self.try_candidate(&config, &ops) {
                    accepted += 1;
                    progress = true;
                    break;
                }
            }
        }
        accepted
    }

    /// Proves that removing any single op loses the failure; removes ops
    /// whose removal keeps it (so the result is 1-minimal) until the budget
    /// runs out.
    pub(super) fn one_minimal(&mut self) -> bool {
        let mut i = 0;
        while i < self.ops.len() {
            if self.exhausted() {
                return false;
            }
            let mut candidate = self.ops.clone();
            candidate.remove(i);
            let config = self.config.clone();
            if !self.try_candidate(&config, &candidate) {
                i += 1;
            } else {
                i = 0;
            }
        }
        true
    }
}
