//! Op and configuration strategies, shared by the property suites and
//! `kvcheck run`.
//!
//! Ops are drawn from the current model state so that most of them are
//! interesting: appends that overflow, denoise-style rewrites of the last
//! chunk, overlapping writes, gaps, rewrites of evicted positions, chunks
//! larger than `C − S`, recent windows (negative too), head ranges (invalid
//! too), rewinds into evicted history, evicts, pins, resets, zero-length
//! probes and negative numbers.
//!
//! Everything is drawn within the subject's [`Capabilities`] (carried by
//! [`RefState`]): op kinds, head ranges and recent windows it lacks are
//! never generated, and [`profile_configs`] keeps only the configurations
//! it can open.

use std::sync::Arc;

use kvmodel::{Config, Dtype, Model, Op, PackedPolicy, Quant, Variant};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::TestRunner;

use crate::subject::{Capabilities, Feature, OpKind, Unsupported};

/// The reference state the strategies look at: the model plus the last
/// append, which denoise-style rewrites repeat.
#[derive(Clone, Debug)]
pub struct RefState {
    /// The model after the ops so far.
    pub model: Model,
    /// `(start, len)` of the last successful append.
    pub last_append: Option<(u64, u64)>,
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
            last_append: None,
            steps: 0,
            capabilities,
        }
    }

    /// Applies `op` to the model, tracking the last append.
    pub fn apply(&mut self, op: &Op) {
        let before = self.model.global_end();
        let ok = self.model.apply(self.steps, op).is_ok();
        self.steps += 1;
        if let (true, Op::Write(w)) = (ok, op) {
            if w.start as u64 == before && w.len > 0 {
                self.last_append = Some((w.start as u64, w.len as u64));
            }
        }
        if ok && matches!(op, Op::Rewind { .. } | Op::Reset) {
            self.last_append = None;
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
        .filter(|(_, kind, _)| kind.is_none_or(|kind| caps.has_op(kind)))
        .map(|(weight, _, arm)| (weight, arm))
        .collect();
    Union::new_weighted(arms).boxed()
}

/// The ops to try next from `state`.
pub fn ops(state: &RefState) -> BoxedStrategy<Op> {
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
    let denoise = match state.last_append {
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

/// A family of configurations a suite or campaign draws from, with the
/// events it must reach.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    /// Name used by `--profile` and in reports.
    pub name: &'static str,
    /// What it exercises.
    pub about: &'static str,
    /// The configurations it draws.
    pub configs: fn() -> BoxedStrategy<Config>,
    /// Labelled events (see [`crate::coverage::EVENTS`]) it must reach.
    pub required: &'static [&'static str],
}

fn dtypes() -> BoxedStrategy<Dtype> {
    prop_oneof![Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::Bf16)].boxed()
}

fn tiny() -> BoxedStrategy<Config> {
    (1..=6usize, 0..=3usize, 1..=3usize)
        .prop_map(|(capacity, sink, head_dim)| Config {
            sink: sink.min(capacity - 1),
            head_dim,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn sinks() -> BoxedStrategy<Config> {
    (4..=12usize, 1..=3usize)
        .prop_map(|(capacity, sink)| Config {
            sink,
            head_dim: 2,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn window() -> BoxedStrategy<Config> {
    (3..=10usize)
        .prop_flat_map(|capacity| (Just(capacity), 0..=(capacity - 2).min(2)))
        .prop_flat_map(|(capacity, sink)| (Just(capacity), Just(sink), sink + 1..capacity))
        .prop_map(|(capacity, sink, window)| Config {
            sink,
            window: Some(window),
            ..Config::dense(capacity)
        })
        .boxed()
}

fn pins() -> BoxedStrategy<Config> {
    (4..=12usize, 1..=3usize, any::<bool>())
        .prop_map(|(capacity, sink, global)| Config {
            sink,
            global_sink: if global { sink } else { 0 },
            head_dim: 2,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn growth() -> BoxedStrategy<Config> {
    (1..=6usize, 0..=2usize, any::<bool>())
        .prop_map(|(capacity, sink, narrow)| {
            let sink = sink.min(capacity - 1);
            let window = (narrow && capacity > sink + 1).then_some(capacity - 1);
            Config {
                sink,
                window,
                growth: true,
                ..Config::dense(capacity)
            }
        })
        .boxed()
}

fn multi_head() -> BoxedStrategy<Config> {
    (2..=8usize, 0..=2usize, 2..=4usize, 1..=4usize)
        .prop_map(|(capacity, sink, heads, head_dim)| Config {
            sink: sink.min(capacity - 1),
            heads,
            head_dim,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn batch_two() -> BoxedStrategy<Config> {
    (2..=8usize, 0..=2usize, 1..=2usize)
        .prop_map(|(capacity, sink, heads)| Config {
            sink: sink.min(capacity - 1),
            batch: 2,
            heads,
            head_dim: 3,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn half_precision() -> BoxedStrategy<Config> {
    (2..=8usize, 0..=2usize, dtypes(), 1..=2usize)
        .prop_map(|(capacity, sink, dtype, heads)| Config {
            sink: sink.min(capacity - 1),
            dtype,
            heads,
            head_dim: 4,
            ..Config::dense(capacity)
        })
        .boxed()
}

fn packed() -> BoxedStrategy<Config> {
    let quant = prop_oneof![Just(Quant::None), Just(Quant::Int8), Just(Quant::Int4)];
    (
        2..=12usize,
        0..=2usize,
        0..=3usize,
        any::<bool>(),
        quant,
        dtypes(),
        1..=5usize,
        1..=2usize,
        any::<bool>(),
    )
        .prop_map(
            |(capacity, sink, keep, pack_sink, quant, dtype, head_dim, heads, narrow)| {
                let sink = sink.min(capacity - 1);
                let window = (narrow && capacity > sink + 2).then_some(capacity - 1);
                Config {
                    sink,
                    window,
                    dtype,
                    head_dim,
                    heads,
                    packed: Some(PackedPolicy {
                        keep_recent_chunks: keep,
                        quant,
                        pack_sink,
                    }),
                    ..Config::packed(capacity)
                }
            },
        )
        .boxed()
}

/// Events every dense profile must reach.
const DENSE_CORE: &[&str] = &[
    "append",
    "eviction",
    "tail_rewrite",
    "error:non_sequential",
    "error:invalid_argument",
];

/// The built-in profiles.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "tiny",
        about: "capacity 1-6, any sink, one head",
        configs: tiny,
        required: &[
            "append",
            "eviction",
            "eviction_beside_sink",
            "tail_rewrite",
            "overlap_write",
            "rewind_into_evicted",
            "error:evicted",
            "error:chunk_too_large",
            "error:evict_too_many",
            "error:rewind_ahead",
            "error:non_sequential",
            "error:pin_range",
        ],
    },
    Profile {
        name: "sinks",
        about: "capacity 4-12 with 1-3 sink tokens",
        configs: sinks,
        required: DENSE_CORE,
    },
    Profile {
        name: "window",
        about: "window below capacity, recent windows",
        configs: window,
        required: &[
            "append",
            "eviction",
            "window_hides_resident",
            "recent_window",
            "error:window_too_small",
            "error:negative_window",
        ],
    },
    Profile {
        name: "pins",
        about: "shot-sink pins with global_sink 0 or = sink",
        configs: pins,
        required: &[
            "append",
            "eviction",
            "pin",
            "unpin",
            "pin_during_eviction",
            "error:pin_range",
        ],
    },
    Profile {
        name: "growth",
        about: "capacity doubling instead of eviction",
        configs: growth,
        required: &["append", "growth", "reset"],
    },
    Profile {
        name: "multi-head",
        about: "2-4 heads with head-range writes",
        configs: multi_head,
        required: &["append", "eviction", "head_range_write", "error:head_range"],
    },
    Profile {
        name: "batch2",
        about: "batch of two",
        configs: batch_two,
        required: DENSE_CORE,
    },
    Profile {
        name: "half",
        about: "f32, f16 and bf16 buffers",
        configs: half_precision,
        required: DENSE_CORE,
    },
    Profile {
        name: "packed",
        about: "packed cache: denoise pattern, keep 0-3, pack_sink, none/int8/int4",
        configs: packed,
        required: &[
            "append",
            "eviction",
            "tail_rewrite",
            "cold_chunk",
            "partly_evicted_chunk",
            "error:unsupported",
        ],
    },
];

/// Configurations of `profile` drawn sampled at most to decide whether a
/// subject supports any of them.
const PROFILE_SAMPLES: usize = 256;

/// `Ok` when `capabilities` allow some configuration of `profile` (judged
/// on a fixed sample of its configurations); otherwise why not.
pub fn profile_support(profile: &Profile, capabilities: &Capabilities) -> Result<(), Unsupported> {
    use proptest::strategy::ValueTree as _;
    let mut runner = TestRunner::deterministic();
    let configs = (profile.configs)();
    let mut first = None;
    for _ in 0..PROFILE_SAMPLES {
        let Ok(tree) = configs.new_tree(&mut runner) else {
            break;
        };
        match capabilities.supports_config(&tree.current()) {
            Ok(()) => return Ok(()),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(Unsupported {
        what: format!(
            "profile {} ({}): {}",
            profile.name,
            profile.about,
            first.map_or_else(|| "no configuration drawn".to_string(), |e| e.what)
        ),
    })
}

/// The configurations of `profile` that `capabilities` allow (check
/// [`profile_support`] first: a profile with none rejects every draw).
pub fn profile_configs(
    profile: &Profile,
    capabilities: Arc<Capabilities>,
) -> BoxedStrategy<Config> {
    if capabilities.is_full() {
        return (profile.configs)();
    }
    (profile.configs)()
        .prop_filter("unsupported by the subject", move |config| {
            capabilities.supports_config(config).is_ok()
        })
        .boxed()
}

/// The events of `profile.required` that can happen on a subject with
/// `capabilities` (see [`Capabilities::allows_event`]).
pub fn required_events(profile: &Profile, capabilities: &Capabilities) -> Vec<&'static str> {
    profile
        .required
        .iter()
        .copied()
        .filter(|event| capabilities.allows_event(event))
        .collect()
}

/// Looks a profile up by name.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}
