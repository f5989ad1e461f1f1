//! Subcommands of the `kvcheck` binary; each lives in its own file.

mod checkout;
mod error;
mod expect;
mod explain;
mod explore;
#[cfg(feature = "arbitrary")]
mod from_fuzz;
mod merge;
mod minimize;
#[cfg(feature = "arbitrary")]
mod power;
mod power_table;
mod prefix;
mod prefix_args;
mod prefix_cmd;
mod prefix_explain;
mod prefix_explore;
mod prefix_files;
mod prefix_power;
mod prefix_serve;
mod replay;
mod run;
mod save;
mod serve;
mod triage;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kvcheck::settings::Settings;

pub use error::{CliError, UnknownVariant};

#[derive(Parser, Debug)]
#[command(
    name = "kvcheck",
    version,
    about = "Check streaming attention KV caches op by op against the reference model of docs/contract.md",
    long_about = "kvcheck drives an optimized KV cache and the naive reference model in lockstep and \
                  compares every outcome, visible position and view tensor bit for bit. Failing \
                  sequences are saved as kvtrace/1 files that replay anywhere.",
    after_help = "Examples:\n  kvcheck run --time 60\n  kvcheck replay tests/vectors\n  kvcheck expect my.kvtrace.json > my-with-expect.kvtrace.json"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a checking campaign over the built-in profiles and caches.
    #[command(
        after_help = "Examples:\n  kvcheck run\n  kvcheck run --time 600 --seed 42\n  kvcheck run --profile tiny --profile pins --time 10\n  kvcheck run --variant packed --cases 1000\n  kvcheck run --jobs 8 --shard 3/4 --json shard-3.json\n  kvcheck run --keep-going --subject fault:head-start-ignored --cases 200\n  kvcheck run --list\n\nWith --keep-going the campaign records every divergence until its cases or time run out, groups them by signature\n(kind, op, the shape of the first difference, an exec subject's exception type), minimizes one of each and prints\na table of distinct findings with counts, first case and minimized length; new findings are announced as met.\nExit status: 0 no divergence, 1 a divergence (its trace is saved under --out), 2 bad arguments."
    )]
    Run(run::Args),
    /// Combine the --json reports of a campaign's shards into one table.
    #[command(
        after_help = "Examples:\n  kvcheck run --seed 7 --cases 500 --shard 1/2 --json run-1.json\n  kvcheck run --seed 7 --cases 500 --shard 2/2 --json run-2.json\n  kvcheck merge run-1.json run-2.json\n  kvcheck merge explore-*.json --json merged.json\n  kvcheck merge power-1.json power-2.json\n\nThe totals are those one unsharded run prints.\nExit status: 0 no divergence or discovery, 1 a divergence, a missing event, an escaped fault or false positive (power) or an absent shard, 2 unreadable or mismatched reports."
    )]
    Merge(merge::Args),
    /// Replay traces through the model and every cache that supports their variant.
    #[command(
        after_help = "Examples:\n  kvcheck replay tests/vectors\n  kvcheck replay failure.kvtrace.json --json\n  kvcheck replay trace.kvtrace.json --subject reference\n\nExit status: 0 all passed, 1 a mismatch or divergence, 2 a file could not be read."
    )]
    Replay(replay::Args),
    /// Print a trace with `expect` filled in by the model (kvtrace/1 JSON).
    #[command(
        after_help = "Examples:\n  kvcheck expect hand-written.kvtrace.json > tests/regressions/case.kvtrace.json\n  kvcheck expect trace.kvtrace.json -o trace.kvtrace.json"
    )]
    Expect(expect::Args),
    /// Explore every op sequence up to a depth, breadth first, in lockstep.
    #[command(
        after_help = "Examples:\n  kvcheck explore --depth 4 --capacity 4 --sink 1\n  kvcheck explore --depth 3 --config case.kvtrace.json --subject reference\n  kvcheck explore --grid --depth 3 --small-alphabet --max-capacity 3\n  kvcheck explore --grid --depth 3 --jobs 8 --shard 1/4 --json grid-1.json\n  kvcheck explore --depth 2 --subject fault:stale-rewrite\n  kvcheck explore --depth 3 --heads 2 --keep-going --subject fault:head-start-ignored\n\nWith --keep-going every divergent transition is recorded, the states past it are not expanded, and the search\ngoes to its depth; the findings table lists one minimized representative per signature (the first met breadth first).\nExit status: 0 no discovery and every sometimes-event reached, 1 a divergence or a missing event, 2 bad input."
    )]
    Explore(explore::Args),
    /// Shrink a failing trace while keeping the same failure (kvtrace/1 JSON out).
    #[command(
        after_help = "Examples:\n  kvcheck minimize failure.kvtrace.json -o small.kvtrace.json\n  kvcheck minimize long.kvtrace.json --subject fault:stale-rewrite --max-tests 500\n\nThe failure kept is the same divergence kind on the same op kind. Sizes, passes and the\ntest count go to standard error; the trace to standard output or -o.\nExit status: 1 minimized (the result still fails), 2 unreadable input or a trace that does not fail."
    )]
    Minimize(minimize::Args),
    /// Store a trace in the regression corpus (minimized if it fails, expect from the model).
    #[command(
        after_help = "Examples:\n  kvcheck save kvcheck-failures/x.kvtrace.json --name stale_rewrite\n  kvcheck save repro.kvtrace.json --name d2_gap_write --dir tests/regressions\n\nExit status: 0 saved, 2 unreadable input or a bad name."
    )]
    Save(save::Args),
    /// Serve an in-process subject over kvcheck-subject/1 on stdin/stdout (an exec: subject of it).
    #[command(
        after_help = "Examples:\n  kvcheck run --subject exec:'kvcheck serve --subject fault:refusal-rolls' --oracle self\n  kvcheck replay tests/vectors --subject exec:'kvcheck serve --subject cache:ring'\n\nExit status: 0 at end of input or close, 2 an exec: subject given."
    )]
    Serve(serve::Args),
    /// Walk through a trace step by step: resident strip, view, slot layout, the divergence.
    #[command(
        after_help = "Examples:\n  kvcheck explain small.kvtrace.json --subject fault:stale-rewrite\n\nExit status: 0 no divergence, 1 a divergence, 2 unreadable input."
    )]
    Explain(explain::Args),
    /// Turn a fuzz crash or corpus file into a kvtrace file.
    #[cfg(feature = "arbitrary")]
    #[command(
        after_help = "Targets: dense_lockstep, packed_lockstep, model_invariants, trace_load.\n\nExamples:\n  kvcheck from-fuzz dense_lockstep fuzz/artifacts/dense_lockstep/crash-1a2b -o crash.kvtrace.json\n  kvcheck replay crash.kvtrace.json\n  kvcheck from-fuzz dense_lockstep fuzz/artifacts/dense_lockstep --keep-going\n\nWith --keep-going every input (directories expanded) is replayed against --subject and the divergences\nare triaged: grouped by signature, one of each minimized under --out, a table of distinct findings.\nExit status: 0 written (no divergence with --keep-going), 1 a divergence with --keep-going, 2 the file could not be read or decoded."
    )]
    FromFuzz(from_fuzz::Args),
    /// Measure the engines on the zoo of realistic bugs: a table fault × engine and a kill rate.
    #[cfg(feature = "arbitrary")]
    #[command(
        after_help = "Examples:\n  kvcheck power --engine explore\n  kvcheck power --engine all --time 10 --jobs 8\n  kvcheck power --cache ring --engine explore\n  kvcheck power --fault roll-one-short --engine fuzz --time 30 --json -\n  kvcheck power --seed 1 --shard 2/4 --json power-2.json\n\nThe fuzz column runs `cargo fuzz run fault_lockstep` per fault (from the repository root, cargo-fuzz installed) and is skipped with a message otherwise.\nThe last row is the correct cache alone (the control row): any divergence there is a false positive.\nExit status: 0 every fault caught by some engine and the control row clean, 1 a fault escaped every engine or a false positive, 2 bad arguments."
    )]
    Power(power::Args),
    /// The prefix-cache family (docs/contract.md Part II): campaigns and replays on a prefix subject.
    #[command(
        after_help = "Examples:\n  kvcheck prefix run --time 30\n  kvcheck prefix run --subject fault:trust-weak-hash\n  kvcheck prefix run --subject exec:'python3 adapters/reference_prefix_subject.py' --time 20\n  kvcheck prefix replay failure.kvtrace.json --subject exec:'python3 adapters/reference_prefix_subject.py'\n\n`kvcheck replay` and `kvcheck minimize` also take prefix traces, on the shipped paged cache."
    )]
    Prefix(prefix_cmd::Args),
}

impl Command {
    /// The subject options of the command, for those that take them.
    fn subject_args_mut(&mut self) -> Option<&mut SubjectArgs> {
        match self {
            Command::Run(args) => Some(&mut args.subject),
            Command::Replay(args) => Some(&mut args.subject),
            Command::Explore(args) => Some(&mut args.subject),
            Command::Minimize(args) => Some(&mut args.subject),
            Command::Save(args) => Some(&mut args.subject),
            Command::Explain(args) => Some(&mut args.subject),
            #[cfg(feature = "arbitrary")]
            Command::FromFuzz(args) => Some(&mut args.subject),
            Command::Merge(_) | Command::Expect(_) | Command::Serve(_) | Command::Prefix(_) => None,
            #[cfg(feature = "arbitrary")]
            Command::Power(_) => None,
        }
    }
}

/// Runs the parsed command line; `Err` says why it fails, and
/// [`CliError::exit_code`] turns that into the process exit status.
pub fn run(cli: Cli) -> Result<(), CliError> {
    // The one read of the environment's knobs, whatever the command: a
    // variable set to something it cannot hold stops the program here,
    // naming it. The commands get the settings from here on, and their
    // options override its fields.
    let settings = Settings::from_env()?;
    // Every report prints the replay command that works where this runs.
    checkout::Place::detect().replay_program().use_everywhere();
    let mut command = cli.command;
    if let Some(subject) = command.subject_args_mut() {
        subject.resolve(&settings)?;
    }
    match command {
        Command::Run(args) => run::run(args, &settings),
        Command::Merge(args) => merge::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Expect(args) => expect::run(args),
        Command::Explore(args) => explore::run(args, &settings),
        Command::Minimize(args) => minimize::run(args, &settings),
        Command::Save(args) => save::run(args, &settings),
        Command::Serve(args) => serve::run(args),
        Command::Explain(args) => explain::run(args),
        #[cfg(feature = "arbitrary")]
        Command::FromFuzz(args) => from_fuzz::run(args, &settings),
        #[cfg(feature = "arbitrary")]
        Command::Power(args) => power::run(args, &settings),
        Command::Prefix(args) => prefix_cmd::run(args, &settings),
    }
}

/// Loads a trace; the error names the file and the problem.
pub fn load_trace(path: &std::path::Path) -> Result<kvcheck::check::trace::Trace, CliError> {
    Ok(kvcheck::check::trace::Trace::load(path)?)
}

/// The subject options every engine takes.
#[derive(clap::Args, Debug, Clone)]
pub struct SubjectArgs {
    /// What to check against the model: `cache` (the shipped cache for the
    /// trace's variant), `cache:ring` (the shipped RingCache, dense traces),
    /// `reference` (the naive cache), `fault:NAME` (a fault of the zoo may
    /// name its cache: `fault:NAME@generic`, `fault:NAME@ring`), or
    /// `exec:'COMMAND ARGS'` (a process speaking kvcheck-subject/1, see
    /// docs/subject-protocol.md).
    #[arg(long, default_value = "cache")]
    subject: kvcheck::subject::SubjectSpec,
    /// Seconds an `exec:` subject has for each response before it is killed
    /// and reported as a timeout [default: $KVCHECK_SUBJECT_TIMEOUT, else 10].
    #[arg(long, value_parser = kvcheck::subject::parse_timeout)]
    subject_timeout: Option<std::time::Duration>,
    /// An `exec:` subject's `err` kinds must match the model's, and its
    /// exceptions are divergences [default: $KVCHECK_EXACT_KINDS, else any
    /// refusal agrees with any refusal].
    #[arg(long)]
    exact_kinds: bool,
    /// Every `outside` answer of an `exec:` subject is a divergence and
    /// its declared domain is ignored: for a cache that claims the whole
    /// contract [default: $KVCHECK_STRICT_DOMAIN, else an `outside`
    /// answer cuts the case there, see docs/subject-protocol.md].
    #[arg(long)]
    strict_domain: bool,
    /// What the subject is checked against: `model` (the reference model,
    /// op by op), `self` (its own transformed runs and its run against the
    /// invariants of one run: the relations M1–M10 and invariants I1–I8 of
    /// docs/contract.md §9, no model; `relations` or `invariants` one kind,
    /// `self:M9` or `self:I2` one check), or another subject in
    /// any `--subject` form (differential: both run the same steps). A
    /// trace that names its oracle is checked against it unless this is
    /// given [default: $KVCHECK_ORACLE, else the trace's oracle, else
    /// model]. See docs/relations.md.
    #[arg(long)]
    oracle: Option<kvcheck::engine::oracle::Oracle>,
    /// The settings of the environment, whose fields the options above
    /// override; set by [`SubjectArgs::resolve`].
    #[arg(skip)]
    settings: Settings,
}

impl SubjectArgs {
    /// Takes what the options above leave unsaid from `settings`: the
    /// oracle `KVCHECK_ORACLE` chooses when `--oracle` is not given (a
    /// value that does not parse is an error naming the variable), the
    /// response timeout, the kinds mode and the relation instances.
    pub fn resolve(&mut self, settings: &Settings) -> Result<(), CliError> {
        if self.oracle.is_none() {
            self.oracle = kvcheck::engine::oracle::Oracle::configured(settings)?;
        }
        self.settings = settings.clone();
        Ok(())
    }

    /// An `exec:` subject's response timeout and kinds mode: the options,
    /// else the settings.
    fn exec_options(&self) -> (Option<std::time::Duration>, bool) {
        (
            Some(
                self.subject_timeout
                    .unwrap_or(self.settings.subject_timeout),
            ),
            self.exact_kinds || self.settings.exact_kinds,
        )
    }

    /// The subject with the timeout and kinds options applied.
    pub fn spec(&self) -> kvcheck::subject::SubjectSpec {
        let (timeout, exact) = self.exec_options();
        self.subject
            .clone()
            .with_exec_options(timeout, exact)
            .with_strict_domain(self.strict_domain || self.settings.strict_domain)
    }

    /// The oracle chosen (the model when none is); another subject gets
    /// the timeout and kinds options too, the relations the instances of
    /// the settings.
    pub fn oracle(&self) -> kvcheck::engine::oracle::Oracle {
        match &self.oracle {
            None => kvcheck::engine::oracle::Oracle::model(),
            Some(oracle) => {
                let (timeout, exact) = self.exec_options();
                oracle
                    .with_exec_options(timeout, exact)
                    .with_relation_instances(self.settings.relation_instances)
            }
        }
    }

    /// The oracle to check `trace` against: the one chosen, else the one
    /// the trace names, else the model. A trace checked against an oracle
    /// other than the one it names loses its `oracle` field here, so that
    /// the engines do not pick it up again.
    pub fn oracle_for(
        &self,
        trace: &mut kvcheck::check::trace::Trace,
    ) -> Result<kvcheck::engine::oracle::Oracle, kvcheck::engine::oracle::OracleError> {
        let oracle = match &self.oracle {
            Some(_) => self.oracle(),
            // The oracle a trace names runs with the settings (its subject's
            // timeout and kinds come from the environment, not from the
            // options, which are the checked subject's).
            None => kvcheck::engine::oracle::Oracle::for_trace(
                &kvcheck::engine::oracle::Oracle::model(),
                trace.oracle.as_ref(),
            )?
            .with_settings(&self.settings),
        };
        if self.oracle.is_some() {
            trace.oracle = oracle.tag();
        }
        Ok(oracle)
    }
}

/// [`SubjectArgs::oracle_for`] for a trace loaded from `file`, announced;
/// an unreadable `oracle` field ends the command with an error naming the
/// file.
pub fn trace_oracle(
    args: &SubjectArgs,
    trace: &mut kvcheck::check::trace::Trace,
    file: &std::path::Path,
) -> Result<kvcheck::engine::oracle::Oracle, CliError> {
    let oracle = args
        .oracle_for(trace)
        .map_err(|source| CliError::TraceOracle {
            file: file.to_path_buf(),
            source,
        })?;
    announce_oracle(&oracle);
    Ok(oracle)
}

/// One line on stderr naming the oracle when it is not the model.
pub fn announce_oracle(oracle: &kvcheck::engine::oracle::Oracle) {
    if !oracle.is_default() {
        eprintln!("oracle {oracle} (no model: {})", oracle.describe());
    }
}

/// One line on stderr saying how an external subject's refusals are
/// compared (nothing for in-process subjects, whose kinds always match).
pub fn announce(subject: &kvcheck::subject::SubjectSpec) {
    if let kvcheck::subject::SubjectSpec::Exec(exec) = subject {
        eprintln!(
            "subject exec:{} (timeout {}s; {})",
            exec.command(),
            exec.timeout().as_secs_f64(),
            subject.kinds_mode()
        );
    }
}

/// A path argument that defaults to the failures directory of where the
/// binary runs ([`checkout::Place::failures_dir`]).
pub fn failures_dir(out: Option<PathBuf>, settings: &Settings) -> PathBuf {
    out.unwrap_or_else(|| checkout::Place::detect().failures_dir(settings))
}
