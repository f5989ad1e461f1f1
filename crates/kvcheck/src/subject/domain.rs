//! What a subject can be asked: its declared domain.
//!
//! A cache inside a video pipeline is never asked for a gap, a rewrite of
//! anything but the chunk being denoised, or a chunk wider than its
//! window. Such a subject answers a request it never gets with *outside*
//! ([`kvcache::Error::Outside`], the protocol's `outside` answer): no
//! divergence, the case is judged up to that op and cut there. A subject
//! may also declare its [`Domain`] beside its capabilities; engines then
//! draw only inside it ([`Domain::shape`]), never send an op outside it
//! ([`Domain::admits`]), and take an *outside* answer to a request the
//! domain admits for a domain violation. A subject that declares nothing
//! is asked everything.

use kvmodel::{Model, Op, Trim};
use serde::{Deserialize, Serialize};

/// Which rewrites of positions below the global end a subject is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rewrites {
    /// Any range (the contract's own domain).
    #[default]
    Any,
    /// Only the latest chunk, exactly: `start` and `len` of the latest
    /// append (a denoising step, the clean re-run).
    Latest,
    /// None: every write with `len > 0` appends at the global end.
    None,
}

/// Which chunk lengths a subject is asked to write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Chunks {
    /// Any length.
    #[default]
    Any,
    /// One of these lengths (frames per block, say).
    Lengths(Vec<u64>),
    /// A positive multiple of this length.
    Multiple(u64),
}

/// Which zero-length writes (probes of the view) a subject is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probes {
    /// Anywhere the contract allows one.
    #[default]
    Any,
    /// At the global end, once a chunk has been appended since the last
    /// reset (a pipeline's attention has nothing to read before).
    AfterAppend,
    /// None.
    None,
}

/// Which evictions or pins a subject is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moves {
    /// Any count.
    #[default]
    Any,
    /// Only a count the contract accepts on the current state, at least
    /// one: never an evict on a cache with nothing evictable or of more
    /// than it holds (`evict_too_many`), never an unpin (`pin 0`) or a
    /// pin the contract refuses (`pin_range`). A cache whose evict or pin
    /// is a library call on the rows it holds is asked these.
    Held,
    /// Those of a scene cut with a shot sink (`global_sink > 0`), after a
    /// chunk that is not the first of the video: `pin` pins exactly the
    /// latest chunk; `evict` drops every evictable position before it
    /// while no pin is held (the clean re-cache of the new shot).
    SceneCut,
}

/// Which rewinds a subject is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rewinds {
    /// Any position (the contract refuses those past the global end).
    #[default]
    Any,
    /// Only to a position `to ≤ G` below which nothing was evicted: a
    /// cache that crops its rows cannot bring back rows it no longer
    /// holds (the coverage event `rewind_into_evicted`), and has no rows
    /// past the global end to rewind to (`rewind_ahead`).
    Held,
}

/// The requests a subject can be asked (see the module docs). Every field
/// defaults to the contract's whole domain, so a declaration names only
/// what it narrows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Domain {
    /// Rewrites below the global end.
    pub rewrites: Rewrites,
    /// Lengths of writes with `len > 0`.
    pub chunks: Chunks,
    /// Zero-length writes.
    pub probes: Probes,
    /// Whether a write may start past the global end (the contract refuses it).
    pub gaps: bool,
    /// Whether a write may be longer than `C − S` (the contract refuses it).
    pub oversized: bool,
    /// Whether requests with negative numbers or an empty head range are
    /// asked (the contract refuses them).
    pub malformed: bool,
    /// Which evictions.
    pub evict: Moves,
    /// Which pins.
    pub pin: Moves,
    /// Which rewinds.
    pub rewinds: Rewinds,
    /// Which configurations it opens (boxed: most domains leave it
    /// empty, and capabilities carry a domain by value).
    pub configs: Box<ConfigLimits>,
    /// The domain of its `after_read` configurations, where it differs
    /// from this one ([`Domain::in_mode`]): one cache that trims before
    /// the read in one mode and after it in the other is one subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_read: Option<Box<Domain>>,
}

impl Default for Domain {
    /// The contract's whole domain.
    fn default() -> Domain {
        Domain {
            rewrites: Rewrites::Any,
            chunks: Chunks::Any,
            probes: Probes::Any,
            gaps: true,
            oversized: true,
            malformed: true,
            evict: Moves::Any,
            pin: Moves::Any,
            rewinds: Rewinds::Any,
            configs: Box::default(),
            after_read: None,
        }
    }
}

/// Why an op lies outside a domain: the declaration that leaves it out
/// (as the JSON a subject declares) and the op in words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} is outside the declared domain ({declaration})")]
pub struct Excluded {
    /// The declaration that excludes it, as JSON (`"gaps": false`).
    pub declaration: &'static str,
    /// The op.
    pub op: String,
}

/// The latest chunk a pipeline would be denoising: the latest append with
/// `len > 0` since the last reset or rewind, as the ops tell it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Latest(pub Option<(u64, u64)>);

impl Latest {
    /// Follows `op`, applied to a cache whose global end was `before` and
    /// which accepted it (`ok`).
    pub fn follow(&mut self, before: u64, op: &Op, ok: bool) {
        if !ok {
            return;
        }
        match op {
            Op::Write(w) if w.start >= 0 && w.start as u64 == before && w.len > 0 => {
                self.0 = Some((before, w.len as u64));
            }
            Op::Rewind { .. } | Op::Reset => self.0 = None,
            _ => {}
        }
    }
}

fn malformed(op: &Op) -> bool {
    match op {
        Op::Write(w) => {
            w.start < 0
                || w.len < 0
                || w.recent_window.is_some_and(|r| r < 0)
                || w.heads.is_some_and(|[first, count]| first < 0 || count < 1)
        }
        Op::Rewind { to } => *to < 0,
        Op::Evict { tokens } | Op::Pin { tokens } => *tokens < 0,
        Op::Reset => false,
    }
}

impl Domain {
    /// The narrowest domain of each field but `chunks` and `configs`: a
    /// pipeline's chunk loop.
    pub fn pipeline() -> Domain {
        Domain {
            rewrites: Rewrites::Latest,
            chunks: Chunks::Any,
            probes: Probes::AfterAppend,
            gaps: false,
            oversized: false,
            malformed: false,
            evict: Moves::SceneCut,
            pin: Moves::SceneCut,
            rewinds: Rewinds::Held,
            configs: Box::default(),
            after_read: None,
        }
    }

    /// Whether ops inside this domain can reach the labelled coverage
    /// `event` (see `check::coverage`): a suite does not require an event
    /// only requests the domain leaves out reach, such as the refusal of a
    /// gap when `gaps` is false.
    pub fn allows_event(&self, event: &str) -> bool {
        self.allows_event_here(event)
            || self
                .after_read
                .as_ref()
                .is_some_and(|d| d.allows_event_here(event))
    }

    /// [`Domain::allows_event`] of this domain's own fields.
    fn allows_event_here(&self, event: &str) -> bool {
        match event {
            "error:non_sequential" => self.gaps,
            "error:invalid_argument" | "error:negative_window" | "error:head_range" => {
                self.malformed
            }
            // A cache that only grows never runs out of room (its
            // largest capacity is far beyond any drawn chunk).
            "error:chunk_too_large" => self.oversized && self.configs.growth != Some(true),
            // Only a rewrite of an older chunk can reach evicted rows or
            // overlap two writes.
            "error:evicted" | "overlap_write" => self.rewrites == Rewrites::Any,
            "tail_rewrite" => self.rewrites != Rewrites::None,
            "error:evict_too_many" => self.evict == Moves::Any,
            "error:pin_range" | "unpin" => self.pin == Moves::Any,
            "rewind_into_evicted" | "error:rewind_ahead" => self.rewinds == Rewinds::Any,
            "eviction_beside_sink" => self.configs.max_sink != Some(0),
            "growth" => self.configs.growth != Some(false),
            _ => true,
        }
    }

    /// Whether this is the contract's whole domain.
    pub fn is_whole(&self) -> bool {
        *self == Domain::default()
    }

    /// What both domains admit (a differential oracle's draws): each
    /// field the narrower of the two.
    pub fn intersect(&self, other: &Domain) -> Domain {
        fn narrower<T: Copy + PartialEq + Default>(a: T, b: T) -> T {
            if a == T::default() {
                b
            } else {
                a
            }
        }
        let chunks = match (&self.chunks, &other.chunks) {
            (Chunks::Any, c) | (c, Chunks::Any) => c.clone(),
            (Chunks::Lengths(a), Chunks::Lengths(b)) => {
                Chunks::Lengths(a.iter().copied().filter(|n| b.contains(n)).collect())
            }
            (Chunks::Lengths(a), Chunks::Multiple(k))
            | (Chunks::Multiple(k), Chunks::Lengths(a)) => {
                Chunks::Lengths(a.iter().copied().filter(|n| n % k.max(&1) == 0).collect())
            }
            (Chunks::Multiple(a), Chunks::Multiple(b)) => Chunks::Multiple(lcm(*a, *b)),
        };
        let probes = match (self.probes, other.probes) {
            (Probes::None, _) | (_, Probes::None) => Probes::None,
            (Probes::AfterAppend, _) | (_, Probes::AfterAppend) => Probes::AfterAppend,
            _ => Probes::Any,
        };
        let rewrites = match (self.rewrites, other.rewrites) {
            (Rewrites::None, _) | (_, Rewrites::None) => Rewrites::None,
            (Rewrites::Latest, _) | (_, Rewrites::Latest) => Rewrites::Latest,
            _ => Rewrites::Any,
        };
        Domain {
            rewrites,
            chunks,
            probes,
            gaps: self.gaps && other.gaps,
            oversized: self.oversized && other.oversized,
            malformed: self.malformed && other.malformed,
            evict: narrower(self.evict, other.evict),
            pin: narrower(self.pin, other.pin),
            rewinds: narrower(self.rewinds, other.rewinds),
            configs: Box::new(self.configs.intersect(&other.configs)),
            after_read: match (&self.after_read, &other.after_read) {
                (None, None) => None,
                _ => Some(Box::new(
                    self.in_mode(Trim::AfterRead)
                        .intersect(other.in_mode(Trim::AfterRead)),
                )),
            },
        }
    }

    fn length_allowed(&self, len: u64) -> bool {
        match &self.chunks {
            Chunks::Any => true,
            Chunks::Lengths(lengths) => lengths.contains(&len),
            Chunks::Multiple(k) => *k > 0 && len % k == 0,
        }
    }

    /// `Ok` when `op` lies inside this domain on a cache in the state of
    /// `model` (the contract's state before the op) whose latest chunk is
    /// `latest`; otherwise the declaration that excludes it.
    pub fn admits(&self, model: &Model, latest: Latest, op: &Op) -> Result<(), Excluded> {
        let mode = self.in_mode(model.config().trim);
        if !std::ptr::eq(mode, self) {
            return mode.admits(model, latest, op);
        }
        let out = |declaration| {
            Err(Excluded {
                declaration,
                op: op.to_string(),
            })
        };
        if !self.malformed && malformed(op) {
            return out("\"malformed\": false");
        }
        let g = model.global_end();
        let config = model.config();
        match op {
            Op::Write(w) if w.start >= 0 && w.len >= 0 => {
                let (start, len) = (w.start as u64, w.len as u64);
                if start > g && !self.gaps {
                    return out("\"gaps\": false");
                }
                if len == 0 {
                    return match self.probes {
                        Probes::Any => Ok(()),
                        Probes::AfterAppend if start == g && latest.0.is_some() => Ok(()),
                        Probes::AfterAppend => out("\"probes\": \"after_append\""),
                        Probes::None => out("\"probes\": \"none\""),
                    };
                }
                if !self.oversized && len > (model.capacity() - config.sink) as u64 {
                    return out("\"oversized\": false");
                }
                if !self.length_allowed(len) {
                    return out("\"chunks\"");
                }
                if start < g {
                    match self.rewrites {
                        Rewrites::Any => {}
                        Rewrites::Latest if latest.0 == Some((start, len)) => {}
                        Rewrites::Latest => return out("\"rewrites\": \"latest\""),
                        Rewrites::None => return out("\"rewrites\": \"none\""),
                    }
                }
                Ok(())
            }
            Op::Evict { tokens } if self.evict == Moves::SceneCut => {
                match scene_cut(model, latest) {
                    Some((start, _)) if model.pin_range().is_none() => {
                        let before = model.evictable().iter().filter(|&&p| p < start).count();
                        if *tokens >= 0 && *tokens as usize == before {
                            return Ok(());
                        }
                        out("\"evict\": \"scene_cut\"")
                    }
                    _ => out("\"evict\": \"scene_cut\""),
                }
            }
            Op::Pin { tokens } if self.pin == Moves::SceneCut => match scene_cut(model, latest) {
                Some((_, len)) if *tokens >= 0 && *tokens as u64 == len => Ok(()),
                _ => out("\"pin\": \"scene_cut\""),
            },
            Op::Evict { tokens } if self.evict == Moves::Held => {
                if *tokens >= 1 && model.clone().evict(*tokens).is_ok() {
                    return Ok(());
                }
                out("\"evict\": \"held\"")
            }
            Op::Pin { tokens } if self.pin == Moves::Held => {
                if *tokens >= 1 && model.clone().pin(*tokens).is_ok() {
                    return Ok(());
                }
                out("\"pin\": \"held\"")
            }
            Op::Rewind { to } if self.rewinds == Rewinds::Held => {
                if *to >= 0 && (*to as u64) <= held_prefix(model) {
                    return Ok(());
                }
                out("\"rewinds\": \"held\"")
            }
            _ => Ok(()),
        }
    }
}

/// The largest `to` a held rewind may go back to: the global end, or the
/// first position below it that is no longer resident.
fn held_prefix(model: &Model) -> u64 {
    let mut held = 0;
    for position in model.resident() {
        if position != held {
            break;
        }
        held += 1;
    }
    held.min(model.global_end())
}

/// The latest chunk, when a scene cut may follow it: a shot sink exists
/// (`global_sink > 0`) and the chunk is not the first of the video.
fn scene_cut(model: &Model, latest: Latest) -> Option<(u64, u64)> {
    latest
        .0
        .filter(|&(start, _)| start > 0 && model.config().global_sink > 0)
}

fn lcm(a: u64, b: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    match (a, b) {
        (0, x) | (x, 0) => x,
        _ => a / gcd(a, b) * b,
    }
}

#[cfg(test)]
mod tests;

mod configs;
mod shape;
mod suggest;
mod trims;

pub use configs::{ConfigLimits, Unopened};
pub use suggest::{declared_field, narrowest, Narrowing, SUGGESTIONS};
