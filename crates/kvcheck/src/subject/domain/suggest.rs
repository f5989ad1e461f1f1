//! What an *outside* answer suggests declaring: the one-field narrowings
//! of the whole domain, widest first, and how two of one field combine.

use kvmodel::{Model, Op};

use super::{Domain, Latest, Moves, Probes, Rewinds, Rewrites};

impl Domain {
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
