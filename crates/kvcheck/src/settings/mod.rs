//! Every knob of kvcheck, in the manner of proptest's `Config`: the table
//! [`KNOBS`] (each knob's environment variable, its default, what it sets)
//! and the typed [`Settings`] with one field per knob.
//!
//! [`Settings::from_env`] is the one place that reads the environment for
//! them. It runs once at each entry point (the `kvcheck` binary before it
//! runs a command, a property suite's test, a fuzz target or bench that
//! needs a knob) and the entry point passes the settings down: library code
//! takes the values it needs as parameters ([`crate::engine::suite::SuiteSettings`],
//! a subject's or an oracle's options, a minimization's budget) and never
//! reads a variable itself (a test in `tests/harness/layers.rs` keeps it
//! so). One parse policy for all of them: a variable that is set but does
//! not parse is an error naming the variable and the value, never a silent
//! fallback to the default; unset or blank is the default.
//!
//! Command-line options take precedence over the variables where both
//! exist (`--jobs` over `KVCHECK_JOBS`, and so on): the binary resolves the
//! settings first and lets its options override fields.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// How a knob's value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole number ≥ 1.
    Count,
    /// A whole number ≥ 0 (a seed).
    Number,
    /// Seconds > 0, fractions allowed.
    Seconds,
    /// `1`, `true`, `yes` or `0`, `false`, `no` (any case).
    Flag,
    /// Free text parsed by its own consumer (a subject, an oracle).
    Text,
}

/// One knob: the variable, its default in words, and what it sets.
#[derive(Clone, Copy, Debug)]
pub struct Knob {
    /// The environment variable.
    pub var: &'static str,
    /// How its value is read.
    pub kind: Kind,
    /// The default, as documentation says it.
    pub default: &'static str,
    /// What it sets.
    pub meaning: &'static str,
}

/// Every knob, in the order `docs/commands.md` lists them.
pub const KNOBS: &[Knob] = &[
    Knob {
        var: "KVCHECK_CASES",
        kind: Kind::Count,
        default: "256",
        meaning: "op sequences per profile of the property suites",
    },
    Knob {
        var: "KVCHECK_MAX_OPS",
        kind: Kind::Count,
        default: "40",
        meaning: "most ops per drawn sequence of the property suites (`run` takes `--max-ops`, default 64)",
    },
    Knob {
        var: "KVCHECK_SEED",
        kind: Kind::Number,
        default: "a fixed seed per profile",
        meaning: "the suites' proptest seed",
    },
    Knob {
        var: "KVCHECK_SUBJECT",
        kind: Kind::Text,
        default: "cache",
        meaning: "the subject of the property suites (any `--subject` form)",
    },
    Knob {
        var: "KVCHECK_ORACLE",
        kind: Kind::Text,
        default: "model",
        meaning: "what a subject is checked against (`--oracle`)",
    },
    Knob {
        var: "KVCHECK_JOBS",
        kind: Kind::Count,
        default: "every available core",
        meaning: "worker threads of run, explore and power (`--jobs`)",
    },
    Knob {
        var: "KVCHECK_MAX_TESTS",
        kind: Kind::Count,
        default: "2000",
        meaning: "lockstep runs a minimization may spend (`--max-tests`)",
    },
    Knob {
        var: "KVCHECK_EXPLORE_DEPTH",
        kind: Kind::Count,
        default: "3",
        meaning: "ops per explored sequence (`explore --depth`)",
    },
    Knob {
        var: "KVCHECK_SUBJECT_TIMEOUT",
        kind: Kind::Seconds,
        default: "10",
        meaning: "seconds an `exec:` subject has per response (`--subject-timeout`)",
    },
    Knob {
        var: "KVCHECK_EXACT_KINDS",
        kind: Kind::Flag,
        default: "no",
        meaning: "compare an `exec:` subject's error kinds exactly (`--exact-kinds`)",
    },
    Knob {
        var: "KVCHECK_STRICT_DOMAIN",
        kind: Kind::Flag,
        default: "no",
        meaning: "every *outside* answer of an `exec:` subject is a divergence (`--strict-domain`)",
    },
    Knob {
        var: "KVCHECK_RELATION_INSTANCES",
        kind: Kind::Count,
        default: "2",
        meaning: "instances of each relation checked per trace (`--oracle self`)",
    },
    Knob {
        var: "KVCHECK_REPLAY",
        kind: Kind::Text,
        default: "unset",
        meaning: "a saved trace that the one-call check of a Rust cache replays alone in place of its campaign (its test's reproduce line)",
    },
];

/// A knob whose variable is set to something it cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {expected}")]
pub struct SettingError {
    /// The variable.
    pub var: &'static str,
    /// What it holds.
    pub value: String,
    /// What it should hold.
    pub expected: &'static str,
}

/// The settings of one run, one field per knob of [`KNOBS`]. Build them
/// with [`Settings::from_env`] at an entry point, or from
/// [`Settings::default`] (every default, nothing read) and set fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Op sequences per profile of the property suites.
    ///
    /// `KVCHECK_CASES`, default 256 ([`DEFAULT_CASES`]); a larger value than
    /// a `u32` holds is the largest `u32`.
    pub cases: u32,
    /// Most ops per drawn sequence of the property suites.
    ///
    /// `KVCHECK_MAX_OPS`, default 40 ([`DEFAULT_MAX_OPS`]).
    pub max_ops: usize,
    /// The suites' proptest seed.
    ///
    /// `KVCHECK_SEED`, default `None`: a fixed seed per profile.
    pub seed: Option<u64>,
    /// The subject of the property suites, as text in any `--subject`
    /// form; `SubjectSpec::configured` (in `subject`) parses it.
    ///
    /// `KVCHECK_SUBJECT`, default `None`: the shipped caches (`cache`).
    /// Kept as text so that a command that never checks the suites'
    /// subject (every `kvcheck` command) is not stopped by it, and so that
    /// a subject kind registered by a test binary
    /// ([`crate::subject::register`]) parses once it is registered.
    pub subject: Option<String>,
    /// What a subject is checked against, as text in any `--oracle` form;
    /// `Oracle::configured` (in `engine::oracle`) parses it.
    ///
    /// `KVCHECK_ORACLE`, default `None`: the model (or, for a command that
    /// reads a trace, the oracle the trace names).
    pub oracle: Option<String>,
    /// Worker threads of `run`, `explore` and `power` (`--jobs`);
    /// [`Settings::workers`] resolves the default.
    ///
    /// `KVCHECK_JOBS`, default `None`: every available core.
    pub jobs: Option<usize>,
    /// Lockstep runs a minimization may spend (`--max-tests`).
    ///
    /// `KVCHECK_MAX_TESTS`, default 2000
    /// ([`DEFAULT_MAX_TESTS`]).
    pub max_tests: usize,
    /// Ops per explored sequence (`explore --depth`).
    ///
    /// `KVCHECK_EXPLORE_DEPTH`, default 3
    /// ([`DEFAULT_DEPTH`]).
    pub explore_depth: usize,
    /// Time an `exec:` subject has per response (`--subject-timeout`).
    ///
    /// `KVCHECK_SUBJECT_TIMEOUT` in seconds (fractions allowed), default 10
    /// ([`DEFAULT_TIMEOUT`]).
    pub subject_timeout: Duration,
    /// Whether an `exec:` subject's error kinds must match the model's
    /// (`--exact-kinds`).
    ///
    /// `KVCHECK_EXACT_KINDS` (`1`, `true`, `yes` or `0`, `false`, `no`),
    /// default `false`.
    pub exact_kinds: bool,
    /// Whether every *outside* answer of an `exec:` subject is a
    /// divergence, its declared domain ignored (`--strict-domain`).
    ///
    /// `KVCHECK_STRICT_DOMAIN` (a flag like `KVCHECK_EXACT_KINDS`),
    /// default `false`.
    pub strict_domain: bool,
    /// Instances of each relation checked per trace (`--oracle self`).
    ///
    /// `KVCHECK_RELATION_INSTANCES`, default 2
    /// ([`DEFAULT_INSTANCES`]).
    pub relation_instances: usize,
    /// Where the property suites save the traces of their failures.
    ///
    /// `$CARGO_TARGET_DIR/kvcheck-failures` (cargo's variable, not a knob),
    /// default `target/kvcheck-failures`.
    pub failures_dir: PathBuf,
    /// `KVCHECK_REPLAY`: the trace the one-call check of a Rust cache
    /// replays alone (`engine::check`).
    pub replay: Option<PathBuf>,
}

/// [`Settings::max_tests`] when `KVCHECK_MAX_TESTS` is unset: the lockstep
/// runs a minimization may spend (`--max-tests`).
pub const DEFAULT_MAX_TESTS: usize = 2000;

/// [`Settings::explore_depth`] when `KVCHECK_EXPLORE_DEPTH` is unset, and
/// an explorer's depth until it is given another.
pub const DEFAULT_DEPTH: usize = 3;

/// [`Settings::relation_instances`] when `KVCHECK_RELATION_INSTANCES` is
/// unset, and an oracle's instances per relation and trace until it is
/// given another count: the first and the last candidate.
pub const DEFAULT_INSTANCES: usize = 2;

/// [`Settings::subject_timeout`] when `KVCHECK_SUBJECT_TIMEOUT` is unset:
/// the time an `exec:` subject has per response.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The cores available to this process (at least 1): the workers of a
/// campaign unless `--jobs` or `KVCHECK_JOBS` says otherwise
/// ([`Settings::workers`]).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// [`Settings::cases`] when `KVCHECK_CASES` is unset.
pub const DEFAULT_CASES: u32 = 256;

/// [`Settings::max_ops`] when `KVCHECK_MAX_OPS` is unset.
pub const DEFAULT_MAX_OPS: usize = 40;

impl Default for Settings {
    /// Every knob's default; reads nothing.
    fn default() -> Settings {
        Settings {
            cases: DEFAULT_CASES,
            max_ops: DEFAULT_MAX_OPS,
            seed: None,
            subject: None,
            oracle: None,
            jobs: None,
            max_tests: DEFAULT_MAX_TESTS,
            explore_depth: DEFAULT_DEPTH,
            subject_timeout: DEFAULT_TIMEOUT,
            exact_kinds: false,
            strict_domain: false,
            relation_instances: DEFAULT_INSTANCES,
            failures_dir: failures_dir(None),
            replay: None,
        }
    }
}

impl Settings {
    /// Every knob of [`KNOBS`] from the environment (and
    /// `CARGO_TARGET_DIR` for [`Settings::failures_dir`]): the one place
    /// that reads them. Call it once where a program or test starts and
    /// pass the result down. The first knob (in the order of [`KNOBS`])
    /// set to something it cannot hold is the error; the text knobs
    /// (`KVCHECK_SUBJECT`, `KVCHECK_ORACLE`) are checked when they are
    /// parsed (`SubjectSpec::configured` in `subject`, `Oracle::configured`
    /// in `engine::oracle`).
    pub fn from_env() -> Result<Settings, SettingError> {
        // A value that is not Unicode is taken as unset, as it always was.
        Settings::from_vars(|var| std::env::var(var).ok())
    }

    /// [`Settings::from_env`] with the variables looked up by `var` (a
    /// map in a test, say) instead of the environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        let text = |name: &'static str| var(knob(name).var).filter(|t| !t.trim().is_empty());
        let defaults = Settings::default();
        Ok(Settings {
            cases: count("KVCHECK_CASES", &var)?
                .map_or(defaults.cases, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            max_ops: count("KVCHECK_MAX_OPS", &var)?.unwrap_or(defaults.max_ops),
            seed: number("KVCHECK_SEED", &var)?,
            subject: text("KVCHECK_SUBJECT").map(|t| t.trim().to_string()),
            oracle: text("KVCHECK_ORACLE").map(|t| t.trim().to_string()),
            jobs: count("KVCHECK_JOBS", &var)?,
            max_tests: count("KVCHECK_MAX_TESTS", &var)?.unwrap_or(defaults.max_tests),
            explore_depth: count("KVCHECK_EXPLORE_DEPTH", &var)?.unwrap_or(defaults.explore_depth),
            subject_timeout: seconds("KVCHECK_SUBJECT_TIMEOUT", &var)?
                .unwrap_or(defaults.subject_timeout),
            exact_kinds: flag("KVCHECK_EXACT_KINDS", &var)?,
            strict_domain: flag("KVCHECK_STRICT_DOMAIN", &var)?,
            relation_instances: count("KVCHECK_RELATION_INSTANCES", &var)?
                .unwrap_or(defaults.relation_instances),
            failures_dir: failures_dir(var("CARGO_TARGET_DIR")),
            replay: text("KVCHECK_REPLAY").map(|t| PathBuf::from(t.trim())),
        })
    }

    /// Worker threads: [`Settings::jobs`], else the cores available to
    /// this process.
    pub fn workers(&self) -> usize {
        self.jobs.unwrap_or_else(available_cores)
    }
}

/// `$CARGO_TARGET_DIR/kvcheck-failures`, else `target/kvcheck-failures`.
fn failures_dir(target: Option<String>) -> PathBuf {
    PathBuf::from(target.unwrap_or_else(|| "target".into())).join("kvcheck-failures")
}

/// The knob of `var`; every reader names a knob of [`KNOBS`].
fn knob(var: &'static str) -> &'static Knob {
    KNOBS
        .iter()
        .find(|k| k.var == var)
        .unwrap_or_else(|| panic!("{var} is not in the settings table"))
}

/// `var`'s value read by its kind; `None` when it is unset or blank.
fn read<T: FromStr>(
    var: &'static str,
    text: Option<String>,
    accept: impl Fn(&T) -> bool,
    expected: &'static str,
) -> Result<Option<T>, SettingError> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<T>() {
        Ok(value) if accept(&value) => Ok(Some(value)),
        _ => Err(SettingError {
            var,
            value: text,
            expected,
        }),
    }
}

/// A [`Kind::Count`] knob: a whole number ≥ 1, when set.
fn count(
    var: &'static str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<usize>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Count);
    read(
        var,
        lookup(var),
        |n: &usize| *n >= 1,
        "a whole number of at least 1",
    )
}

/// A [`Kind::Number`] knob: a whole number ≥ 0, when set.
fn number(
    var: &'static str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<u64>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Number);
    read(var, lookup(var), |_: &u64| true, "a whole number")
}

/// A [`Kind::Seconds`] knob: a positive number of seconds, when set.
fn seconds(
    var: &'static str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<Duration>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Seconds);
    parse_seconds(var, lookup(var))
}

fn parse_seconds(
    var: &'static str,
    text: Option<String>,
) -> Result<Option<Duration>, SettingError> {
    let seconds = read(
        var,
        text,
        |s: &f64| s.is_finite() && *s > 0.0,
        "a positive number of seconds",
    )?;
    Ok(seconds.map(Duration::from_secs_f64))
}

/// A [`Kind::Flag`] knob: `false` when unset.
fn flag(var: &'static str, lookup: impl Fn(&str) -> Option<String>) -> Result<bool, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Flag);
    parse_flag(var, lookup(var))
}

fn parse_flag(var: &'static str, text: Option<String>) -> Result<bool, SettingError> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(false);
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(SettingError {
            var,
            value: text,
            expected: "1, true, yes, 0, false or no",
        }),
    }
}

#[cfg(test)]
mod tests;
