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
//!
//! The search is **level-synchronous**: the nodes of one depth are expanded
//! in parallel (rayon, on the explorer's pool), each against the
//! fingerprints of the earlier depths (read-only while the level runs);
//! then the new states are deduplicated in frontier order, node by node
//! and op by op, which is the order one thread would meet them in. So the
//! nodes, the counts and the first divergence (the lowest node of the
//! level in frontier order, its first op in alphabet order) are the same
//! for any number of threads. A level is finished before a divergence is
//! reported (nodes after the earliest divergent one known are skipped), so
//! it is a shortest counterexample.
//!
//! In triage mode ([`Explorer::keep_going`]) a divergent transition is
//! recorded and the search goes on: the divergent state is not expanded
//! (what follows a divergence means nothing), every other one is, to the
//! full depth. Findings are keyed by their transition's index in the
//! order one thread would check them, so the representative of each
//! signature is the first breadth-first order meets, for any number of
//! threads.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use candle_core::Device;
use kvmodel::Op;
use rayon::prelude::*;

use super::fingerprint::fingerprint;
use super::{ExploreReport, Explorer};
use crate::check::coverage::Coverage;
use crate::check::divergence::{Divergence, DivergenceKind};
use crate::check::lockstep::Lockstep;
use crate::engine::triage::Triage;
use crate::subject::{Capabilities, SubjectSpec};

/// No parent: a node at depth 0.
const ROOT: u32 = u32::MAX;

struct Node {
    parent: u32,
    op: Op,
}

/// What expanding one node found, merged in frontier order.
#[derive(Default)]
struct Expansion {
    /// New fingerprints (unseen at earlier depths) with the op reaching
    /// them, in alphabet order; duplicates are removed at the merge.
    children: Vec<(u64, Op)>,
    states: u64,
    transitions: u64,
    /// Transitions the subject answered *outside*.
    outside: u64,
    replayed_steps: u64,
    coverage: Coverage,
    divergence: Option<Box<Divergence>>,
    /// Triage mode: the divergent transitions, keyed by their index among
    /// this node's transitions.
    triage: Triage,
}

/// A node's expansion, or why it did not run.
enum Expanded {
    Done(Expansion),
    /// The time limit passed before the node started.
    TimedOut,
    /// A node earlier in the frontier diverged: this one does not matter.
    Skipped,
}

/// The search state of one [`Explorer::run`].
pub(super) struct Bfs<'e> {
    explorer: &'e Explorer,
    nodes: Vec<Node>,
    seen: HashSet<u64>,
    coverage: Coverage,
    report: ExploreReport,
    /// Transitions merged so far, in frontier order: the key base of the
    /// next expansion's findings.
    merged_transitions: u64,
    /// The subject's capabilities: the alphabet draws nothing else.
    capabilities: Capabilities,
}

impl<'e> Bfs<'e> {
    pub(super) fn new(explorer: &'e Explorer) -> Bfs<'e> {
        let capabilities = explorer
            .subject
            .capabilities()
            .unwrap_or_else(|_| Capabilities::full());
        let mut report = ExploreReport::empty(explorer);
        report.required = super::required_events(&explorer.config, &capabilities);
        Bfs {
            explorer,
            nodes: Vec::new(),
            seen: HashSet::new(),
            coverage: Coverage::default(),
            report,
            merged_transitions: 0,
            capabilities,
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

    /// A fresh lockstep with the prefix and `path` applied; counts the
    /// steps re-executed into `replayed`.
    fn rebuild(&self, path: &[Op], replayed: &mut u64) -> Result<Lockstep, Box<Divergence>> {
        let e = self.explorer;
        let device = Device::Cpu;
        // Another oracle than the model: the naive cache walks the states
        // and each sequence is checked against the oracle in `expand`.
        let walker = if e.oracle.stepwise() {
            &e.subject
        } else {
            &SubjectSpec::Reference
        };
        let mut run = Lockstep::open(&e.config, walker, &device)
            .map_err(|err| setup_divergence(e, err.to_string()))?;
        run.run(e.prefix.iter().chain(path))?;
        *replayed += (e.prefix.len() + path.len()) as u64;
        Ok(run)
    }

    /// [`Bfs::rebuild`] for an expansion: the steps counted into `x`, and
    /// a failure recorded as its divergence (`None`: the expansion ends).
    fn rebuild_for(&self, path: &[Op], x: &mut Expansion) -> Option<Lockstep> {
        match self.rebuild(path, &mut x.replayed_steps) {
            Ok(run) => Some(run),
            Err(d) => {
                x.divergence = Some(d);
                None
            }
        }
    }

    pub(super) fn run(mut self) -> Result<ExploreReport, Box<Divergence>> {
        let started = Instant::now();
        let e = self.explorer;
        let mut replayed = 0;
        let root = self.rebuild(&[], &mut replayed)?;
        self.report.replayed_steps += replayed;
        self.seen.insert(fingerprint(root.model(), root.cache()));
        drop(root);
        self.report.distinct_states = 1;
        if let Some(bar) = &e.progress {
            bar.inc_length(1);
        }
        let mut frontier: Vec<u32> = vec![ROOT];
        for depth in 0..e.depth {
            let first_divergence = AtomicUsize::new(usize::MAX);
            let this = &self;
            let expanded: Vec<Expanded> = frontier
                .par_iter()
                .enumerate()
                .map(|(i, &node)| {
                    if i > first_divergence.load(Ordering::Relaxed) {
                        return Expanded::Skipped;
                    }
                    if e.time_limit.is_some_and(|limit| started.elapsed() >= limit) {
                        return Expanded::TimedOut;
                    }
                    let expansion = this.expand(node, depth);
                    if expansion.divergence.is_some() {
                        first_divergence.fetch_min(i, Ordering::Relaxed);
                    }
                    if let Some(bar) = &e.progress {
                        bar.inc(1);
                    }
                    Expanded::Done(expansion)
                })
                .collect();
            let mut next = Vec::new();
            let mut timed_out = false;
            for (&node, expanded) in frontier.iter().zip(expanded) {
                let expansion = match expanded {
                    Expanded::Done(expansion) => expansion,
                    Expanded::TimedOut => {
                        timed_out = true;
                        continue;
                    }
                    Expanded::Skipped => continue,
                };
                self.report.states += expansion.states;
                self.report.transitions += expansion.transitions;
                self.report.outside += expansion.outside;
                self.report.replayed_steps += expansion.replayed_steps;
                self.coverage.merge(&expansion.coverage);
                if let Some(divergence) = expansion.divergence {
                    return Err(divergence);
                }
                self.absorb(expansion.triage, depth);
                self.merged_transitions += expansion.transitions;
                for (there, op) in expansion.children {
                    if self.seen.insert(there) {
                        self.nodes.push(Node { parent: node, op });
                        next.push((self.nodes.len() - 1) as u32);
                        self.report.distinct_states += 1;
                    }
                }
            }
            if let Some(bar) = &e.progress {
                bar.set_message(format!(
                    "depth {} · {} distinct · {} transitions",
                    depth + 1,
                    self.report.distinct_states,
                    self.report.transitions
                ));
            }
            if timed_out {
                self.report.elapsed = started.elapsed();
                self.report.timed_out = true;
                return Ok(self.finish());
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

    /// Triage mode: adds one expansion's findings, keyed after every
    /// transition merged before it; a new signature is announced above the
    /// progress bar.
    fn absorb(&mut self, mut triage: Triage, depth: usize) {
        if triage.is_empty() {
            return;
        }
        triage.offset(self.merged_transitions);
        let mut n = self.report.triage.len();
        for finding in triage.findings() {
            let known = self
                .report
                .triage
                .findings()
                .iter()
                .any(|f| f.signature == finding.signature);
            if let (false, Some(bar)) = (known, &self.explorer.progress) {
                n += 1;
                bar.suspend(|| {
                    eprintln!(
                        "new finding #{n}: {} (depth {}, {} ops)",
                        finding.signature,
                        depth + 1,
                        finding.divergence.trace.ops.len()
                    )
                });
            }
        }
        self.report.triage.absorb(triage);
    }

    fn finish(mut self) -> ExploreReport {
        self.report.coverage = self.coverage;
        self.report
    }

    /// Tries every op of the alphabet from `node`; reads the nodes and the
    /// fingerprints of earlier depths only, so nodes expand in parallel.
    fn expand(&self, node: u32, depth: usize) -> Expansion {
        let mut x = Expansion::default();
        let path = if node == ROOT {
            Vec::new()
        } else {
            self.path(node)
        };
        let Some(mut run) = self.rebuild_for(&path, &mut x) else {
            return x;
        };
        let here = fingerprint(run.model(), run.cache());
        let ops = self
            .explorer
            .alphabet
            .ops_for(run.model(), &self.capabilities);
        let clean_len = run.ops().len();
        for op in ops {
            // Requests the subject declares it is never asked are no
            // transitions of its state space.
            if !run.admits(&op) {
                continue;
            }
            let before = run.model().clone();
            x.transitions += 1;
            let outcome = match run.step(&op) {
                Ok(outcome) => outcome,
                Err(divergence) => {
                    let shortest =
                        self.shortest(&path, op, divergence, clean_len, &mut x.replayed_steps);
                    if !self.explorer.keep_going {
                        x.divergence = Some(shortest);
                        return x;
                    }
                    let first = || format!("depth {}", depth + 1);
                    x.triage.record(x.transitions - 1, first, shortest);
                    let Some(fresh) = self.rebuild_for(&path, &mut x) else {
                        return x;
                    };
                    run = fresh;
                    continue;
                }
            };
            if run.cut().is_some() {
                // Answered outside: not a state of the subject, and not
                // expanded (the path to it leaves the subject's domain).
                x.outside += 1;
                let Some(fresh) = self.rebuild_for(&path, &mut x) else {
                    return x;
                };
                run = fresh;
                continue;
            }
            x.coverage.observe(&before, run.model(), &op, &outcome);
            x.states += 1;
            let failed = self.check_oracle(&path, op);
            let diverged = failed.is_some();
            if let Some(divergence) = failed {
                if !self.explorer.keep_going {
                    x.divergence = Some(divergence);
                    return x;
                }
                let first = || format!("depth {}", depth + 1);
                x.triage.record(x.transitions - 1, first, divergence);
            }
            let there = fingerprint(run.model(), run.cache());
            if there == here {
                continue;
            }
            // A state past a divergence is not expanded.
            if !diverged && !self.seen.contains(&there) {
                x.children.push((there, op));
            }
            let Some(fresh) = self.rebuild_for(&path, &mut x) else {
                return x;
            };
            run = fresh;
        }
        x
    }

    /// With an oracle other than the model: the prefix, `path` and `op`
    /// checked whole against it (a sequence the subject cannot run is no
    /// divergence).
    fn check_oracle(&self, path: &[Op], op: Op) -> Option<Box<Divergence>> {
        let e = self.explorer;
        if e.oracle.stepwise() {
            return None;
        }
        let ops: Vec<Op> = e.prefix.iter().chain(path).copied().chain([op]).collect();
        e.oracle.check(&e.config, &ops, &e.subject).ok().flatten()
    }

    /// The divergence of `path` + `op` re-executed on a clean lockstep, when
    /// `found` came from a lockstep that also ran state-preserving ops.
    fn shortest(
        &self,
        path: &[Op],
        op: Op,
        found: Box<Divergence>,
        clean_len: usize,
        replayed: &mut u64,
    ) -> Box<Divergence> {
        if found.step == clean_len {
            return found;
        }
        let mut run = match self.rebuild(path, replayed) {
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
        trace: crate::check::trace::Trace::new(e.config.clone(), Vec::new()),
        subject: e.subject.name(&e.config),
        saved: None,
        reproduce: None,
    })
}
