//! The explorer: constructed faults are found with shortest counterexamples,
//! and a CI slice of the grid passes on the shipped caches and reaches every
//! "sometimes" event.

use std::time::Instant;

use kvcheck::check::coverage::Coverage;
use kvcheck::engine::explore::{
    all_required_events, assert_finds, grid, missing, Alphabet, Explorer,
};
use kvcheck::subject::{Capabilities, Factory, Fault, OpKind, ReferenceCache, SubjectSpec};
use kvcheck::{Config, Op, Write};

/// Asserts that BFS finds `fault` with a counterexample of exactly `len`
/// ops, and that no sequence of `len - 1` ops finds it (minimality, by
/// exhausting the shorter depth).
fn assert_shortest(config: &Config, fault: Fault, len: usize) -> Vec<Op> {
    Explorer::new(config, SubjectSpec::Fault(fault))
        .depth(len - 1)
        .assert_no_discovery();
    let found = assert_finds(config, fault, len);
    assert_eq!(found.trace.ops.len(), len, "{found}");
    assert_eq!(found.step, len - 1);
    found.trace.ops
}

fn sink_config(capacity: usize, sink: usize) -> Config {
    Config {
        sink,
        ..Config::dense(capacity)
    }
}

#[test]
fn finds_stale_rewrite_in_two_ops() {
    let ops = assert_shortest(&sink_config(4, 1), Fault::StaleRewrite, 2);
    assert_eq!(ops[0], Op::Write(Write::new(0, 1)));
    assert_eq!(ops[1], Op::Write(Write::new(0, 1)));
}

#[test]
fn finds_refuse_overlap_in_two_ops() {
    let ops = assert_shortest(&sink_config(4, 1), Fault::RefuseOverlap, 2);
    assert_eq!(ops[0], Op::Write(Write::new(0, 1)));
    assert_eq!(ops[1], Op::Write(Write::new(0, 2)));
}

#[test]
fn finds_forget_sink_after_eviction_in_two_ops() {
    // write 0+2 fills the cache; the next append evicts position 1 and the
    // faulty cache drops the sink from that very view.
    let ops = assert_shortest(&sink_config(2, 1), Fault::ForgetSinkAfterEviction, 2);
    assert_eq!(ops[0], Op::Write(Write::new(0, 2)));
}

#[test]
fn faults_are_found_on_the_packed_variant() {
    let config = Config {
        sink: 1,
        ..Config::packed(2)
    };
    let found = assert_finds(&config, Fault::StaleRewrite, 2);
    assert_eq!(found.trace.ops.len(), 2, "{found}");
}

#[test]
fn the_reference_cache_has_no_discovery() {
    let report = Explorer::new(&sink_config(3, 1), SubjectSpec::Reference)
        .depth(3)
        .alphabet(Alphabet::Small)
        .assert_no_discovery();
    assert_eq!(report.depth_completed, 3);
    assert!(report.distinct_states > 10, "{report}");
}

#[test]
fn a_prefix_starts_the_search_from_its_state() {
    let prefix = vec![Op::Write(Write::new(0, 1))];
    // From G = 1 one rewrite suffices, and the trace keeps the prefix.
    let found = Explorer::new(&sink_config(4, 1), SubjectSpec::Fault(Fault::StaleRewrite))
        .prefix(prefix.clone())
        .depth(1)
        .assert_discovery();
    assert_eq!(found.trace.ops.len(), 2);
    assert_eq!(found.trace.ops[0], prefix[0]);
}

/// The CI slice of grid mode: every config up to capacity 3 (dense and
/// packed), depth 3, small alphabet, on the shipped caches. No discovery,
/// and every "sometimes" event is reached by some config.
#[test]
fn grid_slice_passes_and_reaches_every_sometimes_event() {
    let started = Instant::now();
    let mut coverage = Coverage::default();
    let configs = grid::configs(3, None);
    for config in &configs {
        let report = Explorer::new(config, SubjectSpec::Cache)
            .depth(3)
            .alphabet(Alphabet::Small)
            .assert_no_discovery();
        assert_eq!(report.depth_completed, 3);
        coverage.merge(&report.coverage);
    }
    let missed = missing(&coverage, &all_required_events(&Capabilities::full()));
    assert!(missed.is_empty(), "the grid never reached {missed:?}");
    eprintln!(
        "grid slice: {} configs in {:.1?}",
        configs.len(),
        started.elapsed()
    );
}

/// The ring's slice of the grid: every dense config up to capacity 3,
/// depth 3, no discovery (the fingerprints include the ring's layout, so
/// rotations of the ring are explored as states of their own).
#[test]
fn grid_slice_passes_on_the_ring_cache() {
    let configs: Vec<Config> = grid::configs(3, None)
        .into_iter()
        .filter(|c| c.variant == kvcheck::Variant::Dense)
        .collect();
    assert!(configs.len() > 4);
    for config in &configs {
        let report = Explorer::new(config, SubjectSpec::Ring)
            .depth(3)
            .alphabet(Alphabet::Small)
            .assert_no_discovery();
        assert_eq!(report.depth_completed, 3);
    }
}

/// The same grid slice on the device-generic path (`cache:generic`), the
/// code a GPU runs: no discovery either.
#[test]
fn grid_slice_passes_on_the_generic_path() {
    for config in &grid::configs(3, None) {
        let report = Explorer::new(config, SubjectSpec::CachePath(kvcache::Path::Generic))
            .depth(3)
            .alphabet(Alphabet::Small)
            .assert_no_discovery();
        assert_eq!(report.depth_completed, 3);
    }
}

/// Trimming after the read (docs/contract.md §3, trim modes): the
/// reference cache, which implements it, has no discovery and reaches
/// every "sometimes" event of the mode (no `chunk_too_large` or
/// `window_too_small` is required: the mode refuses none), while the
/// cache that trims before the read is found within two ops.
#[test]
fn after_read_is_explored_on_the_caches_that_open_it() {
    let config = Config {
        trim: kvcheck::Trim::AfterRead,
        ..sink_config(3, 1)
    };
    let required = kvcheck::engine::explore::required_events(&config, &Capabilities::full());
    assert!(!required.iter().any(|e| e == "error:chunk_too_large"));
    let report = Explorer::new(&config, SubjectSpec::Reference)
        .depth(3)
        .assert_no_discovery();
    assert_eq!(missing(&report.coverage, &required), Vec::<String>::new());
    let found = Explorer::new(&config, SubjectSpec::Fault(Fault::TrimBeforeRead))
        .depth(2)
        .assert_discovery();
    assert!(found.trace.ops.len() <= 2, "{found}");
    assert_eq!(found.trace.config.trim, kvcheck::Trim::AfterRead);
}

/// The reference cache declared as a plain cache of one kind: the
/// exploration requires only the events its ops, features, trim mode and
/// domain reach, so that a correct one passes.
fn plain(name: &str, capabilities: Capabilities) -> Factory {
    Factory::new(name, capabilities, |config, device| {
        Ok(Box::new(ReferenceCache::new(config, device)?))
    })
}

#[test]
fn a_correct_append_only_or_read_then_trim_cache_reaches_what_it_can() {
    let appends_only = super::one_call::grows_only();
    let growing = Config {
        growth: true,
        ..Config::dense(2)
    };
    let explored = |config: &Config, name: &str, capabilities: Capabilities| {
        let report = Explorer::new(config, plain(name, capabilities).into())
            .depth(3)
            .assert_no_discovery();
        let missing = report.missing_events();
        assert!(missing.is_empty(), "{name}: {missing:?}");
        report
    };
    explored(&growing, "appends-only", appends_only);
    // A sink cache that trims after the read (attention sinks): no window,
    // growth or pins, and no chunk refused for room.
    let sinks = Capabilities {
        variants: vec![kvcheck::Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Reset],
        features: Vec::new(),
        trims: vec![kvcheck::Trim::AfterRead],
        ..Capabilities::full()
    };
    let config = Config {
        trim: kvcheck::Trim::AfterRead,
        ..sink_config(4, 1)
    };
    let report = explored(&config, "sinks", sinks);
    assert!(
        !report.required.iter().any(|e| e.contains("pin")),
        "{:?}",
        report.required
    );
}
