//! Breadth-first search over op sequences, checked in lockstep.
//!
//! The lockstep driver holds a `Box<dyn KvCache>` and is not `Clone`, so a
//! node is stored as its parent and the op that reached it, and a state is
//! rebuilt by **re-executing its op path** from the initial state (the
//! prefix, then the path). One rebuild serves every op of the alphabet that
//! leaves the state's fingerprint unchanged (refusals, probes, `evict 0`):
//! the driver keeps going on the same lockstep and only rebuilds after an op
//! that moved to another state. Refused ops are the bulk of the alphabet, so
//! this saves most re-executions. When a divergence shows up on such a
//! reused lockstep, its trace is recomputed from the clean path so that the
//! reported counterexample is exactly the BFS path: the shortest one.

use std::collections::HashSet;
use std::time::Instant;

use candle_core::Device;
use kvmodel::Op;

use super::fingerprint::fingerprint;
use super::{ExploreReport, Explorer};
use crate::coverage::Coverage;
use crate::divergence::{Divergence, DivergenceKind};
use crate::lockstep::Lockstep;

/// No parent: a node at depth 0.
const ROOT: u32 = u32::MAX;

struct Node {
    parent: u32,
    op: Op,
}

/// The search state of one [`Explorer::run`].
pub(super) struct Bfs<'e> {
    explorer: &'e Explorer,
    nodes: Vec<Node>,
    seen: HashSet<u64>,
    coverage: Coverage,
    report: ExploreReport,
}

impl<'e> Bfs<'e> {
    pub(super) fn new(explorer: &'e Explorer) -> Bfs<'e> {
        Bfs {
            explorer,
            nodes: Vec::new(),
            seen: HashSet::new(),
            coverage: Coverage::default(),
            report: ExploreReport::empty(explorer),
        }
    }

    /// The ops from the initial state to `node` (prefix excluded).
    fn path(&self, node: u32) -> Vec<Op> {
        let mut ops = Vec::new();
        let mut at = node;
        while at != ROOT {
            let n = &self.nodes[at as usize];
            ops.push(n.op);
            at = n.parent;
        }
        ops.reverse();
        ops
    }

    /// A fresh lockstep with the prefix and `path` applied.
    fn rebuild(&mut self, path: &[Op]) -> Result<Lockstep, Box<Divergence>> {
        let e = self.explorer;
        let device = Device::Cpu;
        let mut run = Lockstep::open(&e.config, &e.subject, &device)
            .map_err(|err| setup_divergence(e, err.to_string()))?;
        run.run(e.prefix.iter().chain(path))?;
        self.report.replayed_steps += (e.prefix.len() + path.len()) as u64;
        Ok(run)
    }

    pub(super) fn run(mut self) -> Result<ExploreReport, Box<Divergence>> {
        let started = Instant::now();
        let e = self.explorer;
        let root = self.rebuild(&[])?;
        self.seen.insert(fingerprint(root.model(), root.cache()));
        self.report.distinct_states = 1;
        if let Some(bar) = &e.progress {
            bar.inc_length(1);
        }
        let mut frontier: Vec<u32> = vec![ROOT];
        for depth in 0..e.depth {
            let mut next = Vec::new();
            for &node in &frontier {
                if e.time_limit.is_some_and(|limit| started.elapsed() >= limit) {
                    self.report.elapsed = started.elapsed();
                    self.report.timed_out = true;
                    return Ok(self.finish());
                }
                self.expand(node, &mut next)?;
                if let Some(bar) = &e.progress {
                    bar.set_message(format!(
                        "depth {} · {} distinct · {} transitions",
                        depth + 1,
                        self.report.distinct_states,
                        self.report.transitions
                    ));
                    bar.inc(1);
                }
            }
            self.report.depth_completed = depth + 1;
            self.report.frontier = next.len();
            if let Some(bar) = &e.progress {
                bar.inc_length(next.len() as u64);
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        self.report.elapsed = started.elapsed();
        Ok(self.finish())
    }

    fn finish(mut self) -> ExploreReport {
        self.report.coverage = self.coverage;
        self.report
    }

    /// Tries every op of the alphabet from `node`; new states go to `next`.
    fn expand(&mut self, node: u32, next: &mut Vec<u32>) -> Result<(), Box<Divergence>> {
        let path = if node == ROOT {
            Vec::new()
        } else {
            self.path(node)
        };
        let mut run = self.rebuild(&path)?;
        let here = fingerprint(run.model(), run.cache());
        let ops = self
            .explorer
            .alphabet
            .ops_for(run.model(), run.capabilities());
        let clean_len = run.ops().len();
        for op in ops {
            let before = run.model().clone();
            self.report.transitions += 1;
            let outcome = match run.step(&op) {
                Ok(outcome) => outcome,
                Err(divergence) => return Err(self.shortest(&path, op, divergence, clean_len)),
            };
            self.coverage.observe(&before, run.model(), &op, &outcome);
            self.report.states += 1;
            let there = fingerprint(run.model(), run.cache());
            if there == here {
                continue;
            }
            if self.seen.insert(there) {
                self.nodes.push(Node { parent: node, op });
                next.push((self.nodes.len() - 1) as u32);
                self.report.distinct_states += 1;
            }
            run = self.rebuild(&path)?;
        }
        Ok(())
    }

    /// The divergence of `path` + `op` re-executed on a clean lockstep, when
    /// `found` came from a lockstep that also ran state-preserving ops.
    fn shortest(
        &mut self,
        path: &[Op],
        op: Op,
        found: Box<Divergence>,
        clean_len: usize,
    ) -> Box<Divergence> {
        if found.step == clean_len {
            return found;
        }
        let mut run = match self.rebuild(path) {
            Ok(run) => run,
            Err(d) => return d,
        };
        match run.step(&op) {
            Err(d) => d,
            Ok(_) => found,
        }
    }
}

fn setup_divergence(e: &Explorer, actual: String) -> Box<Divergence> {
    Box::new(Divergence {
        step: 0,
        op: Op::Reset,
        kind: DivergenceKind::Backend,
        expected: "the subject accepts the configuration".to_string(),
        actual,
        rows: Vec::new(),
        trace: crate::trace::Trace::new(e.config.clone(), Vec::new()),
        subject: e.subject.name(&e.config),
        saved: None,
    })
}
