//! Sliding windows (docs/contract.md §19) in the prefix engines: the
//! shipped paged cache on windowed configs under both judges, a read that
//! ignores the window caught by each, the invariants' room bound over every
//! block table of a request, and the Python reference subjects (windowed
//! reads, blocks given up or freed behind the window, its planted
//! off-by-one) over the protocol.

use std::collections::BTreeSet;

use candle_core::Device;
use kvcache::PagedCache;
use kvcheck::engine::prefix::campaign::{
    self, draw_case, PagedSubject, PrefixRunSettings, Windows,
};
use kvcheck::engine::prefix::drive::{drive, Judge};
use kvcheck::engine::prefix::PrefixDivergenceKind;
use kvcheck::subject::prefix::{
    Groups, PrefixCapabilities, PrefixFailure, PrefixSubjectCache, Steps,
};
use kvmodel::prefix::{
    BlockCounts, PrefixConfig, PrefixEffect, PrefixErrorKind, PrefixOp, RequestId, Window,
};

use crate::cli_support::{kvcheck, python_missing};

fn judges() -> [Judge; 2] {
    [Judge::Model, Judge::Invariants(BTreeSet::new())]
}

#[test]
fn windowed_campaigns_draw_windows_and_both_judges_pass_the_paged_cache() {
    let caps = PrefixCapabilities::full();
    let drawn: Vec<_> = (0..40)
        .map(|case| draw_case(&caps, 1, case, 10, true).0)
        .collect();
    assert!(drawn.iter().all(|c| c.window.is_some()));
    assert!(drawn.iter().any(|c| {
        let w = c.window.as_ref().unwrap();
        w.layers.len() < c.layers
    }));
    assert!(drawn.iter().all(|c| c.validate().is_ok()));
    assert!((0..40).all(|case| draw_case(&caps, 1, case, 10, false).0.window.is_none()));
    for judge in judges() {
        let settings = PrefixRunSettings {
            seed: 5,
            cases: Some(400),
            judge: Some(judge.clone()),
            windows: Windows::Always,
            ..PrefixRunSettings::default()
        };
        let report = campaign::run(&mut PagedSubject { fault: None }, &settings, &mut |_| {});
        assert!(report.failure.is_none(), "{judge:?}: {:?}", report.failure);
        assert_eq!(report.cases, 400);
    }
}

/// The paged cache as a subject that reads every row, whatever the window,
/// or that answers `no_room` for a start as a cache of two block tables
/// per request would, and says it holds `groups`.
struct Misreading {
    cache: PagedCache,
    ignore_window: bool,
    two_tables: bool,
    groups: Groups,
}

impl PrefixSubjectCache for Misreading {
    fn config(&self) -> &PrefixConfig {
        PrefixSubjectCache::config(&self.cache)
    }

    fn apply(&mut self, index: u64, op: &PrefixOp) -> Result<PrefixEffect, PrefixFailure> {
        if let (true, PrefixOp::Start { tokens, .. }) = (self.two_tables, op) {
            let counts = PrefixSubjectCache::counts(&self.cache);
            let need = 2 * tokens.len().div_ceil(self.config().block_size) as u64;
            if need > counts.free + counts.cached {
                return Err(PrefixFailure::Refused {
                    kind: PrefixErrorKind::NoRoom,
                    error: None,
                    message: format!("two tables need {need} blocks"),
                    counts: Some(counts),
                });
            }
        }
        PrefixSubjectCache::apply(&mut self.cache, index, op)
    }

    fn counts(&self) -> BlockCounts {
        PrefixSubjectCache::counts(&self.cache)
    }

    fn probe(&mut self, request: RequestId, start: usize) -> Result<Vec<f32>, PrefixFailure> {
        let start = if self.ignore_window { 0 } else { start };
        self.cache.probe(request, start)
    }

    fn groups(&self) -> Groups {
        self.groups
    }
}

fn windowed(size: usize) -> PrefixConfig {
    PrefixConfig {
        window: Some(Window::all_layers(size, 1)),
        ..PrefixConfig::new(4, 2)
    }
}

fn misreading(config: &PrefixConfig, ignore_window: bool, two_tables: bool) -> Misreading {
    Misreading {
        cache: PagedCache::new(config, &Device::Cpu).unwrap(),
        ignore_window,
        two_tables,
        groups: Groups::of(config),
    }
}

fn start_and_compute(tokens: Vec<u32>) -> Vec<PrefixOp> {
    let count = tokens.len() as i64;
    vec![
        PrefixOp::Start { request: 0, tokens },
        PrefixOp::Compute { request: 0, count },
    ]
}

#[test]
fn a_read_that_ignores_the_window_is_caught_by_either_judge() {
    let config = windowed(2);
    let ops = start_and_compute(vec![1, 2, 3, 4]);
    for judge in judges() {
        let driven = drive(misreading(&config, false, false), &judge, Steps::Free, &ops).unwrap();
        assert!(driven.passed(), "{judge:?}: {:?}", driven.divergence);
        let driven = drive(misreading(&config, true, false), &judge, Steps::Free, &ops).unwrap();
        let d = driven.divergence.expect("caught");
        assert_eq!(d.step, 1, "{d}");
        assert!(
            d.actual.contains(
                "expected 1 (1 layers x 4 positions x 1, the 1 windowed layers from position 3)"
            ),
            "{d}"
        );
        if matches!(judge, Judge::Model) {
            assert_eq!(d.kind, PrefixDivergenceKind::Rows);
        } else {
            assert!(d.expected.starts_with("P3"), "{d}");
        }
    }
}

#[test]
fn the_invariants_bound_an_ops_need_by_every_block_table_of_a_request() {
    // Four blocks of two slots, a prompt of five tokens: one table needs
    // three blocks, two tables six. A cache of two tables refuses it with
    // every block free: P9 for a cache of one table, its due for two.
    let config = PrefixConfig::new(4, 2);
    let ops = vec![PrefixOp::Start {
        request: 0,
        tokens: vec![1, 2, 3, 4, 5],
    }];
    let judge = Judge::Invariants(BTreeSet::new());
    let one = drive(misreading(&config, false, true), &judge, Steps::Free, &ops).unwrap();
    let d = one.divergence.expect("one table: room when free");
    assert!(d.expected.starts_with("P9"), "{d}");
    let mut two = misreading(&config, false, true);
    two.groups = Groups { full: 1, window: 1 };
    let driven = drive(two, &judge, Steps::Free, &ops).unwrap();
    assert!(driven.passed(), "{:?}", driven.divergence);
}

fn reference(args: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    format!(
        "exec:env PYTHONPATH={root}/python python3 {root}/adapters/reference_prefix_subject.py {args}"
    )
}

fn run(subject: &str, cases: &str) -> (i32, String, String) {
    kvcheck(&[
        "prefix",
        "run",
        "--subject",
        subject,
        "--cases",
        cases,
        "--seed",
        "1",
        "--out",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/prefix-windows"),
    ])
}

#[test]
fn the_windowed_python_references_pass_and_their_planted_off_by_one_is_caught() {
    if python_missing() {
        return;
    }
    // Windowed reads judged by the model; the hybrid of a full and a
    // windowed layer; blocks given up behind the window, by the invariants.
    for (args, judged) in [
        ("--window", "judged by the model"),
        ("--window 1,3 --window-layers 1", "judged by the model"),
        ("--window --free-behind-window", "judged by the invariants"),
        // Blocks behind the window freed, not cached: no hit is promised
        // through them (P5 would fire on the next prompt that shares them).
        ("--window --drop-behind-window", "judged by the invariants"),
    ] {
        let (code, out, err) = run(&reference(args), "150");
        assert_eq!(code, 0, "{args}: {out}{err}");
        assert!(
            out.contains("150 cases") && out.contains(judged),
            "{args}: {out}"
        );
    }
    let (code, out, err) = run(
        &reference("--window 1,2,3 --fault frees-window-start"),
        "300",
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("P3: r"), "{out}");
    assert!(out.contains("holds 0.0"), "{out}");
}

#[test]
fn check_prefix_draws_a_window_on_every_other_case_of_a_cache_that_opens_any() {
    use kvcheck::engine::prefix::check::PrefixFactory;
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let factory = |ignore_window: bool| {
        let seen = seen.clone();
        PrefixFactory {
            name: "paged".into(),
            capabilities: PrefixCapabilities::full(),
            make: move |config: &PrefixConfig| {
                seen.borrow_mut().push(config.window.is_some());
                Ok::<_, String>(misreading(config, ignore_window, false))
            },
        }
    };
    let settings = kvcheck::CheckSettings::default().cases(60).seed(3);
    let checked = kvcheck::check_prefix(factory(false), &settings).unwrap();
    assert_eq!(checked.report.unwrap().cases, 60);
    let windowed = seen.borrow().iter().filter(|&&w| w).count();
    assert_eq!(windowed, 30, "{:?}", seen.borrow());
    // A cache that reads every row whatever the window fails the same call.
    let failure = kvcheck::check_prefix(factory(true), &settings)
        .unwrap_err()
        .to_string();
    assert!(
        failure.contains("windowed layers from position"),
        "{failure}"
    );
}
