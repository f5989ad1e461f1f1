//! Relations: checking a cache against itself, with no model (SPEC.md §9,
//! and M10 beyond it).
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
mod explain;
pub mod observe;
pub mod power;
pub mod transform;

use std::fmt;

use kvmodel::{Config, Op};
use serde::{Deserialize, Serialize};

use crate::divergence::{Divergence, DivergenceKind};
use crate::subject::{SubjectError, SubjectFailure, SubjectSpec, Unsupported};
use crate::trace::{OracleTag, Trace};
use compare::{first_mismatch, Compared, Mismatch};
pub use explain::render;
use observe::{observe, Plan, Transcript};
use transform::{instances, Pair, Part};

/// Instances tried per relation and trace when neither the caller nor
/// `KVCHECK_RELATION_INSTANCES` says otherwise (the first and the last
/// candidate).
pub const DEFAULT_INSTANCES: usize = 2;

/// Instances per relation: `KVCHECK_RELATION_INSTANCES` if it parses to a
/// positive number, else [`DEFAULT_INSTANCES`].
pub fn instances_from_env() -> usize {
    // Validated where the program starts (`crate::settings::check_env`).
    crate::settings::count("KVCHECK_RELATION_INSTANCES")
        .ok()
        .flatten()
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
    /// M10 (beyond SPEC.md §9): an append followed by a rewrite of exactly
    /// its rows equals the append carrying the rewrite's rows: the last
    /// write wins.
    #[serde(rename = "M10")]
    LastWriteWins,
}

impl Relation {
    /// Every relation, in SPEC.md order.
    pub const ALL: [Relation; 10] = [
        Relation::ResetIsFresh,
        Relation::HeadSplit,
        Relation::BatchRowsIndependent,
        Relation::HeadsIndependent,
        Relation::RewriteIdempotent,
        Relation::ProbePure,
        Relation::ChunkingInvariant,
        Relation::AppendRewound,
        Relation::RefusalPure,
        Relation::LastWriteWins,
    ];

    /// `M1` … `M10`.
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
            Relation::LastWriteWins => "M10",
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
            Relation::LastWriteWins => "last-write-wins",
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
            Relation::LastWriteWins => "relation_m10",
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
pub enum NotChecked {
    /// The trace needs a capability a subject lacks: a skip.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// A subject could not be asked, opened or run.
    #[error("{0}")]
    Setup(String),
}

/// Why [`observe::observe`] could not run a plan: the subject could not
/// say what it can express, or refused to open the plan's config. The
/// caller decides whether that is a failure or a skip.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Asking the subject for its capabilities failed (an `exec:` subject
    /// that did not start or did not say `hello`).
    #[error(transparent)]
    Capabilities(#[from] SubjectFailure),
    /// The subject refused to open the plan's config.
    #[error(transparent)]
    Open(#[from] kvcache::Error),
}

/// Why an oracle form does not parse
/// ([`Oracle::parse`](crate::oracle::Oracle::parse)), or a trace's
/// `oracle` field names no oracle
/// ([`Oracle::of_tag`](crate::oracle::Oracle::of_tag)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OracleError {
    /// `self:NAME` where `NAME` is no relation's id or name.
    #[error(
        "unknown relation {name:?}: expected one of {}",
        Relation::ALL.map(Relation::id).join(", ")
    )]
    UnknownRelation {
        /// The relation named.
        name: String,
    },
    /// Neither `model`, `self`, `self:RELATION` nor a subject form.
    #[error("not model, self, self:RELATION or a subject: {0}")]
    NotAnOracle(#[source] SubjectError),
    /// A trace's `oracle` field names a subject that does not parse.
    #[error(transparent)]
    TraceSubject(SubjectError),
}

/// `KVCHECK_ORACLE` holds something
/// [`Oracle::parse`](crate::oracle::Oracle::parse) refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("KVCHECK_ORACLE: {source}")]
pub struct OracleEnvError {
    /// Why the value does not parse.
    pub source: OracleError,
}

/// What [`check`] did, for callers that count work.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Runs of the subject (the original and every transformed one).
    pub runs: usize,
    /// Ops sent to the subject over all runs.
    pub ops: usize,
}

/// One side of a comparison: a plan and what its run showed.
#[derive(Clone, Debug)]
pub struct Side {
    /// `original run`, the transformation in words, or a subject's name.
    pub title: String,
    /// The plan run.
    pub plan: Plan,
    /// What it showed.
    pub run: Transcript,
}

/// A relation or differential failure with both runs, for explanations.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The failure as every engine reports it.
    pub divergence: Box<Divergence>,
    /// The reference side: the original run, or the oracle subject's.
    pub left: Side,
    /// The side checked against it: the transformed run, or the subject's.
    pub right: Side,
    /// Corresponding steps.
    pub pairs: Vec<Pair>,
    /// The first pair that differs (none when a run ended in misbehaviour).
    pub mismatch: Option<Mismatch>,
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
    Ok(find(config, ops, subject, relations, limit, work)?.map(|f| f.divergence))
}

/// [`check`] with both runs of the failure.
pub fn find(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    relations: &[Relation],
    limit: usize,
    work: &mut Work,
) -> Result<Option<Finding>, NotChecked> {
    let capabilities = subject
        .capabilities()
        .map_err(|f| NotChecked::Setup(f.to_string()))?;
    capabilities.supports_trace(config, ops)?;
    let original = Plan::of(config, ops);
    let run = run_counted(subject, &original, work)?;
    let name = subject.name(config);
    let left = Side {
        title: "original run".to_string(),
        plan: original.clone(),
        run: run.clone(),
    };
    if run.failure.is_some() {
        let identity = identity(ops.len());
        let tag = match relations {
            [one] => OracleTag::relation(*one),
            _ => OracleTag::all_relations(),
        };
        return Ok(Some(settle(left.clone(), left, identity, None, &name, tag)));
    }
    let compared = Compared {
        values: capabilities.values,
        exact: subject.exact_kinds(),
    };
    for &relation in relations {
        for instance in instances(relation, &original, &run, &capabilities, limit) {
            let other = run_counted(subject, &instance.plan, work)?;
            let mismatch = first_mismatch(config, &run, &other, &instance.pairs, compared);
            if mismatch.is_none() && other.failure.is_none() {
                continue;
            }
            let right = Side {
                title: format!("{} ({relation})", instance.what),
                plan: instance.plan,
                run: other,
            };
            let tag = OracleTag::relation(relation);
            let mut finding = settle(left, right, instance.pairs, mismatch, &name, tag);
            if finding.mismatch.is_some() {
                finding.divergence.kind = DivergenceKind::Relation(relation);
            }
            return Ok(Some(finding));
        }
    }
    Ok(None)
}

fn identity(n: usize) -> Vec<Pair> {
    (0..n)
        .map(|i| Pair {
            original: i,
            transformed: i,
            part: Part::Whole,
        })
        .collect()
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
    Ok(find_differential(config, ops, subject, oracle, work)?.map(|f| f.divergence))
}

/// [`differential`] with both runs of the failure.
pub fn find_differential(
    config: &Config,
    ops: &[Op],
    subject: &SubjectSpec,
    oracle: &SubjectSpec,
    work: &mut Work,
) -> Result<Option<Finding>, NotChecked> {
    let mut compared = Compared {
        values: true,
        exact: true,
    };
    for side in [subject, oracle] {
        let capabilities = side
            .capabilities()
            .map_err(|f| NotChecked::Setup(f.to_string()))?;
        capabilities
            .supports_trace(config, ops)
            .map_err(|e| Unsupported {
                what: format!("{} ({})", e.what, side.name(config)),
            })?;
        compared.values &= capabilities.values;
        compared.exact &= side.exact_kinds();
    }
    let plan = Plan::of(config, ops);
    let side = |spec: &SubjectSpec, work: &mut Work| -> Result<Side, NotChecked> {
        Ok(Side {
            title: spec.name(config),
            plan: plan.clone(),
            run: run_counted(spec, &plan, work)?,
        })
    };
    let left = side(oracle, work)?;
    let right = side(subject, work)?;
    let pairs = identity(ops.len());
    let mismatch = first_mismatch(config, &left.run, &right.run, &pairs, compared);
    if mismatch.is_none() && left.run.failure.is_none() && right.run.failure.is_none() {
        return Ok(None);
    }
    let name = format!("{} against {}", subject.name(config), oracle.name(config));
    let tag = OracleTag::subject(&oracle.to_string());
    let mut finding = settle(left, right, pairs, mismatch, &name, tag);
    if finding.mismatch.is_some() {
        finding.divergence.kind = DivergenceKind::Differential;
    }
    Ok(Some(finding))
}

fn run_counted(
    subject: &SubjectSpec,
    plan: &Plan,
    work: &mut Work,
) -> Result<Transcript, NotChecked> {
    let run = observe(subject, plan).map_err(|e| NotChecked::Setup(e.to_string()))?;
    work.runs += 1;
    work.ops += run.seen.len() + usize::from(run.failure.is_some());
    Ok(run)
}

/// The finding of two runs that part at `mismatch`, or of a run that
/// ended in misbehaviour (a divergence of that kind, at the original step
/// the failing step corresponds to). The divergence's kind is set by the
/// caller for a mismatch.
fn settle(
    left: Side,
    right: Side,
    pairs: Vec<Pair>,
    mismatch: Option<Mismatch>,
    subject: &str,
    tag: OracleTag,
) -> Finding {
    let ops = left.plan.ops();
    let mut trace = Trace::new(left.plan.config.clone(), ops.clone());
    trace.oracle = Some(tag);
    let failure = [&left, &right]
        .into_iter()
        .find_map(|side| side.run.failure.clone().map(|f| (side, f)));
    let (step, kind, expected, actual) = match (&mismatch, failure) {
        (Some(m), _) => (
            m.original,
            DivergenceKind::Differential,
            format!("{}: {}", left.title, m.expected),
            format!("{}, its op {}: {}", right.title, m.transformed, m.actual),
        ),
        (None, Some((side, (kind, message)))) => {
            let failed = side.run.seen.len();
            let step = pairs
                .iter()
                .filter(|p| p.transformed <= failed)
                .map(|p| p.original)
                .max()
                .unwrap_or(0);
            (
                step,
                kind,
                "an answer".to_string(),
                format!("{}, its op {failed}: {message}", side.title),
            )
        }
        (None, None) => (
            0,
            DivergenceKind::Differential,
            String::new(),
            String::new(),
        ),
    };
    let step = step.min(ops.len().saturating_sub(1));
    let divergence = Box::new(Divergence {
        step,
        op: ops[step],
        kind,
        expected,
        actual,
        rows: Vec::new(),
        trace,
        subject: subject.to_string(),
        saved: None,
    });
    Finding {
        divergence,
        left,
        right,
        pairs,
        mismatch,
    }
}
