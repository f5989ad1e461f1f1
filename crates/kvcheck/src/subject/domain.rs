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

use kvmodel::{Config, Model, Op, Write};
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

/// Which configurations a subject opens: each limit left out admits every
/// value. Besides these, a domain whose chunks never fit beside the sink
/// (`oversized: false` with no declared length at most `C − S`) opens no
/// configuration with that little room, since it admits no write there
/// ([`Domain::opens`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigLimits {
    /// The least room beside the sink, `C − S`: a pipeline whose chunk
    /// is fixed opens no cache too small for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_room: Option<u64>,
    /// The least window beside the sink, `W − S` (`W = C` without a
    /// window): a chunk wider than it is never read whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_window: Option<u64>,
    /// The batch sizes it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<Vec<usize>>,
    /// The head counts it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads: Option<Vec<usize>>,
    /// The head dimensions it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<Vec<usize>>,
}

impl ConfigLimits {
    /// What both limits admit: the larger least value, the common listed values.
    fn intersect(&self, other: &ConfigLimits) -> ConfigLimits {
        fn most(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            a.max(b)
        }
        fn common(a: &Option<Vec<usize>>, b: &Option<Vec<usize>>) -> Option<Vec<usize>> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.iter().copied().filter(|x| b.contains(x)).collect()),
                (a, b) => a.clone().or_else(|| b.clone()),
            }
        }
        ConfigLimits {
            min_room: most(self.min_room, other.min_room),
            min_window: most(self.min_window, other.min_window),
            batch: common(&self.batch, &other.batch),
            heads: common(&self.heads, &other.heads),
            head_dim: common(&self.head_dim, &other.head_dim),
        }
    }
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
        }
    }

    /// Whether ops inside this domain can reach the labelled coverage
    /// `event` (see `check::coverage`): a suite does not require an event
    /// only requests the domain leaves out reach, such as the refusal of a
    /// gap when `gaps` is false.
    pub fn allows_event(&self, event: &str) -> bool {
        match event {
            "error:non_sequential" => self.gaps,
            "error:invalid_argument" | "error:negative_window" | "error:head_range" => {
                self.malformed
            }
            "error:chunk_too_large" => self.oversized,
            // Only a rewrite of an older chunk can reach evicted rows or
            // overlap two writes.
            "error:evicted" | "overlap_write" => self.rewrites == Rewrites::Any,
            "tail_rewrite" => self.rewrites != Rewrites::None,
            "error:evict_too_many" => self.evict == Moves::Any,
            "error:pin_range" | "unpin" => self.pin == Moves::Any,
            "rewind_into_evicted" | "error:rewind_ahead" => self.rewinds == Rewinds::Any,
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

    /// `Ok` when this domain opens `config`: its [`ConfigLimits`], and
    /// room beside the sink for some declared chunk where writes longer
    /// than that room are left out (otherwise no write of the config would
    /// be admitted); else why not, in words.
    pub fn opens(&self, config: &Config) -> Result<(), String> {
        let room = config.capacity.saturating_sub(config.sink) as u64;
        let window = config.effective_window().saturating_sub(config.sink) as u64;
        let limits = &self.configs;
        if let Some(least) = limits.min_room.filter(|&least| room < least) {
            return Err(format!(
                "C − S = {room}, below \"configs\": {{\"min_room\": {least}}}"
            ));
        }
        if let Some(least) = limits.min_window.filter(|&least| window < least) {
            return Err(format!(
                "W − S = {window}, below \"configs\": {{\"min_window\": {least}}}"
            ));
        }
        let listed = [
            ("batch", &limits.batch, config.batch),
            ("heads", &limits.heads, config.heads),
            ("head_dim", &limits.head_dim, config.head_dim),
        ];
        for (field, allowed, value) in listed {
            if let Some(allowed) = allowed.as_ref().filter(|a| !a.contains(&value)) {
                return Err(format!(
                    "{field} {value}, not in \"configs\": {{\"{field}\": {allowed:?}}}"
                ));
            }
        }
        if !self.oversized {
            let fits = match &self.chunks {
                Chunks::Any => room >= 1,
                Chunks::Lengths(lengths) => lengths.iter().any(|&n| n <= room),
                Chunks::Multiple(k) => *k <= room,
            };
            if !fits {
                return Err(format!(
                    "C − S = {room} holds no declared chunk (\"oversized\": false)"
                ));
            }
        }
        Ok(())
    }

    /// `op` moved inside this domain where a nearby op is inside: a gap
    /// or a rewrite the domain leaves out becomes an append, a length it
    /// leaves out the nearest one it allows, a probe it leaves out an
    /// append, a malformed request a valid one, an eviction or pin the
    /// scene cut's, a rewind or a count the cache does not hold one it
    /// does. What cannot be moved inside becomes the next chunk (an
    /// append at the global end), which is inside in every configuration
    /// the domain [opens](Domain::opens).
    pub fn shape(&self, model: &Model, latest: Latest, op: Op) -> Op {
        if self.admits(model, latest, &op).is_ok() {
            return op;
        }
        let g = model.global_end() as i64;
        let room = (model.capacity() - model.config().sink).max(1) as u64;
        let length = |len: u64| -> i64 {
            let len = if self.oversized { len } else { len.min(room) };
            let len = match &self.chunks {
                Chunks::Any => len,
                Chunks::Lengths(lengths) => lengths
                    .iter()
                    .copied()
                    .filter(|&n| self.oversized || n <= room)
                    .min_by_key(|&n| n.abs_diff(len))
                    .unwrap_or(len),
                Chunks::Multiple(k) => {
                    let k = (*k).max(1);
                    let up = len.div_ceil(k).max(1) * k;
                    if !self.oversized && up > room && k <= room {
                        room / k * k
                    } else {
                        up
                    }
                }
            };
            len.max(1) as i64
        };
        let shaped = match op {
            Op::Write(w) => {
                let len = length(w.len.max(1) as u64);
                let write = |start: i64, len: i64| {
                    Op::Write(Write {
                        start,
                        len,
                        heads: w.heads.filter(|[f, c]| *f >= 0 && *c >= 1),
                        recent_window: w.recent_window.filter(|r| *r >= 0),
                    })
                };
                match latest.0 {
                    // A rewrite becomes the pipeline's: the latest chunk again.
                    Some((start, n)) if w.start < g && self.rewrites == Rewrites::Latest => {
                        write(start as i64, n as i64)
                    }
                    _ => write(g, len),
                }
            }
            Op::Evict { .. } if self.evict == Moves::SceneCut => match scene_cut(model, latest) {
                Some((start, _)) => Op::Evict {
                    tokens: model.evictable().iter().filter(|&&p| p < start).count() as i64,
                },
                None => op,
            },
            Op::Pin { .. } if self.pin == Moves::SceneCut => match scene_cut(model, latest) {
                Some((_, len)) => Op::Pin { tokens: len as i64 },
                None => op,
            },
            Op::Rewind { to } if self.rewinds == Rewinds::Held => Op::Rewind {
                to: to.clamp(0, held_prefix(model) as i64),
            },
            Op::Evict { tokens } if self.evict == Moves::Held => Op::Evict {
                tokens: tokens.clamp(1, model.evictable().len().max(1) as i64),
            },
            Op::Pin { tokens } if self.pin == Moves::Held => Op::Pin {
                tokens: tokens.clamp(1, g.max(1)),
            },
            Op::Rewind { to } if to < 0 => Op::Rewind { to: 0 },
            Op::Evict { tokens } if tokens < 0 => Op::Evict { tokens: 0 },
            Op::Pin { tokens } if tokens < 0 => Op::Pin { tokens: 0 },
            other => other,
        };
        if self.admits(model, latest, &shaped).is_ok() {
            return shaped;
        }
        // Nothing nearby is inside (an evict on a cache with nothing
        // evictable, a scene cut before the second chunk): the next chunk
        // is, in every configuration the domain opens, so the draw stays
        // inside and no generator rejects it.
        Op::Write(Write::new(g, length(1)))
    }

    /// For an op a subject answered *outside*: the widest declaration of
    /// [`SUGGESTIONS`] that leaves it out, which would keep such ops from
    /// being drawn; `None` when none does. The widest, so that a cache is
    /// told only what it refused: a cache that refused a rewrite of an
    /// older chunk is told `"rewrites": "latest"`, one that refused the
    /// latest chunk's rewrite `"rewrites": "none"` ([`narrowest`] keeps,
    /// per field, the narrowest a run's cuts asked for).
    pub fn suggest(model: &Model, latest: Latest, op: &Op) -> Option<&'static str> {
        SUGGESTIONS.iter().find_map(|&(_, narrowed)| {
            narrowed(Domain::default())
                .admits(model, latest, op)
                .err()
                .map(|e| e.declaration)
        })
    }
}

/// A domain narrowed in one field.
pub type Narrowing = fn(Domain) -> Domain;

/// The declarations an outside warning may suggest, each with the domain
/// field it narrows, per field from the widest to the narrowest: each
/// narrows the whole domain in one field ([`Domain::suggest`] tries them in
/// this order).
pub const SUGGESTIONS: &[(&str, Narrowing)] = &[
    ("\"malformed\": false", |d| Domain {
        malformed: false,
        ..d
    }),
    ("\"gaps\": false", |d| Domain { gaps: false, ..d }),
    ("\"oversized\": false", |d| Domain {
        oversized: false,
        ..d
    }),
    ("\"rewrites\": \"latest\"", |d| Domain {
        rewrites: Rewrites::Latest,
        ..d
    }),
    ("\"rewrites\": \"none\"", |d| Domain {
        rewrites: Rewrites::None,
        ..d
    }),
    ("\"probes\": \"after_append\"", |d| Domain {
        probes: Probes::AfterAppend,
        ..d
    }),
    ("\"probes\": \"none\"", |d| Domain {
        probes: Probes::None,
        ..d
    }),
    ("\"rewinds\": \"held\"", |d| Domain {
        rewinds: Rewinds::Held,
        ..d
    }),
    ("\"evict\": \"held\"", |d| Domain {
        evict: Moves::Held,
        ..d
    }),
    ("\"evict\": \"scene_cut\"", |d| Domain {
        evict: Moves::SceneCut,
        ..d
    }),
    ("\"pin\": \"held\"", |d| Domain {
        pin: Moves::Held,
        ..d
    }),
    ("\"pin\": \"scene_cut\"", |d| Domain {
        pin: Moves::SceneCut,
        ..d
    }),
];

/// The field a declaration narrows (`"rewrites"` of `"rewrites": "none"`).
pub fn declared_field(declaration: &str) -> &str {
    declaration.split(':').next().unwrap_or(declaration)
}

/// Of two suggested declarations of the same field, the narrower (the later
/// in [`SUGGESTIONS`]): declaring it leaves out what either left out, so a
/// cache that refused both an older chunk's rewrite and the latest one's is
/// told `"rewrites": "none"`, never `"latest"`, which would admit the
/// requests it refused.
pub fn narrowest<'a>(a: &'a str, b: &'a str) -> &'a str {
    let rank = |d: &str| SUGGESTIONS.iter().position(|(s, _)| *s == d);
    if rank(b) > rank(a) {
        b
    } else {
        a
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
