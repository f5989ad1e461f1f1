//! Exhaustive exploration: every op sequence up to a depth, breadth first,
//! each checked in lockstep against the model.
//!
//! # Counting the state space by hand
//!
//! Take a dense cache with capacity 4 and sink 1. A state is `G`, the
//! resident set (at most 4 positions below `G`, position 0 kept while
//! resident), the pin and which rows share a writer. With `G ≤ 5` there are
//! a few hundred resident sets and a few thousand writer patterns; the full
//! [`Alphabet`] offers about `(G+2)·(C+2)·3·5 ≈ 600` ops per state, almost
//! all of them refusals that leave the state unchanged. Breadth-first
//! search with fingerprint deduplication therefore visits each *distinct*
//! state once per depth it first appears at, and the first divergence it
//! meets is a shortest counterexample (see `docs/explore.md` for measured
//! rates).
//!
//! # Vocabulary (stateright's)
//!
//! - **fingerprint**: the hash a state is deduplicated on
//!   ([`fingerprint::fingerprint`]): the model abstractly, the cache's
//!   layout exactly.
//! - **discovery**: a divergence; BFS makes it a shortest one.
//! - **always**: the lockstep checks, on every transition.
//! - **sometimes**: the labelled events ([`crate::check::coverage::EVENTS`],
//!   `error:KIND`) the exploration must reach ([`required_events`]);
//!   a missing one fails the run.
//!
//! ```
//! use kvcheck::engine::explore::Explorer;
//! use kvcheck::subject::{Fault, SubjectSpec};
//! use kvcheck::Config;
//!
//! let config = Config::dense(2);
//! // No divergence on the naive reference cache up to depth 2…
//! Explorer::new(&config, SubjectSpec::Reference).depth(2).assert_no_discovery();
//! // …and a constructed fault is found with its shortest trace.
//! let found = Explorer::new(&config, SubjectSpec::Fault(Fault::StaleRewrite))
//!     .depth(2)
//!     .assert_discovery();
//! assert_eq!(found.trace.ops.len(), 2);
//! ```

pub mod alphabet;
mod bfs;
pub mod fingerprint;
pub mod grid;

use std::fmt;
use std::time::Duration;

use indicatif::ProgressBar;
use kvmodel::{Config, ErrorKind, Op, Variant};

pub use alphabet::{Alphabet, UnknownAlphabet};

use crate::check::coverage::Coverage;
use crate::check::divergence::Divergence;
use crate::engine::oracle::Oracle;
use crate::subject::{Capabilities, Fault, SubjectSpec};

/// A breadth-first explorer of one configuration and one subject.
#[derive(Clone, Debug)]
pub struct Explorer {
    config: Config,
    subject: SubjectSpec,
    depth: usize,
    alphabet: Alphabet,
    prefix: Vec<Op>,
    time_limit: Option<Duration>,
    progress: Option<ProgressBar>,
    jobs: usize,
    keep_going: bool,
    oracle: Oracle,
}

impl Explorer {
    /// Explores `config` against `subject`, to [`DEFAULT_DEPTH`](crate::settings::DEFAULT_DEPTH) with the
    /// full alphabet, from the empty cache.
    pub fn new(config: &Config, subject: SubjectSpec) -> Explorer {
        Explorer {
            config: config.clone(),
            subject,
            depth: crate::settings::DEFAULT_DEPTH,
            alphabet: Alphabet::Full,
            prefix: Vec::new(),
            time_limit: None,
            progress: None,
            jobs: 1,
            keep_going: false,
            oracle: Oracle::model(),
        }
    }

    /// What every explored sequence is checked against. Default: the model,
    /// in lockstep. With another oracle the model (through the naive
    /// reference cache) only walks the state space, and every sequence of
    /// the search is checked whole against the oracle (a relation's
    /// transformations, another subject).
    pub fn oracle(mut self, oracle: Oracle) -> Explorer {
        self.oracle = oracle;
        self
    }

    /// Explores op sequences of at most `depth` ops (after the prefix).
    /// Default: `KVCHECK_EXPLORE_DEPTH`, else 3.
    pub fn depth(mut self, depth: usize) -> Explorer {
        self.depth = depth;
        self
    }

    /// The op alphabet. Default: [`Alphabet::Full`].
    pub fn alphabet(mut self, alphabet: Alphabet) -> Explorer {
        self.alphabet = alphabet;
        self
    }

    /// Ops applied (and checked) before the search starts, e.g. the ops of
    /// a trace file; the search starts from the state they reach.
    pub fn prefix(mut self, ops: Vec<Op>) -> Explorer {
        self.prefix = ops;
        self
    }

    /// Stops after `limit` (between nodes); the report's `depth_completed`
    /// is the last depth expanded in full. Default: none.
    pub fn time_limit(mut self, limit: Option<Duration>) -> Explorer {
        self.time_limit = limit;
        self
    }

    /// A progress bar advanced once per expanded node. Default: none.
    pub fn progress(mut self, bar: ProgressBar) -> Explorer {
        self.progress = Some(bar);
        self
    }

    /// Threads expanding each depth's frontier: `n ≥ 1` builds a pool of
    /// `n` for this search; `0` runs on the rayon pool the caller is in
    /// (how a grid shares one pool among its configs). Default: 1. The
    /// report and the counterexample are the same for any value.
    pub fn jobs(mut self, jobs: usize) -> Explorer {
        self.jobs = jobs;
        self
    }

    /// Triage mode: a divergence does not end the search; every one is
    /// recorded in the report's [`ExploreReport::triage`], and the states
    /// past a divergence are not expanded. Default: off.
    pub fn keep_going(mut self, keep_going: bool) -> Explorer {
        self.keep_going = keep_going;
        self
    }

    /// The configuration explored.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs the search. `Err` is the first divergence breadth-first order
    /// meets: a shortest counterexample (trace saved by the caller with
    /// [`Divergence::save_in`]).
    pub fn run(&self) -> Result<ExploreReport, Box<Divergence>> {
        if self.jobs == 0 {
            return bfs::Bfs::new(self).run();
        }
        match rayon::ThreadPoolBuilder::new()
            .num_threads(self.jobs)
            .build()
        {
            Ok(pool) => pool.install(|| bfs::Bfs::new(self).run()),
            // No threads to be had: the caller's pool still gives the
            // same result, only with other parallelism.
            Err(_) => bfs::Bfs::new(self).run(),
        }
    }

    /// Runs the search and panics with the report of a divergence.
    pub fn assert_no_discovery(&self) -> ExploreReport {
        match self.run() {
            Ok(report) => report,
            Err(d) => panic!("expected no discovery, found:\n{d}"),
        }
    }

    /// Runs the search and panics when it finds no divergence.
    pub fn assert_discovery(&self) -> Box<Divergence> {
        match self.run() {
            Ok(report) => panic!("expected a discovery, found none:\n{report}"),
            Err(d) => d,
        }
    }
}

/// Explores `config` with `fault` injected into the reference cache to
/// `depth`, asserts that it is found, and returns the shortest trace's
/// divergence.
pub fn assert_finds(config: &Config, fault: Fault, depth: usize) -> Box<Divergence> {
    Explorer::new(config, SubjectSpec::Fault(fault))
        .depth(depth)
        .assert_discovery()
}

/// What one exploration did.
#[derive(Clone, Debug)]
pub struct ExploreReport {
    /// The configuration explored.
    pub config: Config,
    /// The subject's name.
    pub subject: String,
    /// The alphabet.
    pub alphabet: Alphabet,
    /// Depth asked for.
    pub depth: usize,
    /// Depth expanded in full (every state at depth < this was expanded).
    pub depth_completed: usize,
    /// States generated: one per checked transition that did not diverge.
    pub states: u64,
    /// Distinct fingerprints seen (the initial state included).
    pub distinct_states: u64,
    /// Ops checked from explored states.
    pub transitions: u64,
    /// Transitions the subject answered *outside* its domain: not judged,
    /// and the states past them not expanded.
    pub outside: u64,
    /// Ops re-executed to rebuild states (the price of a non-`Clone` driver).
    pub replayed_steps: u64,
    /// New states left at the last completed depth (unexpanded).
    pub frontier: usize,
    /// Whether the time limit stopped the search.
    pub timed_out: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// Labelled events of the transitions (replays excluded).
    pub coverage: Coverage,
    /// The events it must reach ([`required_events`] of its config and
    /// subject).
    pub required: Vec<String>,
    /// Triage mode: every divergent transition, grouped by signature, the
    /// representative of each the first in breadth-first order.
    pub triage: crate::engine::triage::Triage,
}

impl ExploreReport {
    fn empty(e: &Explorer) -> ExploreReport {
        ExploreReport {
            config: e.config.clone(),
            subject: e.subject.name(&e.config),
            alphabet: e.alphabet,
            depth: e.depth,
            depth_completed: 0,
            states: 0,
            distinct_states: 0,
            transitions: 0,
            outside: 0,
            replayed_steps: 0,
            frontier: 0,
            timed_out: false,
            elapsed: Duration::ZERO,
            coverage: Coverage::default(),
            required: Vec::new(),
            triage: crate::engine::triage::Triage::new(),
        }
    }

    /// Generated states per second.
    pub fn states_per_second(&self) -> f64 {
        self.states as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The events of [`required_events`] for this configuration and
    /// subject that the exploration never reached.
    pub fn missing_events(&self) -> Vec<String> {
        missing(&self.coverage, &self.required)
    }
}

impl fmt::Display for ExploreReport {
    /// The summary table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "config           {}",
            crate::check::divergence::describe_config(&self.config)
        )?;
        writeln!(f, "subject          {}", self.subject)?;
        writeln!(f, "alphabet         {}", self.alphabet.name())?;
        writeln!(
            f,
            "depth            {} of {}{}",
            self.depth_completed,
            self.depth,
            if self.timed_out { " (time limit)" } else { "" }
        )?;
        writeln!(f, "states           {}", self.states)?;
        writeln!(f, "distinct states  {}", self.distinct_states)?;
        writeln!(f, "transitions      {}", self.transitions)?;
        if self.outside > 0 {
            writeln!(
                f,
                "outside          {} (answered outside the subject's domain, not expanded)",
                self.outside
            )?;
        }
        writeln!(f, "replayed steps   {}", self.replayed_steps)?;
        writeln!(f, "elapsed          {:.2?}", self.elapsed)?;
        writeln!(f, "states/s         {:.0}", self.states_per_second())
    }
}

/// The "sometimes" properties: events an exploration of `config` deep
/// enough must reach (depth 3 with the full alphabet reaches them on the
/// configs we tried; the small alphabet may miss `overlap_write` where the
/// window leaves no room for it). Events that cannot
/// happen under `config` are left out (growth without `growth`, pins with
/// `sink = 0`, `unsupported` on a dense cache, `chunk_too_large` and
/// `window_too_small` when trimming after the read, …), and so are those
/// the subject's ops, features and declared domain cannot reach
/// ([`Capabilities::allows_event`]).
pub fn required_events(config: &Config, capabilities: &Capabilities) -> Vec<String> {
    let dense = config.variant == Variant::Dense;
    let sink = config.sink > 0;
    let window_below_capacity = config.effective_window() < config.capacity;
    let read_first = config.trim == kvmodel::Trim::BeforeRead;
    let mut events = Vec::new();
    let mut need = |event: &str, when: bool| {
        if when {
            events.push(event.to_string());
        }
    };
    need("eviction_beside_sink", sink);
    need("pin_during_eviction", dense && sink);
    need("growth", dense && config.growth);
    need("rewind_into_evicted", true);
    // An overlapping write needs room for two positions (or growth).
    need(
        "overlap_write",
        dense && (config.capacity >= 2 || config.growth),
    );
    for kind in ErrorKind::OP_KINDS {
        let reachable = match kind {
            ErrorKind::Unsupported => !dense,
            ErrorKind::NonSequential | ErrorKind::Evicted => dense,
            ErrorKind::EvictTooMany | ErrorKind::PinRange => dense,
            // With growth, only the size rule can refuse a chunk; trimming
            // after the read refuses none for room or window (§3, trim modes).
            ErrorKind::ChunkTooLarge => !config.growth && read_first,
            ErrorKind::WindowTooSmall => window_below_capacity && read_first,
            _ => true,
        };
        need(&format!("error:{}", kind.name()), reachable);
    }
    events.retain(|event| capabilities.allows_event(event));
    events
}

/// Every event of [`required_events`] over all configurations: what grid
/// mode must reach (union over its configs), of those the subject can
/// reach.
pub fn all_required_events(capabilities: &Capabilities) -> Vec<String> {
    let mut events = vec![
        "eviction_beside_sink".to_string(),
        "pin_during_eviction".to_string(),
        "growth".to_string(),
        "rewind_into_evicted".to_string(),
        "overlap_write".to_string(),
    ];
    events.extend(
        ErrorKind::OP_KINDS
            .iter()
            .map(|k| format!("error:{}", k.name())),
    );
    events.retain(|event| capabilities.allows_event(event));
    events
}

/// The events of `required` that `coverage` never counted.
pub fn missing(coverage: &Coverage, required: &[String]) -> Vec<String> {
    required
        .iter()
        .filter(|e| coverage.count(e) == 0)
        .cloned()
        .collect()
}
