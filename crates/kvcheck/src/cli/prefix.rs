//! `replay` and `minimize` of prefix-family traces (docs/kvtrace.md
//! "Prefix caches"): the model in lockstep with the shipped paged cache.

use std::path::Path;

use kvcheck::check::reproduce::ReplayProgram;
use kvcheck::engine::prefix::{self, PrefixDivergence, PrefixLoadError};
use kvcheck::subject::SubjectSpec;
use kvmodel::prefix::{PrefixTrace, PrefixTraceError};
use serde_json::json;

/// How one prefix trace fared in `replay`.
pub enum Verdict {
    /// Every op agreed.
    Passed,
    /// A divergence was printed.
    Failed,
    /// The subject cannot run the family.
    Skipped,
    /// The file was not a readable prefix trace.
    Unreadable,
}

/// Whether the file at `path` holds a prefix-family trace (an unreadable
/// file is not: the streaming loader reports it).
pub fn is_prefix_file(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| prefix::is_prefix_trace(&text))
}

/// Replays the prefix trace at `path`: on the model alone with
/// `model_only`, else on the model and the shipped paged cache (the only
/// subject of the family so far). Prints the report (or pushes a JSON
/// result) and says how it went.
pub fn replay_file(
    path: &Path,
    subject: &SubjectSpec,
    model_only: bool,
    quiet: bool,
    json_results: Option<&mut Vec<serde_json::Value>>,
) -> Verdict {
    let trace = match prefix::load(path) {
        Ok(trace) => trace,
        Err(e) => {
            match json_results {
                Some(out) => out.push(json!({"path": path, "error": e.to_string()})),
                None => println!("ERROR {}\n      {e}", path.display()),
            }
            return Verdict::Unreadable;
        }
    };
    let checked = if model_only { "model" } else { "model + paged" };
    if !model_only && *subject != SubjectSpec::Cache {
        let why = format!("prefix traces are checked on the shipped paged cache only (--subject cache), not {subject}");
        match json_results {
            Some(out) => out.push(json!({"path": path, "skipped": why})),
            None => println!(
                "SKIP  {} (prefix, {} ops)\n      {why}",
                path.display(),
                trace.ops.len()
            ),
        }
        return Verdict::Skipped;
    }
    let divergence = match run(&trace, model_only) {
        Ok(divergence) => divergence,
        Err(e) => {
            match json_results {
                Some(out) => out.push(json!({"path": path, "error": e})),
                None => println!("ERROR {}\n      {e}", path.display()),
            }
            return Verdict::Unreadable;
        }
    };
    let command = ReplayProgram::current().command(path, None);
    if let Some(out) = json_results {
        out.push(json!({
            "path": path,
            "family": "prefix",
            "passed": divergence.is_none(),
            "subject": (!model_only).then_some("paged"),
            "divergence": divergence.as_ref().map(|d| json!({
                "step": d.step,
                "op": d.op,
                "kind": d.kind.name(),
                "expected": d.expected,
                "actual": d.actual,
                "trace": path,
                "reproduce": command,
            })),
        }));
    } else {
        let status = if divergence.is_some() {
            "FAIL "
        } else {
            "PASS "
        };
        println!(
            "{status} {} (prefix, {checked}, {} ops)",
            path.display(),
            trace.ops.len()
        );
        if let (Some(note), false) = (&trace.note, quiet) {
            println!("      {note}");
        }
        if let Some(d) = &divergence {
            for line in d.to_string().lines() {
                println!("      {line}");
            }
            println!("      trace:    {}", path.display());
            println!("      reproduce: {command}");
        }
    }
    if divergence.is_some() {
        Verdict::Failed
    } else {
        Verdict::Passed
    }
}

/// The first divergence of `trace`: against `expect` on the model alone,
/// or in lockstep on the paged cache.
fn run(trace: &PrefixTrace, model_only: bool) -> Result<Option<PrefixDivergence>, String> {
    if model_only {
        return match trace.check_on_model() {
            Ok(()) => Ok(None),
            Err(PrefixTraceError::Mismatch {
                step,
                op,
                expected,
                actual,
            }) => Ok(Some(PrefixDivergence {
                step,
                op_name: trace.ops[step].name(),
                op,
                kind: prefix::PrefixDivergenceKind::Expect,
                expected: expected.to_string(),
                class: prefix::lockstep::outcome_class(&actual),
                actual: format!("{actual} (the model's outcome)"),
            })),
            Err(e) => Err(e.to_string()),
        };
    }
    prefix::replay_on_paged(trace)
        .map(|replay| replay.divergence)
        .map_err(|e| e.to_string())
}

/// `minimize` of a prefix trace on the shipped paged cache: the summary
/// to standard error, the trace to `output` or standard output.
pub fn minimize_file(
    file: &Path,
    subject: &SubjectSpec,
    output: Option<&Path>,
    max_tests: usize,
) -> Result<(), super::CliError> {
    let trace = prefix::load(file)?;
    if *subject != SubjectSpec::Cache {
        return Err(super::CliError::PrefixSubject(format!(
            "prefix traces are minimized on the shipped paged cache only (--subject cache), not {subject}"
        )));
    }
    let make = |config: &kvmodel::prefix::PrefixConfig| {
        kvcache::PagedCache::new(config, &candle_core::Device::Cpu)
    };
    let m = prefix::minimize::minimize(&trace, &make, max_tests).map_err(|e| {
        super::CliError::PrefixMinimize {
            file: file.to_path_buf(),
            why: e.to_string(),
        }
    })?;
    eprintln!("before: {} ops", m.before);
    eprintln!("after:  {} ops", m.after);
    eprintln!(
        "kept:   {} at step {} ({})",
        m.divergence.kind, m.divergence.step, m.divergence.op
    );
    eprintln!("tests:  {}", m.tests_run);
    let text = serde_json::to_string_pretty(&m.trace).expect("plain JSON values") + "\n";
    match output {
        None => print!("{text}"),
        Some(path) => {
            std::fs::write(path, text).map_err(|source| super::CliError::Write {
                path: path.to_path_buf(),
                source,
            })?;
            eprintln!("wrote {}", path.display());
        }
    }
    Err(super::CliError::StillFails)
}

impl From<PrefixLoadError> for super::CliError {
    fn from(e: PrefixLoadError) -> Self {
        super::CliError::PrefixTrace(e)
    }
}
