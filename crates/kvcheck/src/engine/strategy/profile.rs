//! The profiles: named families of configurations a suite or campaign
//! draws from, each with the events it must reach, and which of them a
//! subject's capabilities allow.

use std::sync::Arc;

use kvmodel::{Config, Dtype, Op, PackedPolicy, Quant};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use crate::subject::{Capabilities, Unsupported};

use super::ops::*;

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
    /// Labelled events (see [`crate::check::coverage::EVENTS`]) it must reach.
    pub required: &'static [&'static str],
    /// The ops it draws from a state ([`ops`] for every profile but
    /// `pipeline`).
    pub ops: fn(&RefState) -> BoxedStrategy<Op>,
}

pub(super) fn dtypes() -> BoxedStrategy<Dtype> {
    prop_oneof![Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::Bf16)].boxed()
}

pub(super) fn tiny() -> BoxedStrategy<Config> {
    (1..=6usize, 0..=3usize, 1..=3usize)
        .prop_map(|(capacity, sink, head_dim)| Config {
            sink: sink.min(capacity - 1),
            head_dim,
            ..Config::dense(capacity)
        })
        .boxed()
}

pub(super) fn sinks() -> BoxedStrategy<Config> {
    (4..=12usize, 1..=3usize)
        .prop_map(|(capacity, sink)| Config {
            sink,
            head_dim: 2,
            ..Config::dense(capacity)
        })
        .boxed()
}

pub(super) fn window() -> BoxedStrategy<Config> {
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

pub(super) fn pins() -> BoxedStrategy<Config> {
    (4..=12usize, 1..=3usize, any::<bool>())
        .prop_map(|(capacity, sink, global)| Config {
            sink,
            global_sink: if global { sink } else { 0 },
            head_dim: 2,
            ..Config::dense(capacity)
        })
        .boxed()
}

pub(super) fn growth() -> BoxedStrategy<Config> {
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

pub(super) fn multi_head() -> BoxedStrategy<Config> {
    (2..=8usize, 0..=2usize, 2..=4usize, 1..=4usize)
        .prop_map(|(capacity, sink, heads, head_dim)| Config {
            sink: sink.min(capacity - 1),
            heads,
            head_dim,
            ..Config::dense(capacity)
        })
        .boxed()
}

pub(super) fn batch_two() -> BoxedStrategy<Config> {
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

pub(super) fn half_precision() -> BoxedStrategy<Config> {
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

/// The geometry of autoregressive video generation: a sink of whole
/// chunks (or none), a window of 2-4 chunks of 1-3 frames, and a shot sink
/// (`global_sink = sink`) for scene cuts.
pub(super) fn pipeline() -> BoxedStrategy<Config> {
    (1..=3usize, 2..=4usize, 0..=1usize, any::<bool>())
        .prop_map(|(chunk, blocks, sink_chunks, shot)| {
            let sink = chunk * sink_chunks;
            Config {
                sink,
                global_sink: if shot { sink } else { 0 },
                head_dim: 2,
                ..Config::dense(sink + chunk * blocks)
            }
        })
        .boxed()
}

/// An LLM's cache: a few heads, a sink of 0-2 tokens (attention sinks),
/// sometimes a sliding window, sometimes growth in place of eviction.
pub(super) fn decode() -> BoxedStrategy<Config> {
    (2..=10usize, 0..=2usize, 1..=2usize, 0..4u8)
        .prop_map(|(capacity, sink, heads, shape)| {
            let sink = sink.min(capacity - 1);
            Config {
                sink,
                heads,
                head_dim: 2,
                window: (shape == 1 && capacity > sink + 1).then_some(capacity - 1),
                growth: shape == 2,
                ..Config::dense(capacity)
            }
        })
        .boxed()
}

pub(super) fn packed() -> BoxedStrategy<Config> {
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
pub(super) const DENSE_CORE: &[&str] = &[
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
        ops,
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
        ops,
        required: DENSE_CORE,
    },
    Profile {
        name: "window",
        about: "window below capacity, recent windows",
        configs: window,
        ops,
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
        ops,
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
        ops,
        required: &["append", "growth", "reset"],
    },
    Profile {
        name: "multi-head",
        about: "2-4 heads with head-range writes",
        configs: multi_head,
        ops,
        required: &["append", "eviction", "head_range_write", "error:head_range"],
    },
    Profile {
        name: "batch2",
        about: "batch of two",
        configs: batch_two,
        ops,
        required: DENSE_CORE,
    },
    Profile {
        name: "half",
        about: "f32, f16 and bf16 buffers",
        configs: half_precision,
        ops,
        required: DENSE_CORE,
    },
    Profile {
        name: "packed",
        about: "packed cache: denoise pattern, keep 0-3, pack_sink, none/int8/int4",
        configs: packed,
        ops,
        required: &[
            "append",
            "eviction",
            "tail_rewrite",
            "cold_chunk",
            "partly_evicted_chunk",
            "error:unsupported",
        ],
    },
    Profile {
        name: "pipeline",
        about: "the chunk loop of video generation: append, denoise rewrites, next chunk, scene cuts, reset",
        configs: pipeline,
        ops: pipeline_ops,
        required: &["append", "eviction", "tail_rewrite", "pin", "reset"],
    },
    Profile {
        name: "decode",
        about: "an LLM's decoding: one prefill of any length (at and past capacity too), then single-token steps, a reset between conversations",
        configs: decode,
        ops: decode_ops,
        required: &["append", "eviction", "reset", "error:chunk_too_large"],
    },
];

/// Configurations of `profile` drawn sampled at most to decide whether a
/// subject supports any of them.
pub(super) const PROFILE_SAMPLES: usize = 256;

/// `config` in each trim mode `capabilities` open that the contract allows
/// for it (docs/contract.md §1: `after_read` needs the dense variant
/// without growth), the profile's own mode first. A profile draws its
/// configurations in the default mode; a subject that opens `after_read`
/// gets them in that mode as well, so that every profile that fits a
/// cache trimming after the read is drawn for it.
pub fn with_trims(config: &Config, capabilities: &Capabilities) -> Vec<Config> {
    let mut out = Vec::new();
    for &trim in &capabilities.trims {
        let candidate = Config {
            trim,
            ..config.clone()
        };
        if !out.contains(&candidate) && candidate.validate().is_ok() {
            out.push(candidate);
        }
    }
    if out.is_empty() {
        // Nothing the subject opens: keep the profile's config, which the
        // capability filter then rejects with its reason.
        out.push(config.clone());
    }
    out
}

/// `Ok` when `capabilities` allow some configuration of `profile` (judged
/// on a fixed sample of its configurations, in every trim mode the
/// subject opens); otherwise why not.
pub fn profile_support(profile: &Profile, capabilities: &Capabilities) -> Result<(), Unsupported> {
    use proptest::strategy::ValueTree as _;
    let mut runner = TestRunner::deterministic();
    let configs = (profile.configs)();
    // The distinct reasons, a few of them: a profile of sinks and growth
    // may be shut out by both declarations, and naming only the first
    // would hide the second.
    let mut reasons: Vec<String> = Vec::new();
    for _ in 0..PROFILE_SAMPLES {
        let Ok(tree) = configs.new_tree(&mut runner) else {
            break;
        };
        for config in with_trims(&tree.current(), capabilities) {
            match capabilities.supports_config(&config) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if reasons.len() < 3 && !reasons.contains(&e.what) {
                        reasons.push(e.what);
                    }
                }
            }
        }
    }
    Err(Unsupported {
        what: format!(
            "profile {} ({}): {}",
            profile.name,
            profile.about,
            if reasons.is_empty() {
                "no configuration drawn".to_string()
            } else {
                reasons.join("; ")
            }
        ),
    })
}

/// The configurations of `profile` that `capabilities` allow (check
/// [`profile_support`] first: a profile with none rejects every draw),
/// each in one of the trim modes the subject opens ([`with_trims`]).
pub fn profile_configs(
    profile: &Profile,
    capabilities: Arc<Capabilities>,
) -> BoxedStrategy<Config> {
    if capabilities.is_full() {
        return (profile.configs)();
    }
    let trims = Arc::clone(&capabilities);
    (profile.configs)()
        .prop_flat_map(move |config| proptest::sample::select(with_trims(&config, &trims)))
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
