//! Exhaustive exploration of the prefix family: every sequence of a small
//! alphabet of ops up to a depth, breadth first, on small configs. States
//! are told apart by the model's canonical form (`PrefixModel::canonical`):
//! a state reached twice is expanded once. Every transition is judged by
//! driving its whole path on a fresh cache of the subject, so a subject
//! whose state is not the model's (another eviction policy) is still
//! judged on each path the explorer keeps.

use std::collections::{HashSet, VecDeque};

use kvmodel::prefix::{HitRule, PrefixConfig, PrefixModel, PrefixOp, RequestId, Token};

use super::campaign::{PrefixCaseFailure, PrefixOpenError, PrefixSubject};
use super::drive::Judge;
use super::minimize::{minimize_driven, PrefixMinimizeError};
use crate::subject::prefix::{PrefixCapabilities, Steps};

/// Request ids the explorer uses: a new request always takes the smallest
/// free one, so that paths differing only in ids are one path.
const IDS: RequestId = 3;

/// The small configs explored by default: 2 or 3 blocks of 1 or 2 slots,
/// both hit rules, those the subject opens.
pub fn default_configs(caps: &PrefixCapabilities) -> Vec<PrefixConfig> {
    let mut configs = Vec::new();
    for blocks in [2, 3] {
        for block_size in [1, 2] {
            for hit in [HitRule::LeaveOne, HitRule::Whole] {
                let config = PrefixConfig {
                    hit,
                    ..PrefixConfig::new(blocks, block_size)
                };
                if caps.unsupported(&config, &[]).is_none() {
                    configs.push(config);
                }
            }
        }
    }
    configs
}

/// Three prompts of a config: two cuts of one story that share its first
/// block, and that block's tokens reversed and one more (a block of the
/// same tokens in another order: what a weak block hash confuses).
fn prompts(block_size: usize) -> [Vec<Token>; 3] {
    let story: Vec<Token> = (0..2 * block_size as u32 + 1).map(|i| i % 3).collect();
    let mut reversed: Vec<Token> = story[..block_size].iter().rev().copied().collect();
    reversed.push(2);
    [story[..block_size + 1].to_vec(), story.clone(), reversed]
}

/// The ops tried from `model`'s state, among those `caps` implements.
pub fn actions(model: &PrefixModel, caps: &PrefixCapabilities) -> Vec<PrefixOp> {
    let mut ops = Vec::new();
    let free_id = (0..IDS).find(|id| model.request(*id).is_none());
    if let Some(request) = free_id {
        for tokens in prompts(model.config().block_size) {
            ops.push(PrefixOp::Start { request, tokens });
        }
    }
    for (request, r) in model.requests() {
        if r.is_preempted() {
            ops.push(PrefixOp::Resume { request });
            ops.push(PrefixOp::Finish { request });
            continue;
        }
        let left = (r.tokens().len() - r.computed()) as i64;
        ops.push(PrefixOp::Compute { request, count: 1 });
        if left > 1 {
            ops.push(PrefixOp::Compute {
                request,
                count: left,
            });
        }
        // A token no prompt holds, one per request: two requests that
        // write the same slot write different rows.
        ops.push(PrefixOp::Extend {
            request,
            tokens: vec![3 + request],
        });
        ops.push(PrefixOp::Rollback { request, count: 1 });
        let b = model.config().block_size;
        if b > 1 && r.tokens().len() >= b {
            // Back into the middle of a full block: the next extend copies.
            ops.push(PrefixOp::Rollback {
                request,
                count: b as i64,
            });
        }
        if let (Some(into), 0) = (free_id, left) {
            ops.push(PrefixOp::Fork { request, into });
        }
        ops.push(PrefixOp::Preempt { request });
        ops.push(PrefixOp::Finish { request });
    }
    if model.counts().cached > 0 {
        ops.push(PrefixOp::Evict { blocks: 1 });
        ops.push(PrefixOp::Clear);
    }
    ops.retain(|op| caps.has_op(op.name()));
    ops
}

/// What exploring one config did.
#[derive(Debug)]
pub struct ExploredConfig {
    /// The config.
    pub config: PrefixConfig,
    /// Distinct states reached (canonical model states).
    pub states: usize,
    /// Transitions judged (paths driven).
    pub transitions: u64,
    /// The deepest path judged.
    pub depth: usize,
    /// Whether `max_states` stopped it before its depth.
    pub truncated: bool,
}

/// What an exploration did.
#[derive(Debug, Default)]
pub struct PrefixExploreReport {
    /// Every config explored, in order.
    pub configs: Vec<ExploredConfig>,
    /// The first failing path (the exploration stops there), minimized.
    pub failure: Option<PrefixCaseFailure>,
    /// A setup error that stopped it.
    pub setup: Option<String>,
}

/// Explores `configs` on `subject` under `judge` to `depth` ops, at most
/// `max_states` states per config.
pub fn explore(
    subject: &mut dyn PrefixSubject,
    judge: &Judge,
    configs: &[PrefixConfig],
    depth: usize,
    max_states: usize,
) -> PrefixExploreReport {
    let caps = subject.capabilities();
    let mut report = PrefixExploreReport::default();
    for config in configs {
        let Ok(start) = PrefixModel::new(config) else {
            continue;
        };
        let mut explored = ExploredConfig {
            config: config.clone(),
            states: 1,
            transitions: 0,
            depth: 0,
            truncated: false,
        };
        let mut seen = HashSet::from([start.canonical()]);
        let mut queue = VecDeque::from([(start, Vec::<PrefixOp>::new())]);
        while let Some((model, path)) = queue.pop_front() {
            if path.len() >= depth {
                continue;
            }
            for op in actions(&model, &caps) {
                let mut next_path = path.clone();
                next_path.push(op.clone());
                explored.transitions += 1;
                explored.depth = explored.depth.max(next_path.len());
                let driven = match subject.drive(config, judge, Steps::Free, &next_path) {
                    Ok(driven) => driven,
                    Err(PrefixOpenError::Outside(_)) => break,
                    Err(PrefixOpenError::Setup(problem)) => {
                        report.setup = Some(problem);
                        report.configs.push(explored);
                        return report;
                    }
                };
                if let Some(divergence) = driven.divergence {
                    let mut again = |ops: &[PrefixOp]| {
                        subject
                            .drive(config, judge, Steps::Free, ops)
                            .map_err(|e| PrefixMinimizeError::Subject(e.to_string()))
                    };
                    let minimized = minimize_driven(config, &next_path, &mut again, 2_000);
                    report.failure = Some(PrefixCaseFailure {
                        case: explored.transitions,
                        config: config.clone(),
                        ops: driven.executed,
                        divergence,
                        minimized,
                    });
                    report.configs.push(explored);
                    return report;
                }
                if driven.cut.is_some() {
                    continue;
                }
                let mut next = model.clone();
                if next.apply(path.len() as u64, &op).is_err() {
                    continue;
                }
                if explored.states >= max_states {
                    explored.truncated = true;
                    continue;
                }
                if seen.insert(next.canonical()) {
                    explored.states += 1;
                    queue.push_back((next, next_path));
                }
            }
        }
        report.configs.push(explored);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_offers_a_block_of_the_same_tokens_in_another_order() {
        let config = PrefixConfig::new(2, 2);
        let mut model = PrefixModel::new(&config).unwrap();
        model
            .apply(
                0,
                &PrefixOp::Start {
                    request: 0,
                    tokens: vec![0, 1, 2],
                },
            )
            .unwrap();
        model
            .apply(
                1,
                &PrefixOp::Compute {
                    request: 0,
                    count: 3,
                },
            )
            .unwrap();
        let ops: Vec<String> = actions(&model, &PrefixCapabilities::full())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(ops.contains(&"start r1 [1 0 2]".to_string()), "{ops:?}");
        assert!(ops.contains(&"fork r0 r1".to_string()), "{ops:?}");
    }
}
