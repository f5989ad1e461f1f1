//! `kvcheck explain --html`: the walk as one self-contained HTML page. A
//! grid with a row per step and a column per position, each cell coloured
//! by the position's state after the step, its writers per head on hover;
//! the divergence row outlined in red with expected against actual and the
//! wrong rows marked. No network, no external assets: inline CSS only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kvmodel::format_ranges;

use super::{layout_line, ring_line, Cell, CellState, StepView, Walk};
use crate::check::divergence::{describe_outcome, Divergence};
use crate::codec::Kv;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font: 14px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 20px; color: #1d1d1f; background: #fff; }
h1 { font-size: 20px; margin: 0 0 6px; }
.meta { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; color: #333; margin: 0 0 10px; }
.meta b { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #555; font-weight: 600; display: inline-block; width: 60px; }
.verdict { padding: 8px 12px; border-radius: 6px; font-weight: 600; margin: 8px 0 12px; display: inline-block; }
.verdict.fail { background: #fde2e1; color: #a50e0e; border: 2px solid #d93025; }
.verdict.pass { background: #e6f4ea; color: #137333; border: 2px solid #34a853; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 0 0 12px; font-size: 13px; align-items: center; }
.legend span.item { display: inline-flex; align-items: center; gap: 5px; }
.legend .sw { display: inline-block; width: 18px; height: 18px; border: 1px solid #888; border-radius: 3px; text-align: center; font-size: 11px; line-height: 18px; }
table.grid { border-collapse: separate; border-spacing: 2px; }
table.grid th { font-size: 12px; font-weight: 600; color: #444; padding: 2px 4px; }
table.grid th.pos { width: 26px; text-align: center; font-family: ui-monospace, Menlo, Consolas, monospace; }
td.label { white-space: nowrap; padding: 2px 10px 2px 4px; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
td.label .idx { color: #777; display: inline-block; width: 24px; text-align: right; margin-right: 6px; }
td.outcome { white-space: nowrap; padding: 2px 10px 2px 4px; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; color: #444; }
td.slots { white-space: nowrap; padding: 2px 4px 2px 12px; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; color: #555; }
td.c { width: 26px; height: 24px; text-align: center; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11px; border-radius: 3px; border: 1px solid transparent; }
.sink { background: #6a3d9a; color: #fff; }
.pinned { background: #f0a202; color: #222; }
.visible { background: #2e7d32; color: #fff; }
.hidden { background: #b7dfb9; color: #1b4d1e; }
.evicted { background: repeating-linear-gradient(45deg, #cfcfcf, #cfcfcf 3px, #e4e4e4 3px, #e4e4e4 6px); color: #666; }
.never { background: #fafafa; border: 1px dashed #ddd !important; }
.written { background: #1565c0; color: #fff; font-weight: 700; }
td.c.written.sink { box-shadow: inset 0 -5px 0 #6a3d9a; }
td.c.written.pinned { box-shadow: inset 0 -5px 0 #f0a202; }
td.c.written.hidden { box-shadow: inset 0 -5px 0 #b7dfb9; }
td.c.wrong { background: #d93025; color: #fff; font-weight: 700; font-size: 14px; box-shadow: 0 0 0 2px #7f0000; }
tr.diverged td.label, tr.diverged td.outcome { background: #d93025; color: #fff; font-weight: 700; border-radius: 3px; }
tr.diverged td.label .idx { color: #fff; }
tr.diverged td.slots { background: #fde2e1; border-radius: 3px; }
tr.detail td { background: #fde2e1; padding: 8px 12px; border-radius: 4px; font-size: 13px; }
.detail .kv { font-family: ui-monospace, Menlo, Consolas, monospace; }
.detail .kv b { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; display: inline-block; width: 70px; }
table.rows { border-collapse: collapse; margin-top: 6px; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
table.rows th, table.rows td { border: 1px solid #e8a09a; padding: 2px 8px; text-align: left; background: #fff; }
table.rows th { background: #f9c9c5; }
tr.step:hover td.c { filter: brightness(1.08); }
.foot { color: #666; font-size: 12px; margin-top: 12px; }
"#;

fn class(state: CellState) -> &'static str {
    match state {
        CellState::Sink => "sink",
        CellState::Pinned => "pinned",
        CellState::Visible => "visible",
        CellState::Hidden => "hidden",
        CellState::Evicted => "evicted",
        CellState::Never => "never",
    }
}

/// The wrong rows of a divergence by position: `(kv, head, found, expected)` lines.
fn wrong_rows(d: Option<&Divergence>) -> BTreeMap<u64, Vec<String>> {
    let mut map: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for r in d.map(|d| d.rows.as_slice()).unwrap_or_default() {
        let kv = match r.kv {
            Kv::K => "K",
            Kv::V => "V",
        };
        map.entry(r.position).or_default().push(format!(
            "wrong {kv} head {}: holds {}, expected {}",
            r.head, r.found, r.expected
        ));
    }
    map
}

fn cell_title(cell: &Cell, wrong: Option<&Vec<String>>) -> String {
    let mut parts = vec![format!("position {}", cell.position)];
    if let Some(writers) = &cell.writers {
        for (head, w) in writers.iter().enumerate() {
            parts.push(match w {
                Some(op) => format!("head {head} written by op {op}"),
                None => format!("head {head} never written"),
            });
        }
    }
    parts.push(cell.state.word().to_string());
    if cell.cold {
        parts.push("cold".to_string());
    }
    if cell.written {
        parts.push("written this step".to_string());
    }
    if let Some(wrong) = wrong {
        parts.extend(wrong.iter().cloned());
    }
    parts.join(" · ")
}

/// The short text inside a cell: the writing op when all heads agree,
/// `a/b` when they differ, nothing when not resident.
fn cell_text(cell: &Cell) -> String {
    let Some(writers) = &cell.writers else {
        return String::new();
    };
    let mut ops: Vec<u64> = writers.iter().flatten().copied().collect();
    ops.dedup();
    ops.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
}

fn row(out: &mut String, step: &StepView, width: u64, walk: &Walk) {
    let diverged = step.outcome.is_none() && walk.divergence.is_some();
    let wrong = if diverged {
        wrong_rows(walk.divergence.as_deref())
    } else {
        BTreeMap::new()
    };
    let _ = write!(
        out,
        "<tr class=\"step{}\"{}>",
        if diverged { " diverged" } else { "" },
        if diverged {
            " id=\"divergence\" data-divergence=\"true\""
        } else {
            ""
        }
    );
    let _ = write!(
        out,
        "<td class=\"label\"><span class=\"idx\">{}</span>{}</td>",
        step.index,
        escape(&step.op.to_string())
    );
    let outcome = match &step.outcome {
        Some(o) => describe_outcome(o),
        None => "✗ diverged (model state)".to_string(),
    };
    let _ = write!(out, "<td class=\"outcome\">{}</td>", escape(&outcome));
    for p in 0..width {
        let never = Cell {
            position: p,
            state: CellState::Never,
            written: false,
            writers: None,
            cold: false,
        };
        let cell = step.cells.get(p as usize).unwrap_or(&never);
        let w = wrong.get(&p);
        let mut classes = format!("c {}", class(cell.state));
        if cell.written {
            classes.push_str(" written");
        }
        if w.is_some() {
            classes.push_str(" wrong");
        }
        let _ = write!(
            out,
            "<td class=\"{classes}\" title=\"{}\">{}</td>",
            escape(&cell_title(cell, w)),
            if w.is_some() {
                "✗".to_string()
            } else {
                escape(&cell_text(cell))
            }
        );
    }
    let _ = writeln!(
        out,
        "<td class=\"slots\" title=\"view {}\">{}{}</td></tr>",
        escape(&format_ranges(step.visible.iter().copied())),
        escape(&layout_line(&step.slots)),
        step.ring
            .map(|ring| format!("<br>{}", escape(&ring_line(&ring))))
            .unwrap_or_default()
    );
    if let (true, Some(d)) = (diverged, walk.divergence.as_deref()) {
        detail(out, d, width);
    }
}

fn detail(out: &mut String, d: &Divergence, width: u64) {
    let _ = write!(
        out,
        "<tr class=\"detail\"><td colspan=\"{}\"><div class=\"kv\"><b>✗</b>{}</div>\
         <div class=\"kv\"><b>expected</b>{}</div><div class=\"kv\"><b>actual</b>{}</div>",
        width + 3,
        escape(&d.summary()),
        escape(&d.expected),
        escape(&d.actual)
    );
    if !d.rows.is_empty() {
        out.push_str(
            "<table class=\"rows\"><tr><th>row</th><th>position</th><th>head</th>\
             <th>expected (writer)</th><th>actual (writer)</th></tr>",
        );
        for r in &d.rows {
            let kv = match r.kv {
                Kv::K => "K",
                Kv::V => "V",
            };
            let _ = write!(
                out,
                "<tr><td>{kv} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                r.row,
                r.position,
                r.head,
                escape(&r.expected.to_string()),
                escape(&r.found.to_string())
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</td></tr>\n");
}

/// The walk as one self-contained HTML page.
pub fn render_html(walk: &Walk) -> String {
    let width = walk.width();
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        out,
        "<title>kvcheck explain: {}</title>",
        escape(&walk.subject)
    );
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
    out.push_str("<h1>kvcheck explain</h1>\n<div class=\"meta\">");
    let _ = write!(
        out,
        "<div><b>config</b>{}</div><div><b>subject</b>{}</div>",
        escape(&walk.config),
        escape(&walk.subject)
    );
    if let Some(note) = &walk.note {
        let _ = write!(out, "<div><b>note</b>{}</div>", escape(note));
    }
    out.push_str("</div>\n");
    match &walk.divergence {
        Some(d) => {
            let _ = writeln!(
                out,
                "<div class=\"verdict fail\">✗ {} — expected {}; actual {}</div>",
                escape(&d.summary()),
                escape(&d.expected),
                escape(&d.actual)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "<div class=\"verdict pass\">✓ no divergence: {} matches the model on all {} ops</div>",
                escape(&walk.subject),
                walk.ops
            );
        }
    }
    out.push_str("<div class=\"legend\">");
    let legend: [(&str, &str, &str); 8] = [
        ("sink", "", "sink (protected, [0,S))"),
        ("pinned", "", "pinned"),
        ("visible", "", "resident, visible"),
        ("hidden", "", "resident, hidden (evictable)"),
        ("evicted", "", "evicted (written before, gone)"),
        ("written", "", "written this step"),
        ("never", "", "never written"),
        (
            "wrong",
            "✗",
            "wrong row at the divergence (hover: held vs expected writer)",
        ),
    ];
    for (class, text, label) in legend {
        let style = if class == "wrong" {
            " style=\"background:#d93025;color:#fff;font-weight:700\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<span class=\"item\"><span class=\"sw {class}\"{style}>{text}</span>{}</span>",
            escape(label)
        );
    }
    out.push_str(
        "<span class=\"item\">cell text: the op that wrote the position (per head, a/b when heads differ); hover for details</span></div>\n",
    );
    out.push_str("<table class=\"grid\">\n<thead><tr><th>step · op</th><th>outcome</th>");
    for p in 0..width {
        let _ = write!(out, "<th class=\"pos\">{p}</th>");
    }
    out.push_str("<th>slots</th></tr></thead>\n<tbody>\n");
    for step in &walk.steps {
        row(&mut out, step, width, walk);
    }
    out.push_str("</tbody>\n</table>\n");
    let _ = writeln!(
        out,
        "<div class=\"foot\">{} of {} ops run; columns are positions 0..{}; slots: the subject's storage layout (c cold, - free).</div>",
        walk.steps.len(),
        walk.ops,
        width
    );
    out.push_str("</body>\n</html>\n");
    out
}
