//! Traces drawn for the relations: a relation is only as strong as the
//! traces it judges, so an engine that checks a subject against itself
//! shapes what it draws into the relations' domains (the contract's §9).
//!
//! The profiles draw for the model, which judges every op of every trace.
//! Most of their configurations have one batch row and one head, where M2,
//! M3 and M4 judge nothing, and most of their traces rewrite, pin or use
//! recent windows early, which ends M7's append-only prefix after an op or
//! two. [`shape`] therefore widens a drawn configuration to two batch rows
//! and two heads on half of the cases, and projects the ops of half of
//! the cases (independently) onto an append-only stream (each write becomes an append of
//! its length at the global end; pins, head ranges and recent windows go),
//! so that the eviction, sink and growth states of the profile are reached
//! by appends alone. Which cases are shaped comes from the case's own
//! random source, so a case replays from its seed, and the shaped trace is
//! the one checked and saved. M1 and M8 need no shaping: they are
//! projected onto every trace where they are applied ([`super::transform`]).

use std::sync::Arc;

use kvmodel::{Config, Model, Op, Variant, Write};
use proptest::prelude::Rng;
use proptest::test_runner::TestRunner;

use crate::engine::strategy::{self, Case, DrawError, Profile};
use crate::subject::Capabilities;

/// Draws a case of `profile` from `runner` as every engine does
/// ([`strategy::draw`]) and [`shape`]s it for the relations.
pub fn draw(
    profile: &'static Profile,
    capabilities: &Arc<Capabilities>,
    runner: &mut TestRunner,
    max_ops: usize,
) -> Result<Case, DrawError> {
    let case = strategy::draw(profile, capabilities, runner, max_ops)?;
    let (config, ops) = shape(runner, case.config, case.ops, capabilities);
    Ok(Case { config, ops })
}

/// `config` and `ops` shaped into the relations' domains (see the module
/// docs), using `runner`'s random source. A shape the subject's
/// capabilities do not allow is left out: the result is always a trace
/// the subject supports if the drawn one was.
pub fn shape(
    runner: &mut TestRunner,
    config: Config,
    ops: Vec<Op>,
    capabilities: &Capabilities,
) -> (Config, Vec<Op>) {
    let choice = runner.rng().next_u32() % 4;
    let mut shaped = (config, ops);
    if choice & 1 == 0 {
        let wide = widened(&shaped.0);
        if capabilities.supports_trace(&wide, &shaped.1).is_ok() {
            shaped.0 = wide;
        }
    }
    if choice & 2 == 0 {
        let appends = append_only(&shaped.0, &shaped.1);
        if capabilities.supports_trace(&shaped.0, &appends).is_ok() {
            shaped.1 = appends;
        }
    }
    shaped
}

/// `config` with at least two batch rows and two heads (where M2, M3 and
/// M4 apply), unless that breaks the size rule.
pub fn widened(config: &Config) -> Config {
    let wide = Config {
        batch: config.batch.max(2),
        heads: config.heads.max(2),
        ..config.clone()
    };
    if wide.validate().is_ok() {
        wide
    } else {
        config.clone()
    }
}

/// `ops` as an append-only stream on `config`: every write an append of
/// its length (at least one row) at the global end the contract gives,
/// every head and no recent window; pins left out; rewinds kept where
/// they land below the global end (dense only, as evictions); resets kept.
/// Each append is in M7's domain as long as the contract accepts it.
pub fn append_only(config: &Config, ops: &[Op]) -> Vec<Op> {
    let Ok(mut model) = Model::new(config) else {
        return ops.to_vec();
    };
    let dense = config.variant == Variant::Dense;
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let shaped = match *op {
            Op::Write(w) => {
                let len = w.len.max(1);
                Some(Op::Write(Write::new(model.global_end() as i64, len)))
            }
            Op::Rewind { to } if dense && to >= 0 => Some(Op::Rewind {
                to: to.min(model.global_end() as i64),
            }),
            Op::Evict { .. } if dense => Some(*op),
            Op::Reset => Some(Op::Reset),
            Op::Pin { .. } | Op::Rewind { .. } | Op::Evict { .. } => None,
        };
        if let Some(op) = shaped {
            // Only the global end is read back: a refused append leaves it
            // where it was, and the next append starts there.
            let _ = model.apply(out.len() as u64, &op);
            out.push(op);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every write of a projected trace is an append at the global end the
    /// model reaches, with every head and no recent window.
    #[test]
    fn projected_writes_are_appends_at_the_global_end() {
        let mut config = Config::dense(6);
        config.sink = 1;
        let ops = [
            Op::Write(Write::new(0, 3)),
            Op::Write(Write {
                heads: Some([0, 1]),
                recent_window: Some(1),
                ..Write::new(1, 2)
            }),
            Op::Pin { tokens: 2 },
            Op::Rewind { to: 9 },
            Op::Write(Write::new(2, 0)),
        ];
        let shaped = append_only(&config, &ops);
        assert_eq!(
            shaped,
            vec![
                Op::Write(Write::new(0, 3)),
                Op::Write(Write::new(3, 2)),
                Op::Rewind { to: 5 },
                Op::Write(Write::new(5, 1)),
            ]
        );
    }

    /// Widening keeps a configuration the size rule allows and leaves one
    /// it would break alone.
    #[test]
    fn widening_respects_the_size_rule() {
        let config = Config::dense(4);
        let wide = widened(&config);
        assert_eq!((wide.batch, wide.heads), (2, 2));
        let mut huge = Config::dense(1 << 30);
        huge.head_dim = 2;
        assert_eq!(widened(&huge), huge);
    }
}
