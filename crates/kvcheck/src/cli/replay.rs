//! `kvcheck replay`: replay trace files and directories.

use std::path::PathBuf;

use kvcheck::check::trace::{collect_trace_files, Trace};
use kvcheck::engine::replay::{replay_with, ReplayReport};
use serde_json::json;

use super::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace files, or directories walked for `*.kvtrace.json`.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) subject: super::SubjectArgs,
    /// Only replay through the model and check `expect`.
    #[arg(long)]
    model_only: bool,
    /// Print one line per trace instead of the step tables.
    #[arg(short, long)]
    quiet: bool,
    /// Machine-readable output: one JSON array of per-trace results.
    #[arg(long)]
    json: bool,
    /// Also save the failing prefix of each diverging trace in this
    /// directory (its report then names that copy). Without it replay
    /// writes nothing, and a report names the file it replayed.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let files = collect_trace_files(&args.paths)?;
    if files.is_empty() {
        return Err(CliError::NoTraces(args.paths.clone()));
    }
    let subject = (!args.model_only).then(|| args.subject.spec());
    let oracle = args.subject.oracle();
    if let Some(subject) = &subject {
        super::announce(subject);
        super::announce_oracle(&oracle);
    }
    let (mut passed, mut failed, mut unreadable, mut skipped, mut cut) = (0, 0, 0, 0, 0);
    let mut json_results = Vec::new();
    for file in &files {
        if super::prefix::is_prefix_file(file) {
            let spec = args.subject.spec();
            let out = args.json.then_some(&mut json_results);
            match super::prefix::replay_file(file, &spec, args.model_only, args.quiet, out) {
                super::prefix::Verdict::Passed => passed += 1,
                super::prefix::Verdict::Failed => failed += 1,
                super::prefix::Verdict::Skipped => skipped += 1,
                super::prefix::Verdict::Unreadable => unreadable += 1,
            }
            continue;
        }
        let mut trace = match Trace::load(file) {
            Ok(trace) => trace,
            Err(e) => {
                unreadable += 1;
                if args.json {
                    json_results.push(json!({"path": file, "error": e.to_string()}));
                } else {
                    println!("ERROR {}\n      {e}", file.display());
                }
                continue;
            }
        };
        // Unreadable `oracle` fields were refused by the loader already.
        let oracle = args
            .subject
            .oracle_for(&mut trace)
            .unwrap_or_else(|_| oracle.clone());
        let mut report = replay_with(
            &trace,
            Some(file),
            subject.clone(),
            args.out.as_deref(),
            &oracle,
        );
        // The file replayed reproduces its divergence: the report's
        // replay command names it rather than a copy nobody asked for.
        if let Some(divergence) = report.divergence.as_mut() {
            if divergence.saved.is_none() {
                divergence.saved = Some(file.clone());
            }
        }
        if report.skipped.is_some() {
            skipped += 1;
        } else if report.passed() {
            passed += 1;
            cut += usize::from(report.outside.is_some());
        } else {
            failed += 1;
        }
        if args.json {
            json_results.push(report_json(&report));
        } else {
            print_report(&report, &trace, args.quiet);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json_results).expect("plain JSON values")
        );
    } else {
        println!(
            "{passed} passed{}, {failed} failed{}{}",
            if cut > 0 {
                format!(" ({cut} judged only up to where they leave the subject's domain)")
            } else {
                String::new()
            },
            if skipped > 0 {
                format!(", {skipped} skipped (unsupported by the subject)")
            } else {
                String::new()
            },
            if unreadable > 0 {
                format!(", {unreadable} unreadable")
            } else {
                String::new()
            }
        );
    }
    if failed > 0 {
        Err(CliError::Diverged)
    } else if unreadable > 0 {
        Err(CliError::Unreadable { count: unreadable })
    } else {
        Ok(())
    }
}

fn print_report(report: &ReplayReport, trace: &Trace, quiet: bool) {
    let path = report
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let checked = match &report.subject {
        Some(subject) => format!("model + {subject}"),
        None => "model".to_string(),
    };
    let status = match (&report.skipped, report.passed()) {
        (Some(_), _) => "SKIP ",
        (None, true) if report.outside.is_some() => "CUT  ",
        (None, true) => "PASS ",
        (None, false) => "FAIL ",
    };
    println!("{status} {path} ({checked}, {} ops)", trace.ops.len());
    if !quiet {
        if let Some(note) = &trace.note {
            println!("      {note}");
        }
        for line in report.table().lines() {
            println!("      {line}");
        }
    }
    if let Some(why) = &report.skipped {
        println!("      {why}");
    }
    if let Some(note) = report.outside_note() {
        println!("      {note}");
    }
    if let Some(failure) = report.failure() {
        for line in failure.lines() {
            println!("      {line}");
        }
    }
}

fn report_json(report: &ReplayReport) -> serde_json::Value {
    json!({
        "path": report.path,
        "passed": report.passed(),
        "subject": report.subject,
        "steps": report.steps,
        "expect_mismatch": report.expect_mismatch,
        "setup_error": report.setup_error,
        "skipped": report.skipped,
        "outside": report.outside.as_ref().map(|cut| json!({
            "step": cut.step,
            "op": cut.op,
            "reason": cut.reason,
            "answered": cut.answered,
        })),
        "divergence": report.divergence.as_ref().map(|d| json!({
            "step": d.step,
            "op": d.op,
            "kind": d.kind.name(),
            "expected": d.expected,
            "actual": d.actual,
            "rows": d.rows.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "trace": d.saved,
            "reproduce": d.replay_command(),
        })),
    })
}
