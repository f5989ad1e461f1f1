//! The op strategies: what the suites and `kvcheck run` draw from the
//! model's state, within the subject's capabilities.

use std::sync::Arc;

use kvmodel::{Config, Model, Op, Variant};
use proptest::prelude::*;
use proptest::strategy::Union;

use crate::subject::domain::Chunks;
use crate::subject::{Capabilities, Feature, Latest, OpKind};

/// The reference state the strategies look at: the model plus the last
/// append, which denoise-style rewrites repeat.
#[derive(Clone, Debug)]
pub struct RefState {
    /// The model after the ops so far.
    pub model: Model,
    /// `(start, len)` of the last successful append since the last reset
    /// or rewind: the chunk a pipeline would be denoising.
    pub last_append: Latest,
    /// Ops applied so far (the next op's index).
    pub steps: u64,
    /// What the subject can express: the strategies draw nothing else.
    pub capabilities: Arc<Capabilities>,
}

impl RefState {
    /// A fresh state for `config` (which must be valid), for a subject with
    /// every capability.
    pub fn new(config: &Config) -> RefState {
        Self::for_subject(config, Arc::new(Capabilities::full()))
    }

    /// A fresh state for `config` (which must be valid), drawing only what
    /// `capabilities` allow.
    pub fn for_subject(config: &Config, capabilities: Arc<Capabilities>) -> RefState {
        RefState {
            model: Model::new(config).expect("profiles generate valid configs"),
            last_append: Latest::default(),
            steps: 0,
            capabilities,
        }
    }

    /// Applies `op` to the model, tracking the last append.
    pub fn apply(&mut self, op: &Op) {
        let before = self.model.global_end();
        let ok = self.model.apply(self.steps, op).is_ok();
        self.steps += 1;
        self.last_append.follow(before, op, ok);
    }

    /// Whether the subject's declared domain (if any) admits `op` next: the
    /// suites' precondition, which shrinking keeps too.
    pub fn admits(&self, op: &Op) -> bool {
        self.capabilities
            .domain
            .as_ref()
            .is_none_or(|d| d.admits(&self.model, self.last_append, op).is_ok())
    }
}

/// `strategy`'s ops moved inside the subject's declared domain
/// ([`crate::subject::Domain::shape`]); unchanged without a declaration.
fn within_domain(state: &RefState, strategy: BoxedStrategy<Op>) -> BoxedStrategy<Op> {
    match &state.capabilities.domain {
        None => strategy,
        Some(domain) => {
            let (domain, model, latest) = (domain.clone(), state.model.clone(), state.last_append);
            strategy
                .prop_map(move |op| domain.shape(&model, latest, op))
                .boxed()
        }
    }
}

/// Head ranges: mostly none, some valid sub-ranges, a few invalid ones.
fn head_ranges(heads: i64) -> BoxedStrategy<Option<[i64; 2]>> {
    prop_oneof![
        8 => Just(None),
        3 => (0..heads).prop_flat_map(move |first| (Just(first), 1..=heads - first)).prop_map(|(f, c)| Some([f, c])),
        1 => (-1..=heads, -1..=heads + 1).prop_map(|(f, c)| Some([f, c])),
    ]
    .boxed()
}

/// Recent windows: mostly none, some in `[0, C + 2]`, rarely negative.
fn recent_windows(capacity: i64) -> BoxedStrategy<Option<i64>> {
    prop_oneof![
        8 => Just(None),
        3 => (0..=capacity + 2).prop_map(Some),
        1 => Just(Some(-1)),
    ]
    .boxed()
}

/// Longest chunk drawn: keeps grown capacities (and the model's maps) small.
const MAX_LEN: i64 = 12;

/// Lengths weighted toward chunks that fit, with overflowing ones too.
fn lengths(capacity: i64, sink: i64) -> BoxedStrategy<i64> {
    let capacity = capacity.min(MAX_LEN);
    let fits = (capacity - sink).clamp(1, MAX_LEN);
    prop_oneof![
        6 => 1..=fits,
        2 => 1..=capacity + 1,
    ]
    .boxed()
}

/// Draws from the arms whose op kind the subject implements.
fn weighted(
    caps: &Capabilities,
    arms: Vec<(u32, Option<OpKind>, BoxedStrategy<Op>)>,
) -> BoxedStrategy<Op> {
    let arms: Vec<(u32, BoxedStrategy<Op>)> = arms
        .into_iter()
        .filter(|(weight, kind, _)| *weight > 0 && kind.is_none_or(|kind| caps.has_op(kind)))
        .map(|(weight, _, arm)| (weight, arm))
        .collect();
    Union::new_weighted(arms).boxed()
}

/// An LLM's decoding from `state` (profile `decode`): a conversation is
/// one prefill of any length, at and past the room beside the sink
/// included, then single-token steps; a reset ends it and the next one
/// starts from position 0. Inside the subject's declared domain.
pub fn decode_ops(state: &RefState) -> BoxedStrategy<Op> {
    within_domain(state, conversation(state))
}

fn conversation(state: &RefState) -> BoxedStrategy<Op> {
    let model = &state.model;
    let g = model.global_end() as i64;
    if g == 0 {
        let c = model.capacity() as i64;
        let room = (c - model.config().sink as i64).max(1);
        // Prompts that fit, that fill the room exactly and that overflow it.
        return prop_oneof![
            4 => (1..=room).boxed(),
            2 => Just(room).boxed(),
            2 => (room + 1..=c + 2).boxed(),
        ]
        .prop_map(|n| Op::write(0, n, None, None))
        .boxed();
    }
    weighted(
        state.capabilities.as_ref(),
        vec![
            (12, None, Just(Op::write(g, 1, None, None)).boxed()),
            (1, Some(OpKind::Reset), Just(Op::Reset).boxed()),
        ],
    )
}

/// The ops to try next from `state`, inside the subject's declared domain
/// where it declares one.
pub fn ops(state: &RefState) -> BoxedStrategy<Op> {
    within_domain(state, contract_ops(state))
}

/// The chunk loop of autoregressive video generation from `state`
/// (profile `pipeline`): the first chunk of a video, denoising rewrites of
/// the latest chunk (its clean re-run is one more), the next chunk, a probe
/// of the view, a scene cut (the latest chunk pinned as the shot sink, or
/// the frames before it dropped) and a reset between videos. A chunk keeps
/// the length of the video's first one: a length the subject declares, else
/// a divisor of `C − S`. Inside the subject's declared domain.
pub fn pipeline_ops(state: &RefState) -> BoxedStrategy<Op> {
    within_domain(state, chunk_loop(state))
}

fn chunk_loop(state: &RefState) -> BoxedStrategy<Op> {
    let model = &state.model;
    let caps = state.capabilities.as_ref();
    let g = model.global_end() as i64;
    let room = (model.capacity() - model.config().sink).max(1) as i64;
    let lengths: Vec<i64> = match caps.domain.as_ref().map(|d| &d.chunks) {
        Some(Chunks::Lengths(lengths)) if !lengths.is_empty() => {
            lengths.iter().map(|&n| n as i64).collect()
        }
        Some(Chunks::Multiple(k)) if *k > 0 => vec![*k as i64],
        _ => (1..=room.min(MAX_LEN)).filter(|n| room % n == 0).collect(),
    };
    let first = proptest::sample::select(lengths).prop_map(move |n| Op::write(g, n, None, None));
    let Some((start, len)) = state.last_append.0 else {
        return first.boxed();
    };
    let (start, len) = (start as i64, len as i64);
    let shot = model.config().global_sink > 0 && start > 0;
    let before = model
        .evictable()
        .iter()
        .filter(|&&p| p < start as u64)
        .count() as i64;
    weighted(
        caps,
        vec![
            (6, None, Just(Op::write(start, len, None, None)).boxed()),
            (3, None, Just(Op::write(g, len, None, None)).boxed()),
            (1, None, Just(Op::write(g, 0, None, None)).boxed()),
            (
                u32::from(shot),
                Some(OpKind::Pin),
                Just(Op::Pin { tokens: len }).boxed(),
            ),
            (
                u32::from(shot && model.pin_range().is_none()),
                Some(OpKind::Evict),
                Just(Op::Evict { tokens: before }).boxed(),
            ),
            (1, Some(OpKind::Reset), Just(Op::Reset).boxed()),
        ],
    )
}

/// The ops of the whole contract to try next from `state`.
fn contract_ops(state: &RefState) -> BoxedStrategy<Op> {
    let model = &state.model;
    let caps = state.capabilities.as_ref();
    let config = model.config();
    let g = model.global_end() as i64;
    let c = model.capacity() as i64;
    let s = config.sink as i64;
    let heads = if caps.has(Feature::HeadRanges) {
        head_ranges(config.heads as i64)
    } else {
        Just(None).boxed()
    };
    let recent = if caps.has(Feature::RecentWindow) {
        recent_windows(c)
    } else {
        Just(None).boxed()
    };
    let append = (lengths(c, s), heads.clone(), recent.clone())
        .prop_map(move |(n, h, r)| Op::write(g, n, h, r));
    let denoise = match state.last_append.0 {
        Some((start, len)) => (heads.clone(), recent.clone())
            .prop_map(move |(h, r)| Op::write(start as i64, len as i64, h, r))
            .boxed(),
        None => append.clone().boxed(),
    };
    let negative: Vec<Op> = [
        Op::write(-1, 1, None, None),
        Op::write(0, -1, None, None),
        Op::Rewind { to: -1 },
        Op::Evict { tokens: -1 },
        Op::Pin { tokens: -1 },
    ]
    .into_iter()
    .filter(|op| caps.supports_op(op).is_ok())
    .collect();
    let negative = proptest::sample::select(negative).boxed();
    let probe = (0..=g + 1, recent.clone()).prop_map(|(start, r)| Op::write(start, 0, None, r));
    match config.variant {
        Variant::Dense => {
            let evictable = model.evictable().len() as i64;
            let c = c.min(MAX_LEN);
            let overlap = (1..=c.max(1), 1..=c + 1)
                .prop_map(move |(back, n)| Op::write((g - back).max(0), back + n, None, None));
            let gap =
                (1..=3i64, 1..=c).prop_map(move |(skip, n)| Op::write(g + skip, n, None, None));
            let anywhere = (0..=g, 1..=c, heads.clone())
                .prop_map(|(start, n, h)| Op::write(start, n, h, None));
            weighted(
                caps,
                vec![
                    (10, None, append.boxed()),
                    (6, None, denoise),
                    (2, None, overlap.boxed()),
                    (1, None, gap.boxed()),
                    (2, None, anywhere.boxed()),
                    (1, None, probe.boxed()),
                    (
                        2,
                        Some(OpKind::Rewind),
                        (0..=g + 1).prop_map(|to| Op::Rewind { to }).boxed(),
                    ),
                    (
                        2,
                        Some(OpKind::Evict),
                        (0..=evictable + 1)
                            .prop_map(|tokens| Op::Evict { tokens })
                            .boxed(),
                    ),
                    (
                        2,
                        Some(OpKind::Pin),
                        (0..=g + 1).prop_map(|tokens| Op::Pin { tokens }).boxed(),
                    ),
                    (1, Some(OpKind::Reset), Just(Op::Reset).boxed()),
                    (1, None, negative),
                ],
            )
        }
        Variant::Packed => {
            let mut boundaries: Vec<i64> = model
                .chunks()
                .iter()
                .map(|chunk| chunk.start as i64)
                .collect();
            boundaries.extend([0, g]);
            let boundary = proptest::sample::select(boundaries).prop_map(|to| Op::Rewind { to });
            let unsupported = weighted(
                caps,
                vec![
                    (
                        1,
                        None,
                        (0..=g, 0..=c)
                            .prop_map(|(start, n)| Op::write(start, n, None, None))
                            .boxed(),
                    ),
                    (
                        1,
                        Some(OpKind::Evict),
                        (0..=3i64).prop_map(|tokens| Op::Evict { tokens }).boxed(),
                    ),
                    (
                        1,
                        Some(OpKind::Pin),
                        (0..=3i64).prop_map(|tokens| Op::Pin { tokens }).boxed(),
                    ),
                    (
                        1,
                        Some(OpKind::Rewind),
                        (0..=g + 1).prop_map(|to| Op::Rewind { to }).boxed(),
                    ),
                ],
            );
            weighted(
                caps,
                vec![
                    (10, None, append.boxed()),
                    (8, None, denoise),
                    (2, Some(OpKind::Rewind), boundary.boxed()),
                    (1, None, probe.boxed()),
                    (2, None, unsupported),
                    (1, Some(OpKind::Reset), Just(Op::Reset).boxed()),
                    (1, None, negative),
                ],
            )
        }
    }
}
