//! Replaying traces: through the model (checking `expect`) and through a
//! cache in lockstep with the model.

use std::path::{Path, PathBuf};

use kvmodel::{Model, Op, Outcome};
use serde::Serialize;

use crate::check::divergence::{describe_outcome, Divergence};
use crate::check::lockstep::Cut;
use crate::check::trace::Trace;
use crate::engine::oracle::Oracle;
use crate::engine::oracle::{NotChecked, Work};
use crate::subject::SubjectSpec;

/// The first step whose model outcome differs from the trace's `expect`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExpectMismatch {
    /// Op index.
    pub step: usize,
    /// What `expect` says.
    pub expected: Outcome,
    /// What the model gives.
    pub actual: Outcome,
}

/// One replayed step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepRow {
    /// The op.
    pub op: Op,
    /// The model's outcome.
    pub outcome: Outcome,
}

/// The result of replaying one trace.
#[derive(Debug)]
pub struct ReplayReport {
    /// The file, when replayed from one.
    pub path: Option<PathBuf>,
    /// Every step with the model's outcome.
    pub steps: Vec<StepRow>,
    /// The first disagreement between the model and `expect`.
    pub expect_mismatch: Option<ExpectMismatch>,
    /// The subject checked in lockstep (`None` for model-only replays).
    pub subject: Option<String>,
    /// The subject's first divergence from the model.
    pub divergence: Option<Box<Divergence>>,
    /// The subject could not be built for this config.
    pub setup_error: Option<String>,
    /// The trace needs a capability the subject lacks (`unsupported by the
    /// subject: …`): it was not run on the subject, which is neither a pass
    /// nor a divergence.
    pub skipped: Option<String>,
    /// Where the trace left the subject's domain: the op the subject
    /// answered *outside* (or its declared domain leaves out) and why.
    /// Nothing from that op on was judged; what came before passed.
    pub outside: Option<Cut>,
}

impl ReplayReport {
    /// Whether the model matched `expect` and the subject matched the model.
    pub fn passed(&self) -> bool {
        self.expect_mismatch.is_none() && self.divergence.is_none() && self.setup_error.is_none()
    }

    /// The compact step table: op, outcome with visible positions as ranges.
    pub fn table(&self) -> String {
        let mut out = format!("{:>5}  {:<28} outcome\n", "step", "op");
        for (i, row) in self.steps.iter().enumerate() {
            let mark = match &self.expect_mismatch {
                Some(m) if m.step == i => " ✗ expect",
                _ => match &self.divergence {
                    Some(d) if d.step == i => " ✗ cache",
                    _ => "",
                },
            };
            out.push_str(&format!(
                "{i:>5}  {:<28} {}{mark}\n",
                row.op.to_string(),
                describe_outcome(&row.outcome)
            ));
        }
        out
    }

    /// The failure in words, or `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        if let Some(m) = &self.expect_mismatch {
            return Some(
                format!(
                    "step {} ({}): expect says {}, the model gives {}",
                    m.step,
                    self.steps[m.step].op,
                    describe_outcome(&m.expected),
                    describe_outcome(&m.actual)
                ) + &writers_note(&m.expected, &m.actual),
            );
        }
        if let Some(e) = &self.setup_error {
            return Some(e.clone());
        }
        self.divergence.as_ref().map(|d| d.to_string())
    }

    /// Where the trace left the subject's domain, in words: a replay that
    /// passed judged only the ops before it.
    pub fn outside_note(&self) -> Option<String> {
        self.outside.as_ref().map(|cut| {
            let how = if cut.answered {
                "the subject answered outside its domain"
            } else {
                "its declared domain leaves it out"
            };
            format!(
                "the trace leaves the subject's domain at step {} ({}): {how} ({}); only the {} ops before it were judged",
                cut.step, cut.op, cut.reason, cut.step
            )
        })
    }
}

fn writers_note(expected: &Outcome, actual: &Outcome) -> String {
    match (expected, actual) {
        (Outcome::Ok(e), Outcome::Ok(a)) if e.visible == a.visible && e.writers != a.writers => {
            format!(
                " (writers differ: expect {:?}, model {:?})",
                e.writers, a.writers
            )
        }
        _ => String::new(),
    }
}

/// Replays `trace` through the model, checks `expect` when present, and
/// then, unless `subject` is `None`, runs `subject` in lockstep with the
/// model (or against the oracle the trace names). A divergence is saved
/// under `failures` when given.
pub fn replay(
    trace: &Trace,
    path: Option<&Path>,
    subject: Option<SubjectSpec>,
    failures: Option<&Path>,
) -> ReplayReport {
    replay_with(trace, path, subject, failures, &Oracle::model())
}

/// [`replay`] against `oracle`: the model's lockstep driver, or, for
/// another oracle (chosen here, or named by the trace when `oracle` is the
/// model, see [`Oracle::for_trace`]), the subject checked whole against
/// it. `expect` is checked against the model either way.
pub fn replay_with(
    trace: &Trace,
    path: Option<&Path>,
    subject: Option<SubjectSpec>,
    failures: Option<&Path>,
    oracle: &Oracle,
) -> ReplayReport {
    // A trace built through the API (not loaded) may carry a config that
    // breaks docs/contract.md §1: that is a setup error naming the field, not a
    // panic.
    let mut model = match Model::new(&trace.config) {
        Ok(model) => model,
        Err(e) => {
            return ReplayReport {
                path: path.map(Path::to_path_buf),
                steps: Vec::new(),
                expect_mismatch: None,
                subject: None,
                divergence: None,
                setup_error: Some(format!("config.{e}")),
                skipped: None,
                outside: None,
            }
        }
    };
    let steps: Vec<StepRow> = trace
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| StepRow {
            op: *op,
            outcome: model.apply(i as u64, op).into(),
        })
        .collect();
    let expect_mismatch = trace.expect.as_ref().and_then(|expect| {
        expect
            .iter()
            .zip(&steps)
            .enumerate()
            .find_map(|(step, (expected, row))| {
                (expected != &row.outcome).then(|| ExpectMismatch {
                    step,
                    expected: expected.clone(),
                    actual: row.outcome.clone(),
                })
            })
    });
    let mut report = ReplayReport {
        path: path.map(Path::to_path_buf),
        steps,
        expect_mismatch,
        subject: subject.as_ref().map(|s| s.name(&trace.config)),
        divergence: None,
        setup_error: None,
        skipped: None,
        outside: None,
    };
    let Some(subject) = subject else {
        return report;
    };
    let oracle = match Oracle::for_trace(oracle, trace.oracle.as_ref()) {
        Ok(oracle) => oracle,
        Err(e) => {
            report.setup_error = Some(format!("the trace's oracle: {e}"));
            return report;
        }
    };
    if !oracle.is_default() {
        report.subject = Some(format!("{} (oracle {oracle})", subject.name(&trace.config)));
    }
    let mut work = Work::default();
    let checked = oracle.check_counted(&trace.config, &trace.ops, &subject, &mut work);
    report.outside = work.cut;
    match checked {
        Err(NotChecked::Unsupported(e)) => report.skipped = Some(e.to_string()),
        Err(e) => report.setup_error = Some(e.to_string()),
        Ok(None) => {}
        Ok(Some(mut divergence)) => {
            if let Some(dir) = failures {
                // The report still stands if the copy cannot be written.
                let _ = divergence.save_in(dir);
            }
            report.divergence = Some(divergence);
        }
    }
    report
}
