//! One case: a configuration and the ops applied to it, drawn for a
//! profile within a subject's capabilities.
//!
//! [`sequences`] is the profile as proptest-state-machine's sequential
//! strategy, built from closures over the profile and the capabilities
//! (the way a state machine test takes a model), so that no profile needs
//! a type of its own and nothing is read from thread-local state. The
//! property suites run it under proptest's runner, which shrinks a failing
//! sequence; every other engine draws one case from it with [`draw`].

use std::sync::Arc;

use kvmodel::{Config, Op};
use proptest::prelude::*;
use proptest::test_runner::{Reason, TestRunner};
use proptest_state_machine::strategy::Sequential;

use super::{profile_configs, profile_support, Profile, RefState};
use crate::subject::{Capabilities, Unsupported};

/// A configuration and the ops applied to it, in order: what every engine
/// hands to an oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The configuration the subject is opened with.
    pub config: Config,
    /// The ops, applied in order from a fresh cache.
    pub ops: Vec<Op>,
}

/// Why a case could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    /// The profile has no configuration the subject can express.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// The strategy could not draw a case (proptest's reason).
    #[error("{0}")]
    Draw(Reason),
}

/// The sequences a profile draws: an initial [`RefState`] and the ops
/// applied to it.
pub type Sequences = Sequential<RefState, Op, BoxedStrategy<RefState>, BoxedStrategy<Op>>;

/// The sequences of `profile` within `capabilities`, of 1 to `max_ops`
/// ops (at least one): configurations the subject opens, ops it can
/// express, and (when it declares a domain) only ops inside it, while
/// drawing and while shrinking. A profile none of whose configurations
/// the subject opens is [`Unsupported`], with the reason.
pub fn sequences(
    profile: &'static Profile,
    capabilities: Arc<Capabilities>,
    max_ops: usize,
) -> Result<Sequences, Unsupported> {
    profile_support(profile, &capabilities)?;
    Ok(Sequential::new(
        (1..=max_ops.max(1)).into(),
        move || {
            let capabilities = Arc::clone(&capabilities);
            profile_configs(profile, Arc::clone(&capabilities))
                .prop_map(move |config| RefState::for_subject(&config, Arc::clone(&capabilities)))
                .boxed()
        },
        // Inside the subject's declared domain: shaped draws stay inside,
        // and shrinking never leaves it.
        |state: &RefState, op: &Op| state.admits(op),
        move |state: &RefState| (profile.ops)(state),
        |mut state: RefState, op: &Op| {
            state.apply(op);
            state
        },
    ))
}

/// Draws one case of `profile` within `capabilities` from `runner`: the
/// first value of [`sequences`], as every engine but the suites draws it.
pub fn draw(
    profile: &'static Profile,
    capabilities: &Arc<Capabilities>,
    runner: &mut TestRunner,
    max_ops: usize,
) -> Result<Case, DrawError> {
    use proptest::strategy::ValueTree as _;
    let (state, ops, _) = sequences(profile, Arc::clone(capabilities), max_ops)?
        .new_tree(runner)
        .map_err(DrawError::Draw)?
        .current();
    Ok(Case {
        config: state.model.config().clone(),
        ops,
    })
}
