//! Where a case left the subject's domain ([`Cut`]).

use crate::subject::{Domain, Latest};
use kvmodel::{Config, Model, Op};

/// Where a case left the subject's domain: the op is not judged, and
/// nothing after it is sent (see [`Lockstep::cut`](super::Lockstep::cut)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Index of the op.
    pub step: usize,
    /// The op.
    pub op: Op,
    /// Why: the subject's reason, or the declaration that leaves the op out.
    pub reason: String,
    /// Whether the subject answered *outside* (else the op lies outside
    /// its declared domain and was never sent).
    pub answered: bool,
    /// The declaration that would keep such ops from being drawn
    /// ([`Domain::suggest`]), when there is one.
    pub suggestion: Option<&'static str>,
}

impl Cut {
    /// The cut of `ops` on `config` at `step`, answered *outside* by the
    /// subject (`answered`) or left out by its declaration, with the
    /// declaration that would keep such ops from being drawn.
    pub fn at(config: &Config, ops: &[Op], step: usize, reason: String, answered: bool) -> Cut {
        let (model, latest) = state_before(config, ops, step);
        let op = ops.get(step).copied().unwrap_or(Op::Reset);
        Cut {
            step,
            op,
            reason,
            answered,
            suggestion: Domain::suggest(&model, latest, &op),
        }
    }

    /// The cut of `ops` on `config` before its first op, where the subject
    /// answered *outside* to `open`: no op was sent, so what to declare is
    /// the configurations it opens (`"configs"`), nothing about
    /// the first op.
    pub fn at_open(config: &Config, ops: &[Op], reason: String) -> Cut {
        Cut {
            suggestion: Some(OPEN_DECLARATION),
            ..Cut::at(config, ops, 0, reason, true)
        }
    }
}

/// What an outside warning names for cases cut at `open`: the domain's
/// `configs` limits (docs/subject-protocol.md), whose values only the
/// subject's author knows.
pub const OPEN_DECLARATION: &str = "\"configs\"";

/// The contract's state before op `index` of `ops` (rebuilt only when a
/// case is cut, to name a declaration). `config` must be valid.
pub(super) fn state_before(config: &Config, ops: &[Op], index: usize) -> (Model, Latest) {
    let mut model = Model::new(config).expect("the model opened it");
    let mut latest = Latest::default();
    for (i, op) in ops[..index.min(ops.len())].iter().enumerate() {
        let before = model.global_end();
        let ok = model.apply(i as u64, op).is_ok();
        latest.follow(before, op, ok);
    }
    (model, latest)
}
