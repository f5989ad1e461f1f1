//! Every knob of kvcheck in one table, in the manner of proptest's
//! `Config`: its environment variable, its default, what it sets, and one
//! parse policy for all of them. A variable that is set but does not parse
//! is an error naming the variable and the value, at every entry point (the
//! `kvcheck` binary checks the whole table before it runs a command; the
//! property suites read theirs through [`crate::engine::machine::SuiteSettings`]).
//! Never a silent fallback to the default.
//!
//! Command-line options take precedence over the variables where both
//! exist (`--jobs` over `KVCHECK_JOBS`, and so on).

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
        meaning: "most ops per drawn sequence (suites, run)",
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
        var: "KVCHECK_RELATION_INSTANCES",
        kind: Kind::Count,
        default: "2",
        meaning: "instances of each relation checked per trace (`--oracle self`)",
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

fn env(var: &'static str) -> Option<String> {
    std::env::var(var).ok()
}

/// A [`Kind::Count`] knob: a whole number ≥ 1, when set.
pub fn count(var: &'static str) -> Result<Option<usize>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Count);
    read(
        var,
        env(var),
        |n: &usize| *n >= 1,
        "a whole number of at least 1",
    )
}

/// A [`Kind::Number`] knob: a whole number ≥ 0, when set.
pub fn number(var: &'static str) -> Result<Option<u64>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Number);
    read(var, env(var), |_: &u64| true, "a whole number")
}

/// A [`Kind::Seconds`] knob: a positive number of seconds, when set.
pub fn seconds(var: &'static str) -> Result<Option<Duration>, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Seconds);
    parse_seconds(var, env(var))
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
pub fn flag(var: &'static str) -> Result<bool, SettingError> {
    debug_assert_eq!(knob(var).kind, Kind::Flag);
    parse_flag(var, env(var))
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

/// Checks every number, duration and flag of [`KNOBS`] that is set (text
/// knobs are checked by their consumers: the subject and oracle parsers);
/// the first bad one is the error.
pub fn check_env() -> Result<(), SettingError> {
    for knob in KNOBS {
        match knob.kind {
            Kind::Count => count(knob.var).map(drop)?,
            Kind::Number => number(knob.var).map(drop)?,
            Kind::Seconds => seconds(knob.var).map(drop)?,
            Kind::Flag => flag(knob.var).map(drop)?,
            Kind::Text => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    #[test]
    fn one_policy_for_every_kind() {
        let count = |t| read("KVCHECK_JOBS", some(t), |n: &usize| *n >= 1, "n ≥ 1");
        assert_eq!(count(" 4 "), Ok(Some(4)));
        assert_eq!(count(""), Ok(None));
        let err = count("0").unwrap_err();
        assert_eq!(err.to_string(), "KVCHECK_JOBS=\"0\": n ≥ 1");
        assert!(count("four").is_err());
        assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("0.5")).is_ok());
        assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("-1")).is_err());
        assert!(parse_seconds("KVCHECK_SUBJECT_TIMEOUT", some("inf")).is_err());
        assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", some("YES")), Ok(true));
        assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", some("0")), Ok(false));
        assert_eq!(parse_flag("KVCHECK_EXACT_KINDS", None), Ok(false));
        let err = parse_flag("KVCHECK_EXACT_KINDS", some("sure")).unwrap_err();
        assert!(err.to_string().starts_with("KVCHECK_EXACT_KINDS=\"sure\""));
    }

    #[test]
    fn every_knob_is_listed_once_and_documented() {
        let commands = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/commands.md"
        ))
        .expect("docs/commands.md");
        for (i, knob) in KNOBS.iter().enumerate() {
            assert!(knob.var.starts_with("KVCHECK_"), "{}", knob.var);
            assert!(
                KNOBS[..i].iter().all(|k| k.var != knob.var),
                "{} twice",
                knob.var
            );
            assert!(
                commands.contains(knob.var),
                "docs/commands.md does not list {}",
                knob.var
            );
        }
    }
}
