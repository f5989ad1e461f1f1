//! What the minimizer compares and drives down: a divergence's
//! [`Signature`] (the same failure) and a trace's [`Size`].

use std::fmt;

use kvmodel::{Config, Dtype, Op};

use crate::check::divergence::{Divergence, DivergenceKind};

/// What "the same failure" means: the divergence kind and the op kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// What disagreed.
    pub kind: DivergenceKind,
    /// The name of the op at the divergence (`write`, `rewind`, …).
    pub op: &'static str,
}

impl Signature {
    /// The signature of a divergence.
    pub fn of(divergence: &Divergence) -> Signature {
        Signature {
            kind: divergence.kind,
            op: divergence.op.name(),
        }
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} divergence on a {}", self.kind, self.op)
    }
}

/// The size the minimizer drives down: ops first, then how big their
/// arguments and the config are. Reported before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size {
    /// Number of ops.
    pub ops: usize,
    /// Sum of the magnitudes of every op argument and config field that
    /// the passes shrink; a rough "how much is going on" number.
    pub weight: u64,
}

impl Size {
    /// The size of `config` and `ops`.
    pub fn of(config: &Config, ops: &[Op]) -> Size {
        let arg = |x: i64| x.unsigned_abs();
        let ops_weight: u64 = ops
            .iter()
            .map(|op| match op {
                Op::Write(w) => {
                    arg(w.start)
                        + arg(w.len)
                        + w.heads.map_or(0, |[a, b]| 1 + arg(a) + arg(b))
                        + w.recent_window.map_or(0, |r| 1 + arg(r))
                }
                Op::Rewind { to } => arg(*to),
                Op::Evict { tokens } | Op::Pin { tokens } => arg(*tokens),
                Op::Reset => 0,
            })
            .sum();
        let c = config;
        let config_weight = (c.capacity
            + c.sink
            + c.window.map_or(0, |w| w + 1)
            + c.global_sink
            + c.heads
            + c.head_dim
            + c.batch) as u64
            + u64::from(c.growth)
            + u64::from(c.dtype != Dtype::F32);
        Size {
            ops: ops.len(),
            weight: ops_weight + config_weight,
        }
    }
}
