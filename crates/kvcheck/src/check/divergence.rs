//! Divergences: the value the driver returns when a cache and the model
//! disagree, and the report a person reads.
//!
//! A divergence names the step, the op, expected against actual, and for
//! value mismatches which (position, writer) each wrong view row holds
//! instead of the expected one. It carries the failing prefix as a trace
//! with `expect` filled in by the model, ready to be saved and replayed.

use std::fmt;
use std::path::{Path, PathBuf};

use kvmodel::quant::cold_round_trip;
use kvmodel::{format_ranges, Config, Op, Outcome, Quant, Variant};

use crate::check::payload::{row, RowId};
use crate::check::relation::Relation;
use crate::check::reproduce::ReplayProgram;
use crate::check::trace::{OracleKind, OracleTag, Trace, TraceError, EXTENSION};
use crate::codec::Kv;
use crate::subject::SubjectFailure;

/// What disagreed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DivergenceKind {
    /// Success against refusal, or different error kinds.
    Outcome,
    /// Different global ends.
    GlobalEnd,
    /// Different visible positions.
    Visible,
    /// A view tensor of the wrong shape.
    Shape,
    /// View rows with the wrong values.
    Values,
    /// A view segment that claims to alias the cache's buffers does not
    /// (another storage, another offset, slots holding other positions),
    /// or a cache laid out as a ring copied a segment.
    Aliasing,
    /// Different capacities (growth).
    Capacity,
    /// Different resident bytes (docs/contract.md §6).
    ResidentBytes,
    /// The read-only probe after a refused op shows a changed cache.
    Probe,
    /// The cache failed outside the contract (backend error, bad payload).
    Backend,
    /// An external subject raised an exception where the model refuses,
    /// with exact kinds asked for (otherwise that agrees on "refused").
    Exception,
    /// An external subject's process exited (or closed its output) before
    /// answering; the report carries its exit status and stderr tail.
    Crash,
    /// An external subject did not answer within the timeout and was killed.
    Timeout,
    /// The cache panicked (caught; the case ends there).
    Panic,
    /// An external subject wrote a line that is not JSON, a response of the
    /// wrong shape or a payload of the wrong length.
    Protocol,
    /// Two runs of the subject that a relation of docs/contract.md §9 says must
    /// look the same to a caller do not (no model involved).
    Relation(Relation),
    /// The subject and another implementation (`--oracle SUBJECT`) show a
    /// caller different things at the same step.
    Differential,
    /// The subject answered *outside its domain* under `--strict-domain`,
    /// which takes the subject for one that serves the whole contract.
    Outside,
    /// The subject answered *outside its domain* to a request its declared
    /// domain admits: the declaration is wrong, or hides a bug.
    Domain,
    /// The op needs a capability the subject lacks, so it was not sent.
    /// Engines never generate such ops and replay reports such traces as
    /// skipped; it reaches a report only from a caller that did not check.
    Unsupported,
}

impl DivergenceKind {
    /// Snake_case name, as used in file names and reports.
    pub fn name(self) -> &'static str {
        match self {
            DivergenceKind::Outcome => "outcome",
            DivergenceKind::GlobalEnd => "global_end",
            DivergenceKind::Visible => "visible",
            DivergenceKind::Shape => "shape",
            DivergenceKind::Values => "values",
            DivergenceKind::Aliasing => "aliasing",
            DivergenceKind::Capacity => "capacity",
            DivergenceKind::ResidentBytes => "resident_bytes",
            DivergenceKind::Probe => "probe",
            DivergenceKind::Backend => "backend",
            DivergenceKind::Exception => "exception",
            DivergenceKind::Crash => "crash",
            DivergenceKind::Timeout => "timeout",
            DivergenceKind::Protocol => "protocol",
            DivergenceKind::Unsupported => "unsupported",
            DivergenceKind::Panic => "panic",
            DivergenceKind::Outside => "outside",
            DivergenceKind::Domain => "domain_violation",
            DivergenceKind::Relation(relation) => relation.kind_name(),
            DivergenceKind::Differential => "differential",
        }
    }
}

impl fmt::Display for DivergenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a row of D values came from, as far as the payload tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowSource {
    /// The payload of this write (possibly through the quantizer).
    Payload {
        /// Writer, position, batch row, head.
        id: RowId,
        /// Whether the values are the cold round trip of that payload.
        cold: bool,
    },
    /// All zeros: a head that was never written.
    Zeros,
    /// Matches no write of the trace.
    Unknown,
}

impl RowSource {
    /// What the model says a view row at (`position`, `batch`, `head`)
    /// must hold: its writer's payload (cold when the model quantized
    /// it), or zeros for a head never written. A row the latest write read
    /// and then trimmed (`trim = "after_read"`) is judged as it was read.
    pub fn expected(model: &kvmodel::Model, position: u64, batch: usize, head: usize) -> RowSource {
        match model
            .read_writers(position)
            .and_then(|w| w.get(head).copied().flatten())
        {
            Some(writer) => RowSource::Payload {
                id: RowId {
                    writer,
                    position,
                    batch,
                    head,
                },
                cold: model.is_cold(position),
            },
            None => RowSource::Zeros,
        }
    }
}

impl fmt::Display for RowSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowSource::Payload { id, cold } => {
                write!(
                    f,
                    "op {} at position {} head {}",
                    id.writer, id.position, id.head
                )?;
                if id.batch != 0 {
                    write!(f, " batch {}", id.batch)?;
                }
                if *cold {
                    write!(f, " (cold)")?;
                }
                Ok(())
            }
            RowSource::Zeros => write!(f, "zeros (never written)"),
            RowSource::Unknown => write!(f, "values written by no op"),
        }
    }
}

/// One view row that holds the wrong values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMismatch {
    /// K or V.
    pub kv: Kv,
    /// Row index in the view (0-based along the token axis).
    pub row: usize,
    /// The position the row stands for.
    pub position: u64,
    /// Reported head.
    pub head: usize,
    /// Batch row.
    pub batch: usize,
    /// What it should hold.
    pub expected: RowSource,
    /// What it holds.
    pub found: RowSource,
    /// The storage slot the cache's layout gives for the position, when
    /// the cache reports its layout.
    pub slot: Option<usize>,
}

impl fmt::Display for RowMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kv = match self.kv {
            Kv::K => "K",
            Kv::V => "V",
        };
        write!(
            f,
            "{kv} row {} (position {}, head {}, batch {}): holds {}, expected {}",
            self.row, self.position, self.head, self.batch, self.found, self.expected
        )?;
        match self.slot {
            Some(slot) => write!(f, " in slot {slot}"),
            None => Ok(()),
        }
    }
}

/// A disagreement between the model and a cache at one step.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// Index of the op in the trace.
    pub step: usize,
    /// The op.
    pub op: Op,
    /// What disagreed.
    pub kind: DivergenceKind,
    /// The model's side, in words.
    pub expected: String,
    /// The cache's side, in words.
    pub actual: String,
    /// For value divergences: the wrong rows (at most a few).
    pub rows: Vec<RowMismatch>,
    /// The ops up to and including the failing one, `expect` from the model.
    pub trace: Trace,
    /// Which implementation diverged (`dense`, `packed`, a fault name).
    pub subject: String,
    /// Where the trace was saved, once it is.
    pub saved: Option<PathBuf>,
    /// The command that reproduces it, where `kvcheck replay` cannot: a
    /// cache built in the user's own crate is replayed by that crate's
    /// test (`KVCHECK_REPLAY=TRACE cargo test NAME`). `None`: the replay
    /// command of the saved trace.
    pub reproduce: Option<String>,
}

impl Divergence {
    /// A one-line summary: `values at step 7 (write 8+4) on dense`.
    pub fn summary(&self) -> String {
        let against = match &self.trace.oracle {
            Some(OracleTag {
                kind: OracleKind::Subject,
                subject: Some(other),
                ..
            }) => format!(" against {other}"),
            _ => String::new(),
        };
        format!(
            "{} divergence at step {} ({}) on {}{against}",
            self.kind, self.step, self.op, self.subject
        )
    }

    /// Saves the failing trace under `dir` (created if needed) with a name
    /// built from the variant, the kind, the step and a content hash, and
    /// remembers the path.
    pub fn save_in(&mut self, dir: &Path) -> Result<PathBuf, TraceError> {
        let text = self.trace.to_json();
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let name = format!(
            "{}-{}-step{}-{:08x}{EXTENSION}",
            file_name_part(&self.subject),
            self.kind.name(),
            self.step,
            hash as u32
        );
        let path = dir.join(name);
        self.save_as(&path)?;
        Ok(path)
    }

    /// Saves the failing trace at exactly `path`, replacing what was there.
    pub fn save_as(&mut self, path: &Path) -> Result<(), TraceError> {
        let mut trace = self.trace.clone();
        trace.note = Some(format!(
            "{}: expected {}; actual {}",
            self.summary(),
            self.expected,
            self.actual
        ));
        trace.save(path)?;
        self.saved = Some(path.to_path_buf());
        Ok(())
    }

    /// The command that reproduces this divergence, once saved, spelled
    /// for where this process runs ([`ReplayProgram::current`]).
    pub fn replay_command(&self) -> Option<String> {
        if let Some(command) = &self.reproduce {
            return Some(command.clone());
        }
        let subject = match self.subject.as_str() {
            "dense" | "packed" => None,
            other => Some(other),
        };
        self.saved
            .as_ref()
            .map(|p| ReplayProgram::current().command(p, subject))
    }
}

/// `name` (a subject's, as reports print it) as part of a file name: its
/// first 48 characters, every one but ASCII letters, digits and `-` made
/// `_`, so that an `exec:` command line names a file on any system.
pub fn file_name_part(name: &str) -> String {
    name.chars()
        .take(48)
        .collect::<String>()
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
}

impl fmt::Display for Divergence {
    /// The report: a separator, config, step, op, expected vs actual, the
    /// wrong rows, and the replay command.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "──── kvcheck: {} ────", self.summary())?;
        writeln!(f, "config:   {}", describe_config(&self.trace.config))?;
        let start = self.step.saturating_sub(4);
        if start > 0 {
            writeln!(f, "ops:      … {start} earlier ops")?;
        }
        // A relation's trace runs past the step (its transformations are
        // drawn from the whole trace): the later ops are counted, not listed.
        let end = (self.step + 1).min(self.trace.ops.len());
        for (i, op) in self.trace.ops[..end].iter().enumerate().skip(start) {
            let marker = if i == self.step { "→" } else { " " };
            writeln!(f, "        {marker} {i:>4}: {op}")?;
        }
        if self.trace.ops.len() > end {
            writeln!(f, "          … {} later ops", self.trace.ops.len() - end)?;
        }
        writeln!(f, "expected: {}", self.expected)?;
        writeln!(f, "actual:   {}", self.actual)?;
        for row in &self.rows {
            writeln!(f, "          {row}")?;
        }
        if let Some(path) = &self.saved {
            writeln!(f, "trace:    {}", path.display())?;
        }
        if let Some(command) = self.replay_command() {
            writeln!(f, "reproduce: {command}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Divergence {}

/// A compact config description: `dense C=8 S=2 W=8 B=1 H=2 D=4 f32`
/// (`trim=after_read` added for that mode).
pub fn describe_config(c: &Config) -> String {
    let mut s = format!(
        "{} C={} S={} W={} B={} H={} D={} {}",
        match c.variant {
            Variant::Dense => "dense",
            Variant::Packed => "packed",
        },
        c.capacity,
        c.sink,
        c.effective_window(),
        c.batch,
        c.heads,
        c.head_dim,
        c.dtype.name()
    );
    if c.growth {
        s.push_str(" growth");
    }
    if c.global_sink > 0 {
        s.push_str(&format!(" GS={}", c.global_sink));
    }
    // Only the mode that is not the default is named, as in kvtrace/1.
    if !c.trim.is_default() {
        s.push_str(&format!(" trim={}", c.trim.name()));
    }
    if c.variant == Variant::Packed {
        let p = c.packed_policy();
        s.push_str(&format!(
            " keep={} {}",
            p.keep_recent_chunks,
            p.quant.name()
        ));
        if p.pack_sink {
            s.push_str(" pack_sink");
        }
    }
    s
}

/// An outcome in words: `ok G=12 visible 0..2 6..12`, `err evicted`.
pub fn describe_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Err(kind) => format!("err {kind}"),
        Outcome::Ok(effect) => match &effect.visible {
            None => format!("ok G={}", effect.global_end),
            Some(visible) => format!(
                "ok G={} visible {}",
                effect.global_end,
                format_ranges(visible.iter().copied())
            ),
        },
    }
}

/// Rows searched at most when decoding, so a report on a huge trace stays quick.
const DECODE_BUDGET: usize = 1 << 16;

/// Which write of `ops` (if any) produced `values`, searching every write's
/// rows for this batch row and `kv`, hot and cold.
pub fn decode_row(config: &Config, ops: &[Op], kv: Kv, batch: usize, values: &[f32]) -> RowSource {
    if values.iter().all(|&x| x.to_bits() == 0) {
        return RowSource::Zeros;
    }
    let quant = match config.variant {
        Variant::Packed => config.packed_policy().quant,
        Variant::Dense => Quant::None,
    };
    let same = |a: &[f32], b: &[f32]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    };
    let mut budget = DECODE_BUDGET;
    for (writer, op) in ops.iter().enumerate().rev() {
        let Op::Write(w) = op else { continue };
        if w.start < 0 || w.len <= 0 {
            continue;
        }
        let heads = match w.heads {
            Some([first, count])
                if first >= 0
                    && count >= 1
                    && first.saturating_add(count) <= config.heads as i64 =>
            {
                first as usize..(first + count) as usize
            }
            _ => 0..config.heads,
        };
        for position in w.start as u64..(w.start as u64).saturating_add(w.len as u64) {
            for head in heads.clone() {
                if budget == 0 {
                    return RowSource::Unknown;
                }
                budget -= 1;
                let id = RowId {
                    writer: writer as u64,
                    position,
                    batch,
                    head,
                };
                let hot = row(config, kv, id);
                if same(&hot, values) {
                    return RowSource::Payload { id, cold: false };
                }
                if quant != Quant::None && same(&cold_round_trip(&hot, quant, config.dtype), values)
                {
                    return RowSource::Payload { id, cold: true };
                }
            }
        }
    }
    RowSource::Unknown
}

/// The divergence kind of a subject's misbehaviour, or `None` for an
/// answer a caller sees as a refusal (a contract refusal or a library's
/// exception). The one classification every path that drives a subject
/// uses: the adapter's own failure is never the cache's refusal.
pub fn misbehaviour(failure: &SubjectFailure) -> Option<DivergenceKind> {
    match failure {
        SubjectFailure::Refused { .. }
        | SubjectFailure::Exception { .. }
        | SubjectFailure::Outside { .. } => None,
        SubjectFailure::Adapter { .. } | SubjectFailure::Protocol { .. } => {
            Some(DivergenceKind::Protocol)
        }
        SubjectFailure::Crash { .. } => Some(DivergenceKind::Crash),
        SubjectFailure::Timeout { .. } => Some(DivergenceKind::Timeout),
        SubjectFailure::Panicked { .. } => Some(DivergenceKind::Panic),
    }
}
