//! Tests of the prefix-cache model: one per op and per error kind
//! (`ops`, `errors`), the payload rule (`payload`), the trace format and
//! its documented example (`trace`), and properties of the model on random
//! op sequences (`props`).

use super::*;

mod errors;
mod ops;
mod payload;
mod props;
mod trace;
mod window;

/// Applies `ops` to a fresh model of `config`, op `i` with index `i`.
fn run(config: &PrefixConfig, ops: &[PrefixOp]) -> (PrefixModel, Vec<PrefixOutcome>) {
    let mut model = PrefixModel::new(config).expect("valid config");
    let outcomes = ops
        .iter()
        .enumerate()
        .map(|(i, op)| model.apply(i as u64, op).into())
        .collect();
    (model, outcomes)
}

/// The effect of the last op, which must have succeeded.
fn last_ok(config: &PrefixConfig, ops: &[PrefixOp]) -> PrefixEffect {
    match run(config, ops).1.pop() {
        Some(PrefixOutcome::Ok(effect)) => effect,
        other => panic!("expected the last op to succeed, got {other:?}"),
    }
}

/// The kind the last op was refused with; every earlier op must succeed,
/// and the refusal must leave the model exactly as it was.
fn last_err(config: &PrefixConfig, ops: &[PrefixOp]) -> PrefixErrorKind {
    let (before, outcomes) = run(config, &ops[..ops.len() - 1]);
    for (i, outcome) in outcomes.iter().enumerate() {
        assert!(
            outcome.error_kind().is_none(),
            "op {i} ({}) was refused: {outcome}",
            ops[i]
        );
    }
    let mut after = before.clone();
    let last = ops.last().expect("at least one op");
    let error = after
        .apply(ops.len() as u64 - 1, last)
        .expect_err("the last op must be refused");
    assert_eq!(
        after, before,
        "{last} was refused ({error}) but changed the model"
    );
    assert!(
        error.to_string().starts_with(error.kind().name()),
        "{error}"
    );
    error.kind()
}

/// `(in_use, cached, free)` of an effect.
fn counts(effect: &PrefixEffect) -> (u64, u64, u64) {
    (effect.in_use, effect.cached, effect.free)
}

fn start(request: RequestId, tokens: &[Token]) -> PrefixOp {
    PrefixOp::Start {
        request,
        tokens: tokens.to_vec(),
    }
}

fn compute(request: RequestId, count: i64) -> PrefixOp {
    PrefixOp::Compute { request, count }
}

fn extend(request: RequestId, tokens: &[Token]) -> PrefixOp {
    PrefixOp::Extend {
        request,
        tokens: tokens.to_vec(),
    }
}

fn fork(request: RequestId, into: RequestId) -> PrefixOp {
    PrefixOp::Fork { request, into }
}

fn rollback(request: RequestId, count: i64) -> PrefixOp {
    PrefixOp::Rollback { request, count }
}

fn finish(request: RequestId) -> PrefixOp {
    PrefixOp::Finish { request }
}

fn preempt(request: RequestId) -> PrefixOp {
    PrefixOp::Preempt { request }
}

fn resume(request: RequestId) -> PrefixOp {
    PrefixOp::Resume { request }
}

fn read(request: RequestId) -> PrefixOp {
    PrefixOp::Read { request }
}

fn evict(blocks: i64) -> PrefixOp {
    PrefixOp::Evict { blocks }
}

/// A prompt computed whole and finished: its full blocks end up cached.
fn cached_prompt(request: RequestId, tokens: &[Token]) -> [PrefixOp; 3] {
    [
        start(request, tokens),
        compute(request, tokens.len() as i64),
        finish(request),
    ]
}
