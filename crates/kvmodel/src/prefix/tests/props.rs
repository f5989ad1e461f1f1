//! Properties of the model on random op sequences (docs/contract.md §12,
//! §13, §17): the model's own invariants after every op, the accounting,
//! refusals that change nothing, exact and bounded hits, reads that are
//! their own prefix's payload, no leak, and traces that survive a JSON
//! round trip. Cases: proptest's default (256), `PROPTEST_CASES` overrides.

use proptest::prelude::*;

use super::*;

fn configs() -> impl Strategy<Value = PrefixConfig> {
    (
        1usize..=16,
        1usize..=3,
        1usize..=2,
        1usize..=2,
        any::<bool>(),
        0u64..4,
        proptest::option::of((1usize..=8, any::<bool>())),
    )
        .prop_map(
            |(blocks, block_size, layers, row_width, whole, seed, window)| PrefixConfig {
                blocks,
                block_size,
                layers,
                row_width,
                hit: if whole {
                    HitRule::Whole
                } else {
                    HitRule::LeaveOne
                },
                seed,
                // A window over every layer or over the last one only.
                window: window.map(|(size, all)| Window {
                    size,
                    layers: if all {
                        (0..layers).collect()
                    } else {
                        vec![layers - 1]
                    },
                }),
            },
        )
}

/// A prompt: a prefix of one shared story and a short tail of its own,
/// so that prompts share blocks often and differ after them.
fn prompts(max_tail: usize) -> impl Strategy<Value = Vec<Token>> {
    const STORY: [Token; 6] = [0, 1, 2, 0, 2, 1];
    (
        0..=STORY.len(),
        proptest::collection::vec(0u32..3, 0..max_tail),
    )
        .prop_map(|(shared, tail)| STORY[..shared].iter().copied().chain(tail).collect())
}

/// Few request ids, so that ops meet the requests that exist; compute
/// counts large enough to finish a prompt in one or two steps.
fn ops() -> impl Strategy<Value = PrefixOp> {
    let request = 0u32..4;
    prop_oneof![
        4 => (request.clone(), prompts(3)).prop_map(|(request, tokens)| PrefixOp::Start { request, tokens }),
        5 => (request.clone(), -1i64..8).prop_map(|(request, count)| PrefixOp::Compute { request, count }),
        2 => (request.clone(), proptest::collection::vec(0u32..3, 0..4)).prop_map(|(request, tokens)| PrefixOp::Extend { request, tokens }),
        3 => (request.clone(), request.clone()).prop_map(|(request, into)| PrefixOp::Fork { request, into }),
        2 => (request.clone(), -1i64..4).prop_map(|(request, count)| PrefixOp::Rollback { request, count }),
        3 => request.clone().prop_map(|request| PrefixOp::Finish { request }),
        1 => request.clone().prop_map(|request| PrefixOp::Preempt { request }),
        1 => request.clone().prop_map(|request| PrefixOp::Resume { request }),
        1 => request.prop_map(|request| PrefixOp::Read { request }),
        1 => (-1i64..4).prop_map(|blocks| PrefixOp::Evict { blocks }),
        1 => Just(PrefixOp::Clear),
    ]
}

/// Sequences of up to `max` ops after a prologue that starts requests 0, 1
/// and 2 (and leaves id 3 for starts and forks), so that most ops meet a
/// request.
fn sequences(max: usize) -> impl Strategy<Value = Vec<PrefixOp>> {
    (
        proptest::collection::vec(prompts(3), 3),
        proptest::collection::vec(ops(), 0..max),
    )
        .prop_map(|(prompts, ops)| {
            let prologue = prompts
                .into_iter()
                .zip(0..)
                .map(|(tokens, request)| PrefixOp::Start { request, tokens });
            prologue.chain(ops).collect()
        })
}

/// The hit §13 defines, computed from `is_stored` alone: the largest
/// multiple of `B` within the cap all of whose blocks are stored.
fn defined_hit(model: &PrefixModel, tokens: &[Token]) -> usize {
    let b = model.config().block_size;
    let cap = model.config().hit.cap(tokens.len());
    (0..=cap / b)
        .rev()
        .find(|&k| (1..=k).all(|i| model.is_stored(&tokens[..i * b])))
        .unwrap_or(0)
        * b
}

/// Checks one applied op against the state before it.
fn check_step(
    before: &PrefixModel,
    after: &PrefixModel,
    op: &PrefixOp,
    outcome: &PrefixOutcome,
) -> Result<(), TestCaseError> {
    let n = before.config().blocks as u64;
    after.audit().map_err(TestCaseError::fail)?;
    let counts = after.counts();
    prop_assert_eq!(counts.in_use + counts.cached + counts.free, n);
    let effect = match outcome {
        PrefixOutcome::Err(kind) => {
            prop_assert_eq!(
                before,
                after,
                "{} was refused ({}) but changed the model",
                op,
                kind
            );
            return Ok(());
        }
        PrefixOutcome::Ok(effect) => effect,
    };
    prop_assert_eq!(effect.block_counts(), counts);
    // A block a running request references is never evicted: every full
    // computed block of every running request is still stored.
    let b = after.config().block_size;
    for (id, r) in after.requests().filter(|(_, r)| !r.is_preempted()) {
        for j in 0..r.computed() / b {
            prop_assert!(
                after.is_stored(&r.tokens()[..(j + 1) * b]),
                "r{} lost block {}",
                id,
                j
            );
        }
    }
    let prompt = match op {
        PrefixOp::Start { tokens, .. } => Some(tokens.clone()),
        PrefixOp::Resume { request } => before.request(*request).map(|r| r.tokens().to_vec()),
        _ => None,
    };
    if let Some(tokens) = prompt {
        let hit = effect.hit.expect("start and resume report a hit") as usize;
        prop_assert_eq!(hit % b, 0);
        prop_assert!(hit <= before.config().hit.cap(tokens.len()));
        prop_assert!(hit <= before.longest_stored_prefix(&tokens));
        prop_assert_eq!(hit, defined_hit(before, &tokens));
    }
    if let PrefixOp::Read { request } = op {
        let r = after.request(*request).expect("read a running request");
        prop_assert_eq!(effect.read, Some(r.computed() as u64));
        let rows = after.expected_rows(*request).expect("running");
        prop_assert_eq!(
            check_rows(
                after.config(),
                &r.tokens()[..r.computed()],
                after.window_start(*request).expect("running"),
                &rows
            ),
            Ok(())
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_op_keeps_the_invariants_and_every_refusal_changes_nothing(
        config in configs(),
        ops in sequences(40),
    ) {
        let mut model = PrefixModel::new(&config).unwrap();
        for (i, op) in ops.iter().enumerate() {
            let before = model.clone();
            let outcome: PrefixOutcome = model.apply(i as u64, op).into();
            check_step(&before, &model, op, &outcome)?;
        }
    }

    #[test]
    fn finishing_every_request_and_clearing_leaves_every_block_free(
        config in configs(),
        ops in sequences(40),
    ) {
        let (mut model, _) = run(&config, &ops);
        let ids: Vec<RequestId> = model.requests().map(|(id, _)| id).collect();
        let mut index = ops.len() as u64;
        for id in ids {
            model.apply(index, &PrefixOp::Finish { request: id }).unwrap();
            index += 1;
        }
        let effect = model.apply(index, &PrefixOp::Clear).unwrap();
        prop_assert_eq!(counts(&effect), (0, 0, config.blocks as u64));
    }

    #[test]
    fn a_prompt_computed_and_finished_is_hit_up_to_the_cap(
        config in configs(),
        tokens in proptest::collection::vec(0u32..3, 1..12),
    ) {
        // A pool large enough that nothing is evicted on the way.
        let config = PrefixConfig { blocks: 16, ..config };
        let mut ops = cached_prompt(0, &tokens).to_vec();
        ops.push(start(1, &tokens));
        let effect = last_ok(&config, &ops);
        let b = config.block_size;
        prop_assert_eq!(effect.hit, Some((config.hit.cap(tokens.len()) / b * b) as u64));
    }

    #[test]
    fn traces_survive_a_json_round_trip_and_replay_on_the_model(
        config in configs(),
        ops in sequences(30),
    ) {
        let trace = PrefixTrace::new(config, ops).with_model_outcomes().unwrap();
        let text = serde_json::to_string_pretty(&trace).unwrap();
        let back: PrefixTrace = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &trace);
        prop_assert_eq!(back.check_on_model(), Ok(()));
    }

    #[test]
    fn check_rows_catches_any_changed_value(
        config in configs(),
        tokens in proptest::collection::vec(0u32..3, 1..8),
        pick in any::<proptest::sample::Index>(),
        bump in 1u32..(1 << 16),
    ) {
        let mut rows = payload_rows(&config, &tokens);
        let at = pick.index(rows.len());
        rows[at] = f32::from_bits(rows[at].to_bits() ^ bump);
        prop_assert!(check_rows(&config, &tokens, 0, &rows).is_err());
    }

    #[test]
    fn the_canonical_state_answers_every_continuation_alike(
        config in configs(),
        ops in sequences(40),
        split in any::<proptest::sample::Index>(),
    ) {
        // An explorer may continue from the canonical form of a state in
        // place of the state itself only if no later outcome tells them
        // apart.
        let k = split.index(ops.len() + 1);
        let mut model = PrefixModel::new(&config).unwrap();
        for (i, op) in ops[..k].iter().enumerate() {
            let _ = model.apply(i as u64, op);
        }
        let mut canonical = model.canonical();
        prop_assert_eq!(canonical.canonical(), canonical.clone());
        for (i, op) in ops.iter().enumerate().skip(k) {
            let a: PrefixOutcome = model.apply(i as u64, op).into();
            let b: PrefixOutcome = canonical.apply(i as u64, op).into();
            prop_assert_eq!(a, b, "op {} ({}) after the split at {}", i, op, k);
            prop_assert_eq!(model.canonical(), canonical.canonical());
            for id in 0..4 {
                prop_assert_eq!(model.expected_rows(id), canonical.expected_rows(id));
            }
        }
    }
}
