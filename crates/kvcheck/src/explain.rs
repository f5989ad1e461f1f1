//! `kvcheck explain` (text only; the HTML page is not built yet): a readable walk through a trace: per step the op, the model's resident
//! positions as a strip, the view, and the subject's slot layout; at the
//! first divergence, expected against actual with the wrong rows decoded to
//! (position, writer).
//!
//! The strip has one cell per position from 0 to the global end:
//! `S` protected sink, `P` pinned, `e` evictable (resident, not visible),
//! `v` resident and visible, `.` not resident (evicted or rewound), and
//! `*` marks positions written by this step. Plain text, so it reads the
//! same in a terminal and in a CI log; colour is added only on a TTY.

use std::fmt::Write as _;

use candle_core::Device;
use kvcache::Slot;
use kvmodel::{format_ranges, Op, Outcome};

use crate::divergence::{describe_config, describe_outcome, Divergence};
use crate::lockstep::{Lockstep, SetupError};
use crate::subject::SubjectSpec;
use crate::trace::Trace;

/// The positions of one strip cell's states, from the model after a step.
fn strip(model: &kvmodel::Model, written: Option<(u64, u64)>, visible: &[u64]) -> String {
    let protected = model.protected();
    let pin = model.pin_range();
    let resident: std::collections::BTreeSet<u64> = model.resident().collect();
    let mut out = String::new();
    for p in 0..model.global_end() {
        let c = if !resident.contains(&p) {
            '.'
        } else if pin.as_ref().is_some_and(|r| r.contains(&p)) {
            'P'
        } else if protected.contains(&p) {
            'S'
        } else if visible.contains(&p) {
            'v'
        } else {
            'e'
        };
        out.push(c);
    }
    if let Some((s, n)) = written {
        let marks: String = (0..model.global_end())
            .map(|p| if p >= s && p < s + n { '*' } else { ' ' })
            .collect();
        if marks.trim().is_empty() {
            return out;
        }
        out = format!("{out}\n          {marks}");
    }
    out
}

fn layout_line(slots: &[Slot]) -> String {
    let cells: Vec<String> = slots
        .iter()
        .map(|s| match s {
            Slot::Free => "-".to_string(),
            Slot::Hot(p) => p.to_string(),
            Slot::Cold(p) => format!("{p}c"),
        })
        .collect();
    format!("[{}]", cells.join(" "))
}

/// Explains `trace` run by `subject` in lockstep with the model. Returns the
/// text and the first divergence, if any. `colour` adds ANSI colour to the
/// divergence marker (callers pass `stdout().is_terminal()`).
pub fn explain(
    trace: &Trace,
    subject: SubjectSpec,
    colour: bool,
) -> Result<(String, Option<Box<Divergence>>), SetupError> {
    let device = Device::Cpu;
    let cache = subject
        .open(&trace.config, &device)
        .map_err(SetupError::CacheRefused)?;
    let name = subject.name(&trace.config);
    let mut run = Lockstep::with_cache(&trace.config, cache, &name, &device)?;
    let mut out = String::new();
    let _ = writeln!(out, "config:  {}", describe_config(&trace.config));
    let _ = writeln!(out, "subject: {name}");
    let _ = writeln!(
        out,
        "strip:   one cell per position 0..G — S sink, P pinned, v visible, e evictable (resident, not visible), . gone; * written by the step"
    );
    if let Some(note) = &trace.note {
        let _ = writeln!(out, "note:    {note}");
    }
    let (red, reset) = if colour {
        ("\x1b[1;31m", "\x1b[0m")
    } else {
        ("", "")
    };
    for (i, op) in trace.ops.iter().enumerate() {
        let _ = writeln!(out, "\nstep {i}: {op}");
        match run.step(op) {
            Ok(outcome) => {
                let visible = match &outcome {
                    Outcome::Ok(e) => e.visible.clone().unwrap_or_else(|| run.model().view(None)),
                    Outcome::Err(_) => run.model().view(None),
                };
                let written = match (op, &outcome) {
                    (Op::Write(w), Outcome::Ok(_)) if w.len > 0 => {
                        Some((w.start as u64, w.len as u64))
                    }
                    _ => None,
                };
                let _ = writeln!(out, "  outcome {}", describe_outcome(&outcome));
                let _ = writeln!(out, "  strip   {}", strip(run.model(), written, &visible));
                let _ = writeln!(out, "  view    {}", format_ranges(visible.iter().copied()));
                let _ = writeln!(
                    out,
                    "  slots   {}",
                    layout_line(&run.cache().layout().slots)
                );
            }
            Err(d) => {
                let _ = writeln!(out, "  {red}✗ {}{reset}", d.summary());
                let _ = writeln!(out, "  expected {}", d.expected);
                // The model has applied the op; its strip is what the view should show.
                let _ = writeln!(
                    out,
                    "  strip   {}",
                    strip(run.model(), None, &run.model().view(None))
                );
                let _ = writeln!(out, "  actual   {}", d.actual);
                if !d.rows.is_empty() {
                    let _ = writeln!(
                        out,
                        "  {:<52} | actual row",
                        "expected row (position, writer)"
                    );
                    for r in &d.rows {
                        let _ = writeln!(
                            out,
                            "  {:<52} | {}",
                            format!(
                                "{:?} pos {} head {}: {}",
                                r.kv, r.position, r.head, r.expected
                            ),
                            r.found
                        );
                    }
                }
                let _ = writeln!(
                    out,
                    "  slots   {}",
                    layout_line(&run.cache().layout().slots)
                );
                return Ok((out, Some(d)));
            }
        }
    }
    let _ = writeln!(
        out,
        "\nno divergence: {name} matches the model on all {} ops",
        trace.ops.len()
    );
    Ok((out, None))
}
