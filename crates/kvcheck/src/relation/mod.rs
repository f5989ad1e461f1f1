//! Relations: checking a cache against itself, with no model (SPEC.md §9).
//!
//! A relation says that two runs must show a caller the same thing: a
//! trace, and the same trace transformed in a way the contract says cannot
//! change what a caller sees (a reset replaced by a fresh cache, a write
//! split by heads, a refused op removed, …). [`check`] runs a trace on a
//! subject, builds each relation's transformed plans from what that run
//! showed ([`transform`]), runs them on the same subject and compares the
//! corresponding steps ([`compare`]): outcomes (ok or refused, and the
//! kind when the subject gives SPEC.md kinds), global ends, visible
//! positions and view bytes. Corresponding writes carry identical payload
//! bytes ([`observe::Payload`]); writer ids are not compared.
//!
//! A disagreement is a [`Divergence`] of kind
//! [`DivergenceKind::Relation`] naming the relation; its trace is the
//! original one, tagged with the relation ([`crate::trace::OracleTag`]) so
//! that replaying it checks that relation again. [`differential`] is the
//! same comparison between two subjects on one plan.
//!
//! Each relation's precondition is checked on the original run as a
//! caller saw it; `tests/relations.rs` proves every relation on the
//! reference model over random traces.

pub mod compare;
pub mod observe;
pub mod transform;

use std::fmt;

use kvmodel::{Config, Op};
use serde::{Deserialize, Serialize};

use crate::divergence::{Divergence, DivergenceKind};
use crate::subject::SubjectSpec;
use crate::trace::{OracleTag, Trace};
use compare::{first_mismatch, Compared, Mismatch};
use observe::{observe, Plan, Transcript};
use transform::{instances, Instance};

/// Instances tried per relation and trace when neither the caller nor
/// `KVCHECK_RELATION_INSTANCES` says otherwise (the first and the last
/// candidate).
pub const DEFAULT_INSTANCES: usize = 2;

/// Instances per relation: `KVCHECK_RELATION_INSTANCES` if it parses to a
/// positive number, else [`DEFAULT_INSTANCES`].
pub fn instances_from_env() -> usize {
    std::env::var("KVCHECK_RELATION_INSTANCES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_INSTANCES)
}

/// A relation of SPEC.md §9 (see `docs/relations.md` for preconditions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Relation {
    /// M1: after `reset` the rest of the trace behaves as on a fresh cache
    /// with the current capacity and window.
    #[serde(rename = "M1")]
    ResetIsFresh,
    /// M2: a write of all heads equals two head-range writes `[0, h)` and
    /// `[h, H)` of the same rows.
    #[serde(rename = "M2")]
    HeadSplit,
    /// M3: changing the payload of one batch row changes no byte of the
    /// others.
    #[serde(rename = "M3")]
    BatchRowsIndependent,
    /// M4: changing the payload of one head changes no byte of the others.
    #[serde(rename = "M4")]
    HeadsIndependent,
    /// M5: a rewrite of the rows with the bytes they already hold changes
    /// nothing, and shows the view the first write showed.
    #[serde(rename = "M5")]
    RewriteIdempotent,
    /// M6: a zero-length write at the global end changes no other outcome.
    #[serde(rename = "M6")]
    ProbePure,
    /// M7: the same rows appended in other chunk sizes give the same view
    /// at every boundary both runs share.
    #[serde(rename = "M7")]
    ChunkingInvariant,
    /// M8: `write G+n` then `rewind G` changes nothing later.
    #[serde(rename = "M8")]
    AppendRewound,
    /// M9: removing a refused op changes no other outcome.
    #[serde(rename = "M9")]
    RefusalPure,
}

impl Relation {
    /// Every relation, in SPEC.md order.
    pub const ALL: [Relation; 9] = [
        Relation::ResetIsFresh,
        Relation::HeadSplit,
        Relation::BatchRowsIndependent,
        Relation::HeadsIndependent,
        Relation::RewriteIdempotent,
        Relation::ProbePure,
        Relation::ChunkingInvariant,
        Relation::AppendRewound,
        Relation::RefusalPure,
    ];

    /// `M1` … `M9`.
    pub fn id(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "M1",
            Relation::HeadSplit => "M2",
            Relation::BatchRowsIndependent => "M3",
            Relation::HeadsIndependent => "M4",
            Relation::RewriteIdempotent => "M5",
            Relation::ProbePure => "M6",
            Relation::ChunkingInvariant => "M7",
            Relation::AppendRewound => "M8",
            Relation::RefusalPure => "M9",
        }
    }

    /// A short name: `reset-is-fresh`, `refusal-pure`, …
    pub fn name(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "reset-is-fresh",
            Relation::HeadSplit => "head-split",
            Relation::BatchRowsIndependent => "batch-rows-independent",
            Relation::HeadsIndependent => "heads-independent",
            Relation::RewriteIdempotent => "rewrite-idempotent",
            Relation::ProbePure => "probe-pure",
            Relation::ChunkingInvariant => "chunking-invariant",
            Relation::AppendRewound => "append-rewound",
            Relation::RefusalPure => "refusal-pure",
        }
    }

    /// The divergence kind's name (`relation_m9`), used in file names.
    pub fn kind_name(self) -> &'static str {
        match self {
            Relation::ResetIsFresh => "relation_m1",
            Relation::HeadSplit => "relation_m2",
            Relation::BatchRowsIndependent => "relation_m3",
            Relation::HeadsIndependent => "relation_m4",
            Relation::RewriteIdempotent => "relation_m5",
            Relation::ProbePure => "relation_m6",
            Relation::ChunkingInvariant => "relation_m7",
            Relation::AppendRewound => "relation_m8",
            Relation::RefusalPure => "relation_m9",
        }
    }

    /// Parses `M9`, `m9` or `refusal-pure`.
    pub fn parse(text: &str) -> Option<Relation> {
        Relation::ALL
            .into_iter()
            .find(|r| r.id().eq_ignore_ascii_case(text) || r.name() == text)
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id(), self.name())
    }
}

/// Why a trace could not be checked at all (not a divergence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotChecked(pub String);

/// What [`check`] did, for callers that count work.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Runs of the subject (the original and every transformed one).
    pub runs: usize,
    /// Ops sent to the subject over all runs.
    pub ops: usize,
}

/// Runs `ops` on `subject`, then every instance of `relations` (at most
/// `limit` per relation), and returns the first relation failure as a
/// divergence. `work` counts the runs and ops spent.
pub fn check(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    relations: &[Relation],
    limit: usize,
    work: &mut Work,
) -> Result<Option<Box<Divergence>>, NotChecked> {
    let capabilities = subject
        .capabilities()
        .map_err(|f| NotChecked(f.to_string()))?;
    capabilities
        .supports_trace(config, ops)
        .map_err(|e| NotChecked(e.to_string()))?;
    let original = Plan::of(config, ops);
    let run = run_counted(subject, &original, work)?;
    let name = subject.name(config);
    if let Some(d) = misbehaviour(&original, &run, &name, None) {
        return Ok(Some(d));
    }
    let compared = Compared {
        values: capabilities.values,
        exact: subject.exact_kinds(),
    };
    for &relation in relations {
        for instance in instances(relation, &original, &run, &capabilities, limit) {
            let other = run_counted(subject, &instance.plan, work)?;
            let tag = OracleTag::relation(relation);
            if let Some(d) = misbehaviour(&original, &other, &name, Some((&instance, &tag))) {
                return Ok(Some(d));
            }
            let found = first_mismatch(config, &run, &other, &instance.pairs, compared);
            if let Some(mismatch) = found {
                return Ok(Some(divergence(
                    &original,
                    &mismatch,
                    DivergenceKind::Relation(relation),
                    &format!("{} ({})", instance.what, relation),
                    &name,
                    tag,
                )));
            }
        }
    }
    Ok(None)
}

/// Runs `ops` on `subject` and on `oracle` with the same payloads and
/// returns the first step where they differ, compared on what both can
/// express (values only when both return them, kinds only when both give
/// SPEC.md kinds).
pub fn differential(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    oracle: &SubjectSpec,
    work: &mut Work,
) -> Result<Option<Box<Divergence>>, NotChecked> {
    let mut compared = Compared {
        values: true,
        exact: true,
    };
    for side in [subject, oracle] {
        let capabilities = side.capabilities().map_err(|f| NotChecked(f.to_string()))?;
        capabilities
            .supports_trace(config, ops)
            .map_err(|e| NotChecked(format!("{}: {e}", side.name(config))))?;
        compared.values &= capabilities.values;
        compared.exact &= side.exact_kinds();
    }
    let plan = Plan::of(config, ops);
    let expected = run_counted(oracle, &plan, work)?;
    let actual = run_counted(subject, &plan, work)?;
    let name = format!("{} against {}", subject.name(config), oracle.name(config));
    let tag = OracleTag::subject(&oracle.to_string());
    for (run, side) in [(&expected, oracle), (&actual, subject)] {
        if let Some((kind, message)) = &run.failure {
            let step = run.seen.len().min(ops.len().saturating_sub(1));
            let mismatch = Mismatch {
                original: step,
                transformed: step,
                expected: "an answer".into(),
                actual: format!("{}: {message}", side.name(config)),
            };
            return Ok(Some(divergence(&plan, &mismatch, *kind, "", &name, tag)));
        }
    }
    let pairs: Vec<_> = (0..ops.len())
        .map(|i| transform::Pair {
            original: i,
            transformed: i,
            part: transform::Part::Whole,
        })
        .collect();
    Ok(
        first_mismatch(config, &expected, &actual, &pairs, compared).map(|mismatch| {
            let what = format!("on {}", subject.name(config));
            let mut d = divergence(
                &plan,
                &mismatch,
                DivergenceKind::Differential,
                &what,
                &name,
                tag,
            );
            d.expected = format!("{}: {}", oracle.name(config), mismatch.expected);
            d
        }),
    )
}

fn run_counted(
    subject: &SubjectSpec,
    plan: &Plan,
    work: &mut Work,
) -> Result<Transcript, NotChecked> {
    let run = observe(subject, plan).map_err(NotChecked)?;
    work.runs += 1;
    work.ops += run.seen.len() + usize::from(run.failure.is_some());
    Ok(run)
}

/// A run that ended in the subject's misbehaviour, as a divergence of that
/// kind (at the original step the failing step corresponds to).
fn misbehaviour(
    original: &Plan,
    run: &Transcript,
    subject: &str,
    instance: Option<(&Instance, &OracleTag)>,
) -> Option<Box<Divergence>> {
    let (kind, message) = run.failure.clone()?;
    let failed = run.seen.len();
    let step = match instance {
        None => failed,
        Some((instance, _)) => instance
            .pairs
            .iter()
            .filter(|p| p.transformed <= failed)
            .map(|p| p.original)
            .max()
            .unwrap_or(0),
    };
    let step = step.min(original.steps.len().saturating_sub(1));
    let (what, tag) = match instance {
        None => (String::new(), OracleTag::all_relations()),
        Some((instance, tag)) => (
            format!("{} ({})", instance.what, instance.relation),
            tag.clone(),
        ),
    };
    let mismatch = Mismatch {
        original: step,
        transformed: failed,
        expected: "an answer".into(),
        actual: message,
    };
    Some(divergence(original, &mismatch, kind, &what, subject, tag))
}

fn divergence(
    original: &Plan,
    mismatch: &Mismatch,
    kind: DivergenceKind,
    what: &str,
    subject: &str,
    tag: OracleTag,
) -> Box<Divergence> {
    let ops = original.ops();
    let mut trace = Trace::new(original.config.clone(), ops.clone());
    trace.oracle = Some(tag);
    let actual = if what.is_empty() {
        mismatch.actual.clone()
    } else {
        format!(
            "{what}, its op {}: {}",
            mismatch.transformed, mismatch.actual
        )
    };
    Box::new(Divergence {
        step: mismatch.original,
        op: ops[mismatch.original],
        kind,
        expected: format!("as the original run: {}", mismatch.expected),
        actual,
        rows: Vec::new(),
        trace,
        subject: subject.to_string(),
        saved: None,
    })
}
