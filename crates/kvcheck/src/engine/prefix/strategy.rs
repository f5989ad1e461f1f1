//! Random prefix cases for the property suites and campaigns: configs a
//! subject opens and op sequences of the ops it implements, built so that
//! prompts share whole blocks often (a shared story, cut anywhere) and
//! most ops meet a request that exists.

use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};

use kvmodel::prefix::{HitRule, PrefixConfig, PrefixOp, Token, Window};

use crate::subject::prefix::{PrefixCapabilities, WindowCaps};

/// Request ids drawn: few, so that ops meet the requests that exist; the
/// prologue starts the first three.
const REQUESTS: u32 = 5;

/// The configs `caps` opens: up to 16 blocks of up to 3 slots (or the
/// declared sizes), one or two layers of rows of one or two elements, and
/// for a subject that opens only windowed configs a window of its sizes
/// (or of 1 to `3B + 2` keys) over its layers (docs/contract.md §19). A
/// subject that opens any window is drawn none here: the windowed suites
/// draw them ([`windowed_configs`]).
pub fn configs(caps: &PrefixCapabilities) -> BoxedStrategy<PrefixConfig> {
    let sizes: Vec<usize> = caps.block_sizes.clone().unwrap_or_else(|| vec![1, 2, 3]);
    let hits: Vec<HitRule> = caps.hit.clone();
    let base = (
        1usize..=16,
        proptest::sample::select(sizes),
        1usize..=2,
        1usize..=2,
        proptest::sample::select(hits),
        0u64..4,
    )
        .prop_map(
            |(blocks, block_size, layers, row_width, hit, seed)| PrefixConfig {
                blocks,
                block_size,
                layers,
                row_width,
                hit,
                seed,
                window: None,
            },
        );
    match &caps.window {
        WindowCaps::None | WindowCaps::Any => base.boxed(),
        WindowCaps::Fixed { sizes, layers } => {
            let (sizes, layers) = (sizes.clone(), layers.clone());
            base.prop_flat_map(move |config| with_window(config, sizes.clone(), layers.clone()))
                .boxed()
        }
    }
}

/// [`configs`] with a window on every config, of `sizes` (`None`: 1 to
/// `3B + 2` keys), over every layer or over the last one only (full and
/// windowed layers side by side when there are two): for a subject that
/// opens any window, as the shipped paged cache does.
pub fn windowed_configs(
    caps: &PrefixCapabilities,
    sizes: Option<Vec<usize>>,
) -> BoxedStrategy<PrefixConfig> {
    configs(caps)
        .prop_flat_map(move |config| {
            let layers = config.layers;
            // Every layer, or the last one only (a hybrid of full and
            // windowed layers when there are two).
            let chosen = proptest::sample::select(vec![None, Some(vec![layers - 1])]);
            let sizes = sizes.clone();
            chosen.prop_flat_map(move |l| with_window(config.clone(), sizes.clone(), l))
        })
        .boxed()
}

fn with_window(
    config: PrefixConfig,
    sizes: Option<Vec<usize>>,
    layers: Option<Vec<usize>>,
) -> BoxedStrategy<PrefixConfig> {
    let size = match sizes {
        Some(sizes) => proptest::sample::select(sizes).boxed(),
        None => (1..=3 * config.block_size + 2).boxed(),
    };
    size.prop_map(move |size| {
        let mut config = config.clone();
        let chosen = match &layers {
            Some(l) => {
                let mut l = l.clone();
                l.sort_unstable();
                l.dedup();
                config.layers = config.layers.max(l.last().map_or(0, |m| m + 1));
                l
            }
            None => (0..config.layers).collect(),
        };
        config.window = Some(Window {
            size,
            layers: chosen,
        });
        config
    })
    .boxed()
}

/// A prompt: a cut of one shared story of three blocks and a short tail
/// of its own, so that prompts share blocks often and differ after them.
pub fn prompts(block_size: usize) -> BoxedStrategy<Vec<Token>> {
    let story: Vec<Token> = (0..3 * block_size as u32 + 1).map(|i| i % 3).collect();
    (
        0..=story.len(),
        proptest::collection::vec(0u32..3, 0..block_size + 2),
    )
        .prop_map(move |(shared, tail)| story[..shared].iter().copied().chain(tail).collect())
        .boxed()
}

/// One op of those `caps` implements; a few with negative counts or ids
/// that do not exist, which the contract refuses.
pub fn ops(caps: &PrefixCapabilities, block_size: usize) -> BoxedStrategy<PrefixOp> {
    let request = 0u32..REQUESTS;
    let most = 2 * block_size as i64 + 2;
    let short = proptest::collection::vec(0u32..3, 0..block_size + 2);
    let choices: Vec<(u32, &str, BoxedStrategy<PrefixOp>)> = vec![
        (
            4,
            "start",
            (request.clone(), prompts(block_size))
                .prop_map(|(request, tokens)| PrefixOp::Start { request, tokens })
                .boxed(),
        ),
        (
            5,
            "compute",
            (request.clone(), -1..=most)
                .prop_map(|(request, count)| PrefixOp::Compute { request, count })
                .boxed(),
        ),
        (
            3,
            "extend",
            (request.clone(), short)
                .prop_map(|(request, tokens)| PrefixOp::Extend { request, tokens })
                .boxed(),
        ),
        (
            2,
            "fork",
            (request.clone(), request.clone())
                .prop_map(|(request, into)| PrefixOp::Fork { request, into })
                .boxed(),
        ),
        (
            2,
            "rollback",
            (request.clone(), -1..=most)
                .prop_map(|(request, count)| PrefixOp::Rollback { request, count })
                .boxed(),
        ),
        (
            3,
            "finish",
            request
                .clone()
                .prop_map(|request| PrefixOp::Finish { request })
                .boxed(),
        ),
        (
            1,
            "preempt",
            request
                .clone()
                .prop_map(|request| PrefixOp::Preempt { request })
                .boxed(),
        ),
        (
            2,
            "resume",
            request
                .clone()
                .prop_map(|request| PrefixOp::Resume { request })
                .boxed(),
        ),
        (
            1,
            "read",
            request
                .prop_map(|request| PrefixOp::Read { request })
                .boxed(),
        ),
        (
            1,
            "evict",
            (-1i64..4)
                .prop_map(|blocks| PrefixOp::Evict { blocks })
                .boxed(),
        ),
        (1, "clear", Just(PrefixOp::Clear).boxed()),
    ];
    let allowed: Vec<(u32, BoxedStrategy<PrefixOp>)> = choices
        .into_iter()
        .filter(|(_, name, _)| caps.has_op(name))
        .map(|(weight, _, strategy)| (weight, strategy))
        .collect();
    Union::new_weighted(allowed).boxed()
}

/// A case: a config, then up to `max_ops` ops after a prologue that starts
/// requests 0, 1 and 2.
pub fn cases(
    caps: &PrefixCapabilities,
    max_ops: usize,
) -> BoxedStrategy<(PrefixConfig, Vec<PrefixOp>)> {
    cases_of(configs(caps), caps, max_ops)
}

/// [`cases`] on [`windowed_configs`]: every config carries a window.
pub fn windowed_cases(
    caps: &PrefixCapabilities,
    max_ops: usize,
) -> BoxedStrategy<(PrefixConfig, Vec<PrefixOp>)> {
    cases_of(windowed_configs(caps, None), caps, max_ops)
}

fn cases_of(
    configs: BoxedStrategy<PrefixConfig>,
    caps: &PrefixCapabilities,
    max_ops: usize,
) -> BoxedStrategy<(PrefixConfig, Vec<PrefixOp>)> {
    let caps = caps.clone();
    configs
        .prop_flat_map(move |config| {
            let b = config.block_size;
            (
                Just(config),
                proptest::collection::vec(prompts(b), 3),
                proptest::collection::vec(ops(&caps, b), 0..=max_ops),
            )
        })
        .prop_map(|(config, prompts, ops)| {
            let prologue = prompts
                .into_iter()
                .zip(0..)
                .filter(|(tokens, _)| !tokens.is_empty())
                .map(|(tokens, request)| PrefixOp::Start { request, tokens });
            (config, prologue.chain(ops).collect())
        })
        .boxed()
}
