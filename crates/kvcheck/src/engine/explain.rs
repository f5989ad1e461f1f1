//! `kvcheck explain`: a readable walk through a trace: per step the op, the
//! model's resident positions as a strip, the view, and the subject's slot
//! layout; at the first divergence, expected against actual with the wrong
//! rows decoded to (position, writer).
//!
//! [`walk`] runs the trace once and records a [`Walk`]: one [`StepView`] per
//! step. Two renderers read it: [`render_text`] (what `kvcheck explain`
//! prints) and [`html::render_html`] (the same walk as a coloured grid,
//! `kvcheck explain --html OUT`).
//!
//! The text strip has one cell per position from 0 to the global end:
//! `S` protected sink, `P` pinned, `e` evictable (resident, not visible),
//! `v` resident and visible, `.` not resident (evicted or rewound), and
//! `*` marks positions written by this step. Plain text, so it reads the
//! same in a terminal and in a CI log; colour is added only on a TTY.

pub mod html;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use candle_core::Device;
use kvcache::{RingLayout, Slot};
use kvmodel::{format_ranges, Op, Outcome};

use crate::check::divergence::{describe_config, describe_outcome, Divergence};
use crate::check::lockstep::{Cut, Lockstep, SetupError};
use crate::check::trace::Trace;
use crate::subject::SubjectSpec;

/// The state of one position after a step, from the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellState {
    /// Resident and protected by the sink (`[0, S)`, or `[0, GS)` with a pin).
    Sink,
    /// Resident and inside the pinned range.
    Pinned,
    /// Resident, not protected, in the view.
    Visible,
    /// Resident, not protected, not in the view (evictable).
    Hidden,
    /// Written before, not resident now (evicted, rewound or reset).
    Evicted,
    /// Never written.
    Never,
}

impl CellState {
    /// The text strip's character.
    pub fn glyph(self) -> char {
        match self {
            CellState::Sink => 'S',
            CellState::Pinned => 'P',
            CellState::Visible => 'v',
            CellState::Hidden => 'e',
            CellState::Evicted | CellState::Never => '.',
        }
    }

    /// A word for legends and hover text.
    pub fn word(self) -> &'static str {
        match self {
            CellState::Sink => "sink",
            CellState::Pinned => "pinned",
            CellState::Visible => "visible",
            CellState::Hidden => "resident, hidden (evictable)",
            CellState::Evicted => "evicted (written before, gone)",
            CellState::Never => "never written",
        }
    }
}

/// One position of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The position.
    pub position: u64,
    /// Its state after the step.
    pub state: CellState,
    /// Whether the step wrote it.
    pub written: bool,
    /// The op that wrote each head, when resident (`None`: head never written).
    pub writers: Option<Vec<Option<u64>>>,
    /// Stored in a cold chunk (packed only).
    pub cold: bool,
}

/// One step of the walk: what the model and the subject hold after it.
#[derive(Clone, Debug)]
pub struct StepView {
    /// Index of the op in the trace.
    pub index: usize,
    /// The op.
    pub op: Op,
    /// The agreed outcome; `None` at the divergence.
    pub outcome: Option<Outcome>,
    /// The model's global end after the step.
    pub global_end: u64,
    /// One cell per position, at least `0..global_end` (more when positions
    /// at or past the global end were written before a rewind).
    pub cells: Vec<Cell>,
    /// The visible positions (from the outcome, or the model's view).
    pub visible: Vec<u64>,
    /// The positions the step wrote, as `(start, len)`.
    pub written: Option<(u64, u64)>,
    /// The subject's slot layout after the step.
    pub slots: Vec<Slot>,
    /// The ring's head, tail and wrap point, for a subject laid out as a
    /// ring.
    pub ring: Option<RingLayout>,
}

/// A trace walked in lockstep: the steps up to the end or the divergence.
#[derive(Clone, Debug)]
pub struct Walk {
    /// `describe_config` of the trace's config.
    pub config: String,
    /// The subject's name.
    pub subject: String,
    /// The trace's note.
    pub note: Option<String>,
    /// Number of ops in the trace.
    pub ops: usize,
    /// One per step run; the last is the divergence when there is one.
    pub steps: Vec<StepView>,
    /// The first divergence, if any.
    pub divergence: Option<Box<Divergence>>,
    /// Where the trace left the subject's domain, if it did: the walk
    /// stops before that op, which is not judged.
    pub outside: Option<Cut>,
}

impl Walk {
    /// The number of position columns a grid needs: the largest cell count.
    pub fn width(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| s.cells.len() as u64)
            .max()
            .unwrap_or(0)
    }
}

/// The cells of the model after a step. `ever` holds every position written
/// so far (updated here).
fn cells(
    model: &kvmodel::Model,
    written: Option<(u64, u64)>,
    visible: &[u64],
    ever: &mut BTreeSet<u64>,
) -> Vec<Cell> {
    let protected: BTreeSet<u64> = model.protected().into_iter().collect();
    let pin = model.pin_range();
    let resident: BTreeSet<u64> = model.resident().collect();
    let visible: BTreeSet<u64> = visible.iter().copied().collect();
    let in_written = |p: u64| written.is_some_and(|(s, n)| p >= s && p < s + n);
    ever.extend(resident.iter().copied());
    if let Some((s, n)) = written {
        ever.extend(s..s + n);
    }
    let end = model.global_end().max(ever.last().map_or(0, |&p| p + 1));
    (0..end)
        .map(|p| {
            let state = if !resident.contains(&p) {
                if ever.contains(&p) {
                    CellState::Evicted
                } else {
                    CellState::Never
                }
            } else if pin.as_ref().is_some_and(|r| r.contains(&p)) {
                CellState::Pinned
            } else if protected.contains(&p) {
                CellState::Sink
            } else if visible.contains(&p) {
                CellState::Visible
            } else {
                CellState::Hidden
            };
            Cell {
                position: p,
                state,
                written: in_written(p),
                writers: model.writers(p).map(<[Option<u64>]>::to_vec),
                cold: model.is_cold(p),
            }
        })
        .collect()
}

/// Runs `trace` with `subject` in lockstep with the model and records every
/// step up to the end or the first divergence.
pub fn walk(trace: &Trace, subject: SubjectSpec) -> Result<Walk, SetupError> {
    let device = Device::Cpu;
    let name = subject.name(&trace.config);
    let mut run = Lockstep::open(&trace.config, &subject, &device)?;
    run.capabilities()
        .supports_trace(&trace.config, &trace.ops)?;
    let mut ever = BTreeSet::new();
    let mut walk = Walk {
        config: describe_config(&trace.config),
        subject: name,
        note: trace.note.clone(),
        ops: trace.ops.len(),
        steps: Vec::new(),
        divergence: None,
        outside: None,
    };
    for (index, op) in trace.ops.iter().enumerate() {
        let result = run.step(op);
        if let Some(cut) = run.cut() {
            walk.outside = Some(cut.clone());
            break;
        }
        let (outcome, visible, written) = match &result {
            Ok(outcome) => {
                let visible = match outcome {
                    Outcome::Ok(e) => e.visible.clone().unwrap_or_else(|| run.model().view(None)),
                    Outcome::Err(_) => run.model().view(None),
                };
                let written = match (op, outcome) {
                    (Op::Write(w), Outcome::Ok(_)) if w.len > 0 => {
                        Some((w.start as u64, w.len as u64))
                    }
                    _ => None,
                };
                (Some(outcome.clone()), visible, written)
            }
            // The model has applied the op; its view is what the cache should
            // show, and the positions it wrote are those the op now owns.
            Err(_) => {
                let written = match op {
                    Op::Write(w)
                        if w.len > 0
                            && run
                                .model()
                                .writers(w.start as u64)
                                .is_some_and(|ws| ws.contains(&Some(index as u64))) =>
                    {
                        Some((w.start as u64, w.len as u64))
                    }
                    _ => None,
                };
                (None, run.model().view(None), written)
            }
        };
        walk.steps.push(StepView {
            index,
            op: *op,
            outcome,
            global_end: run.model().global_end(),
            cells: cells(run.model(), written, &visible, &mut ever),
            visible,
            written,
            slots: run
                .cache()
                .internals()
                .map(|i| i.layout().slots)
                .unwrap_or_default(),
            ring: run.cache().ring(),
        });
        if let Err(d) = result {
            walk.divergence = Some(d);
            break;
        }
    }
    Ok(walk)
}

fn strip(step: &StepView) -> String {
    let cells = &step.cells[..step.global_end as usize];
    let mut out: String = cells.iter().map(|c| c.state.glyph()).collect();
    // At the divergence the text shows the strip the view should have, unmarked.
    if step.written.is_some() && step.outcome.is_some() {
        let marks: String = cells
            .iter()
            .map(|c| if c.written { '*' } else { ' ' })
            .collect();
        if !marks.trim().is_empty() {
            out = format!("{out}\n          {marks}");
        }
    }
    out
}

/// A ring's state as text: `head slot 2, tail slot 5, wraps at position 8`.
pub fn ring_line(ring: &RingLayout) -> String {
    let head = ring
        .head
        .map_or("no evictable row".to_string(), |h| format!("head slot {h}"));
    let wrap = ring
        .wrap
        .map_or("no wrap".to_string(), |p| format!("wraps at position {p}"));
    format!("{head}, tail slot {}, {wrap}", ring.tail)
}

/// The slot layout as text: `[0 1 2c -]` (`c` cold, `-` free). A cache
/// has at least one slot, so none means a subject that does not report its
/// layout (another process).
pub fn layout_line(slots: &[Slot]) -> String {
    if slots.is_empty() {
        return "(not reported by the subject)".to_string();
    }
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

/// The walk as plain text. `colour` adds ANSI colour to the divergence
/// marker (callers pass `stdout().is_terminal()`).
pub fn render_text(walk: &Walk, colour: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "config:  {}", walk.config);
    let _ = writeln!(out, "subject: {}", walk.subject);
    let _ = writeln!(
        out,
        "strip:   one cell per position 0..G — S sink, P pinned, v visible, e evictable (resident, not visible), . gone; * written by the step"
    );
    if let Some(note) = &walk.note {
        let _ = writeln!(out, "note:    {note}");
    }
    let (red, reset) = if colour {
        ("\x1b[1;31m", "\x1b[0m")
    } else {
        ("", "")
    };
    for step in &walk.steps {
        let _ = writeln!(out, "\nstep {}: {}", step.index, step.op);
        match (&step.outcome, &walk.divergence) {
            (Some(outcome), _) => {
                let _ = writeln!(out, "  outcome {}", describe_outcome(outcome));
                let _ = writeln!(out, "  strip   {}", strip(step));
                let _ = writeln!(
                    out,
                    "  view    {}",
                    format_ranges(step.visible.iter().copied())
                );
                let _ = writeln!(out, "  slots   {}", layout_line(&step.slots));
                if let Some(ring) = &step.ring {
                    let _ = writeln!(out, "  ring    {}", ring_line(ring));
                }
            }
            (None, None) => {}
            (None, Some(d)) => {
                let _ = writeln!(out, "  {red}✗ {}{reset}", d.summary());
                let _ = writeln!(out, "  expected {}", d.expected);
                let _ = writeln!(out, "  strip   {}", strip(step));
                let _ = writeln!(out, "  actual   {}", d.actual);
                if !d.rows.is_empty() {
                    let _ = writeln!(
                        out,
                        "  {:<52} | actual row",
                        "expected row (position, writer)"
                    );
                    for r in &d.rows {
                        let slot = r.slot.map(|s| format!(" in slot {s}")).unwrap_or_default();
                        let _ = writeln!(
                            out,
                            "  {:<52} | {}",
                            format!(
                                "{:?} pos {} head {}{slot}: {}",
                                r.kv, r.position, r.head, r.expected
                            ),
                            r.found
                        );
                    }
                }
                let _ = writeln!(out, "  slots   {}", layout_line(&step.slots));
                if let Some(ring) = &step.ring {
                    let _ = writeln!(out, "  ring    {}", ring_line(ring));
                }
                return out;
            }
        }
    }
    match &walk.outside {
        Some(cut) => {
            let how = if cut.answered {
                "the subject answered outside its domain"
            } else {
                "its declared domain leaves it out"
            };
            let _ = writeln!(
                out,
                "\nstep {}: {}\n  outside: {how} ({})\n\nno divergence in the {} ops before it; the trace leaves the subject's domain there, and nothing from it on is judged",
                cut.step, cut.op, cut.reason, cut.step
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\nno divergence: {} matches the model on all {} ops",
                walk.subject, walk.ops
            );
        }
    }
    out
}

/// Explains `trace` run by `subject` in lockstep with the model. Returns the
/// text and the first divergence, if any. `colour` adds ANSI colour to the
/// divergence marker (callers pass `stdout().is_terminal()`).
pub fn explain(
    trace: &Trace,
    subject: SubjectSpec,
    colour: bool,
) -> Result<(String, Option<Box<Divergence>>), SetupError> {
    let walk = walk(trace, subject)?;
    let text = render_text(&walk, colour);
    Ok((text, walk.divergence))
}
