//! Subject domains: a cache that answers *outside* for what its pipeline
//! never asks is judged up to that op and never blamed for it; a declared
//! domain keeps draws inside; an *outside* answer to a request the domain
//! admits, or any under `--strict-domain`, is a divergence; a planted
//! bookkeeping bug is still found, and reported as itself.
//!
//! The subject is the shipped dense cache behind the bookkeeping of a
//! video pipeline's chunk loop, as another crate would bring it
//! ([`Factory`]): it takes appends, rewrites of the chunk being denoised,
//! probes of the view once a chunk is in, and resets; it answers
//! [`kvcache::Error::Outside`] to anything else.

use candle_core::{Device, Tensor};
use kvcache::fault::CacheFault;
use kvcache::{KvCache, RingLayout, SegmentedView, View};
use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::lockstep::Lockstep;
use kvcheck::engine::case::draw_and_run;
use kvcheck::engine::minimize::minimize;
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::oracle::Work;
use kvcheck::engine::strategy::PROFILES;
use kvcheck::engine::suite::SuiteSettings;
use kvcheck::subject::domain::Rewrites;
use kvcheck::subject::{Capabilities, Domain, Factory, OpKind, SubjectSpec};
use kvcheck::{Config, Explorer, Op, Trace, Write};
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};

/// A pipeline's cache: `inner` behind the bookkeeping of a chunk loop.
struct Pipeline {
    inner: Box<dyn KvCache>,
    /// `(start, len)` of the latest appended chunk since the last reset.
    latest: Option<(i64, i64)>,
}

fn outside(reason: &str) -> kvcache::Error {
    kvcache::Error::Outside {
        reason: reason.to_string(),
    }
}

impl Pipeline {
    /// The requests a chunk loop never makes.
    fn asked(&self, w: &Write) -> kvcache::Result<()> {
        let g = self.inner.global_end() as i64;
        if w.start > g {
            return Err(outside("a gap: the loop writes at the end"));
        }
        if w.len == 0 && (w.start != g || self.latest.is_none()) {
            return Err(outside("a probe before any chunk"));
        }
        if w.len > 0 && w.start < g && self.latest != Some((w.start, w.len)) {
            return Err(outside("a rewrite of another chunk than the latest"));
        }
        Ok(())
    }
}

impl KvCache for Pipeline {
    fn config(&self) -> &Config {
        self.inner.config()
    }
    fn global_end(&self) -> u64 {
        self.inner.global_end()
    }
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        self.asked(request)?;
        let g = self.inner.global_end() as i64;
        let view = self.inner.write(request, k, v)?;
        if request.start == g && request.len > 0 {
            self.latest = Some((request.start, request.len));
        }
        Ok(view)
    }
    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> kvcache::Result<SegmentedView<'_>> {
        self.asked(request)?;
        let g = self.inner.global_end() as i64;
        let view = self.inner.write_segments(request, k, v)?;
        if request.start == g && request.len > 0 {
            self.latest = Some((request.start, request.len));
        }
        Ok(view)
    }
    fn view(&self) -> kvcache::Result<View<'_>> {
        self.inner.view()
    }
    fn rewind(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("the loop never rewinds"))
    }
    fn evict(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("the loop never evicts by hand"))
    }
    fn pin(&mut self, _: i64) -> kvcache::Result<u64> {
        Err(outside("the loop never pins"))
    }
    fn reset(&mut self) -> kvcache::Result<u64> {
        self.latest = None;
        self.inner.reset()
    }
    fn ring(&self) -> Option<RingLayout> {
        self.inner.ring()
    }

    fn internals(&self) -> Option<&dyn kvcache::Internals> {
        self.inner.internals()
    }
}

/// What the loop declares: the latest chunk only, probes after an append,
/// nothing malformed, no gaps.
fn loop_domain() -> Domain {
    Domain {
        rewrites: Rewrites::Latest,
        ..Domain::pipeline()
    }
}

/// The pipeline subject over the shipped cache (with `fault` planted),
/// declaring `domain`.
fn pipeline(fault: Option<CacheFault>, domain: Option<Domain>) -> SubjectSpec {
    let inner = fault.map_or(SubjectSpec::Cache, SubjectSpec::CacheFault);
    // Dense only, no head ranges or recent windows. Undeclared, it is
    // asked every op and answers outside to those the loop never makes;
    // declared, it names the ops it implements as well.
    let ops = match domain {
        Some(_) => vec![OpKind::Write, OpKind::Reset],
        None => vec![OpKind::Write, OpKind::Reset, OpKind::Evict, OpKind::Pin],
    };
    let capabilities = Capabilities {
        variants: vec![kvcheck::Variant::Dense],
        features: Vec::new(),
        ops,
        domain,
        ..Capabilities::full()
    };
    let name = format!("pipeline:{}", fault.map_or("none", |f| f.name()));
    SubjectSpec::Factory(Factory::new(&name, capabilities, move |config, device| {
        Ok(Box::new(Pipeline {
            inner: inner.open(config, device)?,
            latest: None,
        }))
    }))
}

fn config() -> Config {
    Config {
        sink: 2,
        ..Config::dense(8)
    }
}

fn w(start: i64, len: i64) -> Op {
    Op::Write(Write::new(start, len))
}

fn check(subject: &SubjectSpec, ops: &[Op]) -> (Option<DivergenceKind>, Work) {
    let mut work = Work::default();
    let found = Oracle::model()
        .check_counted(&config(), ops, subject, &mut work)
        .unwrap();
    (found.map(|d| d.kind), work)
}

#[test]
fn an_outside_answer_cuts_the_case_and_is_no_divergence() {
    let subject = pipeline(None, None);
    let (found, work) = check(&subject, &[w(0, 2), w(2, 2), w(5, 1), w(4, 2)]);
    assert_eq!(found, None);
    let cut = work.cut.expect("the gap is cut");
    assert_eq!((cut.step, cut.answered), (2, true));
    assert!(cut.reason.contains("gap"), "{}", cut.reason);
    // The harness names the declaration that keeps such ops from being drawn.
    assert_eq!(cut.suggestion, Some("\"gaps\": false"));
    assert_eq!(work.ops, 2, "the two ops before the cut are judged");
}

#[test]
fn what_comes_before_the_cut_is_still_judged() {
    // The bug shows at op 5 (a rewrite after the roll lands S rows early);
    // a later op outside the domain does not hide it.
    let subject = pipeline(Some(CacheFault::SlotIgnoresSink), None);
    let ops = [
        w(0, 2),
        w(2, 2),
        w(4, 2),
        w(6, 2),
        w(8, 2),
        w(8, 2),
        w(13, 1),
    ];
    let (found, _) = check(&subject, &ops);
    assert_eq!(found, Some(DivergenceKind::Values));
}

#[test]
fn a_declared_domain_keeps_requests_outside_it_unsent() {
    let subject = pipeline(None, Some(loop_domain()));
    let (found, work) = check(&subject, &[w(0, 2), w(0, 1)]);
    assert_eq!(found, None);
    let cut = work.cut.expect("cut");
    assert!(!cut.answered, "never sent");
    assert!(
        cut.reason.contains("\"rewrites\": \"latest\""),
        "{}",
        cut.reason
    );
}

#[test]
fn an_outside_answer_to_a_declared_request_is_a_domain_violation() {
    // Declares any rewrite, but answers outside to an older chunk's.
    let wide = Domain {
        rewrites: Rewrites::Any,
        ..loop_domain()
    };
    let subject = pipeline(None, Some(wide));
    let (found, _) = check(&subject, &[w(0, 2), w(2, 2), w(0, 2)]);
    assert_eq!(found, Some(DivergenceKind::Domain));
}

#[test]
fn strict_domain_makes_every_outside_answer_a_divergence() {
    let subject = pipeline(None, Some(loop_domain()));
    let mut run = Lockstep::open(&config(), &subject, &Device::Cpu).unwrap();
    run.set_strict_domain(true);
    run.step(&w(0, 2)).unwrap();
    // Strict: the declaration is ignored, the gap is sent and its answer judged.
    let d = run.step(&w(5, 1)).unwrap_err();
    assert_eq!(d.kind, DivergenceKind::Outside);
}

fn runner(seed: u8) -> TestRunner {
    TestRunner::new_with_rng(
        RunnerConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

/// Runs `cases` cases of profile `name` on `subject`: (divergence kinds
/// found, drawn ops, drawn ops outside the domain).
fn campaign(name: &str, subject: &SubjectSpec, cases: u8) -> (Vec<DivergenceKind>, usize, usize) {
    let index = PROFILES.iter().position(|p| p.name == name).unwrap();
    let (mut found, mut drawn, mut outside) = (Vec::new(), 0, 0);
    for seed in 0..cases {
        let outcome = draw_and_run(
            &PROFILES[index],
            &mut runner(seed),
            40,
            subject,
            &Oracle::model(),
        )
        .unwrap();
        drawn += outcome.drawn;
        outside += outcome.outside();
        found.extend(outcome.divergence.map(|d| d.kind));
    }
    (found, drawn, outside)
}

#[test]
fn a_declared_pipeline_draws_inside_its_domain_and_passes() {
    let subject = pipeline(None, Some(loop_domain()));
    for profile in ["pipeline", "sinks", "tiny"] {
        let (found, drawn, outside) = campaign(profile, &subject, 40);
        assert!(found.is_empty(), "{profile}: {found:?}");
        assert!(drawn > 200, "{profile}: {drawn}");
        assert_eq!(outside, 0, "{profile}: {outside} of {drawn} outside");
    }
}

#[test]
fn an_undeclared_pipeline_passes_with_its_cuts_counted() {
    let subject = pipeline(None, None);
    let (found, drawn, outside) = campaign("sinks", &subject, 40);
    assert!(found.is_empty(), "{found:?}");
    assert!(outside > 0 && outside < drawn, "{outside} of {drawn}");
}

#[test]
fn a_planted_bug_is_found_as_itself_with_or_without_a_declaration() {
    for domain in [Some(loop_domain()), None] {
        let subject = pipeline(Some(CacheFault::SlotIgnoresSink), domain.clone());
        let (found, _, _) = campaign("pipeline", &subject, 40);
        assert!(!found.is_empty(), "{domain:?}: not found");
        for kind in found {
            assert!(
                !matches!(kind, DivergenceKind::Outside | DivergenceKind::Domain),
                "{kind:?}"
            );
        }
    }
}

#[test]
fn the_suites_pass_a_declared_pipeline() {
    let settings = SuiteSettings {
        cases: 24,
        max_ops: 30,
        seed: Some(1),
        ..SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
    };
    let subject = pipeline(None, Some(loop_domain()));
    kvcheck::engine::suite::check_subject(&subject, &settings).unwrap();
}

#[test]
fn explore_stays_inside_a_declared_domain_and_counts_outside_answers() {
    let declared = Explorer::new(&config(), pipeline(None, Some(loop_domain())))
        .depth(3)
        .run()
        .unwrap();
    assert_eq!(declared.outside, 0);
    assert!(declared.transitions > 10, "{declared}");
    let undeclared = Explorer::new(&config(), pipeline(None, None))
        .depth(3)
        .run()
        .unwrap();
    assert!(undeclared.outside > 0, "{undeclared}");
}

#[test]
fn minimize_never_returns_a_trace_that_leaves_the_domain() {
    let subject = pipeline(Some(CacheFault::SlotIgnoresSink), None);
    // Removing an append turns a later rewrite into one of an older chunk
    // or a gap: candidates that leave the domain, cut before the bug.
    let ops = vec![
        w(0, 2),
        w(2, 2),
        w(2, 2),
        w(4, 2),
        w(6, 2),
        w(8, 2),
        w(8, 2),
    ];
    let m = minimize(&Trace::new(config(), ops), subject.clone(), 500).unwrap();
    let (found, work) = check(&subject, &m.trace.ops);
    assert_eq!(found, Some(m.divergence.kind));
    assert!(work.cut.is_none(), "{}", m.trace.to_json());
}

#[test]
fn the_outside_share_warns_and_names_the_declarations_to_make() {
    use kvcheck::report::DomainTally;
    let mut tally = DomainTally::default();
    // Judged whole: no line at all.
    tally.count(10, 10, None);
    assert_eq!(tally.summary(), None);
    // Three of four cases cut early: well over the threshold.
    tally.count(10, 0, Some((1, Some("\"gaps\": false"))));
    tally.count(10, 0, Some((2, Some("\"gaps\": false"))));
    tally.count(10, 0, Some((0, Some("\"probes\": \"after_append\""))));
    let line = tally.summary().unwrap();
    assert!(
        line.contains("27 of 40 drawn ops (67.5%), 3 cases cut"),
        "{line}"
    );
    assert!(line.contains("warning"), "{line}");
    let gaps = line
        .find("\"gaps\": false (2)")
        .expect("named with its count");
    let probes = line
        .find("\"probes\": \"after_append\" (1)")
        .expect("named");
    assert!(gaps < probes, "most cut cases first: {line}");
    // Under the threshold: the share, no warning.
    let mut low = DomainTally::default();
    low.count(100, 95, Some((95, None)));
    let line = low.summary().unwrap();
    assert!(!line.contains("warning"), "{line}");
}

#[test]
fn after_the_subject_departs_from_the_contract_an_outside_answer_cuts() {
    use kvcheck::check::record::{observe, Plan};
    // The loop takes a chunk that does not fit beside the sink (the
    // contract refuses it); from then on its latest chunk is not the
    // contract's, so its outside answer to a rewrite of the contract's
    // latest chunk says nothing about its declaration. The model judges
    // the accepted chunk itself.
    let wide = Domain {
        oversized: true,
        ..loop_domain()
    };
    let config = Config {
        sink: 2,
        ..Config::dense(3)
    };
    let ops = [w(0, 2), w(2, 1), w(3, 2), w(2, 1)];
    let departed = pipeline(Some(CacheFault::ChunkOverProtected), Some(wide.clone()));
    let transcript = observe(&departed, &Plan::of(&config, &ops)).unwrap();
    assert_eq!(transcript.failure, None);
    assert!(transcript.cut.is_some(), "the rewrite is cut");
    assert_eq!(transcript.seen.len(), 3);
    // A subject that agrees with the contract on every op before it is
    // held to its declaration.
    let ops = [w(0, 2), w(2, 1), w(2, 1), w(0, 2)];
    let any = Domain {
        rewrites: Rewrites::Any,
        ..wide
    };
    let kept = pipeline(None, Some(any));
    let transcript = observe(&kept, &Plan::of(&config, &ops)).unwrap();
    let (kind, _) = transcript.failure.expect("a domain violation");
    assert_eq!(kind, DivergenceKind::Domain);
}

#[test]
fn a_subject_that_answers_outside_at_open_is_cut_by_every_judge() {
    // A loop that opens only some geometries (a block length that must be
    // the sink) answers outside to the others before any op: each judge
    // cuts the case there, with nothing to judge and nothing to recurse on.
    let capabilities = Capabilities {
        variants: vec![kvcheck::Variant::Dense],
        features: Vec::new(),
        ops: vec![OpKind::Write, OpKind::Reset],
        domain: Some(loop_domain()),
        ..Capabilities::full()
    };
    let subject = SubjectSpec::Factory(Factory::new("opens-nothing", capabilities, |_, _| {
        Err(outside("this geometry is never opened"))
    }));
    for oracle in [Oracle::model(), Oracle::relations(None)] {
        let mut work = Work::default();
        let found = oracle
            .check_counted(&config(), &[w(0, 2), w(2, 2)], &subject, &mut work)
            .unwrap();
        assert!(found.is_none(), "{oracle:?}");
        assert!(work.cut.is_some(), "{oracle:?}");
    }
}
