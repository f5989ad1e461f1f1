//! Capabilities: every engine generates only what a subject supports, the
//! minimizer never introduces anything else, and the driver refuses to send
//! an op the subject lacks.

use std::sync::Arc;

use candle_core::Device;
use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::lockstep::{Lockstep, SetupError};
use kvcheck::check::trace::Trace;
use kvcheck::engine::case::draw_and_run;
use kvcheck::engine::explore::Alphabet;
use kvcheck::engine::fuzzcase::FuzzCase;
use kvcheck::engine::minimize::minimize;
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::strategy::{profile_configs, profile_support, RefState, PROFILES};
use kvcheck::subject::{Capabilities, Factory, Fault, OpKind, ReferenceCache, SubjectSpec};
use kvcheck::{Config, Dtype, Model, Op, Variant, Write};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

/// Dense, f16 only, writes and rewinds, no optional feature.
fn narrow() -> Capabilities {
    Capabilities {
        variants: vec![Variant::Dense],
        dtypes: vec![Dtype::F16],
        ops: vec![OpKind::Write, OpKind::Rewind],
        features: vec![],
        ..Capabilities::full()
    }
}

fn stale_rewrite(capabilities: Capabilities) -> SubjectSpec {
    Factory::new("stale", capabilities, |config, device| {
        Ok(Box::new(ReferenceCache::with_fault(
            config,
            device,
            Fault::StaleRewrite,
        )?))
    })
    .into()
}

#[test]
fn shipped_and_constructed_subjects_have_every_capability() {
    for subject in [SubjectSpec::Cache, SubjectSpec::Fault(Fault::StaleRewrite)] {
        assert!(subject.capabilities().unwrap().is_full());
    }
    // The naive cache opens the other trim mode too, and so does the
    // fault that claims it (docs/contract.md §3, trim modes).
    for subject in [
        SubjectSpec::Reference,
        SubjectSpec::Fault(Fault::TrimBeforeRead),
    ] {
        assert_eq!(
            subject.capabilities().unwrap(),
            kvcheck::Capabilities::full_with_after_read()
        );
    }
}

#[test]
fn strategies_draw_only_supported_configs_and_ops() {
    let caps = Arc::new(narrow());
    let mut runner = TestRunner::deterministic();
    let mut drawn = 0;
    for profile in PROFILES {
        if profile_support(profile, &caps).is_err() {
            continue;
        }
        let configs = profile_configs(profile, Arc::clone(&caps));
        for _ in 0..20 {
            let config = configs.new_tree(&mut runner).unwrap().current();
            assert!(caps.supports_config(&config).is_ok(), "{config:?}");
            let mut state = RefState::for_subject(&config, Arc::clone(&caps));
            for _ in 0..30 {
                let op = (profile.ops)(&state)
                    .new_tree(&mut runner)
                    .unwrap()
                    .current();
                assert!(
                    caps.supports_op(&op).is_ok(),
                    "profile {}: {op}",
                    profile.name
                );
                state.apply(&op);
                drawn += 1;
            }
        }
    }
    assert!(drawn >= 600, "only {drawn} ops drawn");
    // Profiles that need what the subject lacks are not run at all.
    let skipped: Vec<&str> = PROFILES
        .iter()
        .filter(|p| profile_support(p, &caps).is_err())
        .map(|p| p.name)
        .collect();
    assert_eq!(
        skipped,
        [
            "tiny",
            "sinks",
            "window",
            "pins",
            "growth",
            "multi-head",
            "batch2",
            "packed",
            "pipeline",
            "decode"
        ]
    );
}

#[test]
fn campaign_cases_stay_within_the_capabilities() {
    let subject: SubjectSpec = Factory::new("narrow", narrow(), |config, device| {
        Ok(Box::new(ReferenceCache::new(config, device)?))
    })
    .into();
    let half = PROFILES.iter().position(|p| p.name == "half").unwrap();
    let mut runner = TestRunner::deterministic();
    for _ in 0..64 {
        let outcome =
            draw_and_run(&PROFILES[half], &mut runner, 40, &subject, &Oracle::model()).unwrap();
        assert!(
            outcome.divergence.is_none(),
            "{}",
            outcome.divergence.unwrap()
        );
    }
    let tiny = PROFILES.iter().position(|p| p.name == "tiny").unwrap();
    let err = draw_and_run(&PROFILES[tiny], &mut runner, 40, &subject, &Oracle::model())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("unsupported by the subject: profile tiny"),
        "{err}"
    );
}

#[test]
fn the_alphabet_and_the_fuzz_decoder_stay_within_the_capabilities() {
    let caps = narrow();
    let mut config = Config::dense(3);
    config.dtype = Dtype::F16;
    let model = Model::new(&config).unwrap();
    for alphabet in [Alphabet::Full, Alphabet::Small] {
        let all = alphabet.ops(&model);
        let kept = alphabet.ops_for(&model, &caps);
        assert!(kept.len() < all.len() && !kept.is_empty());
        assert!(kept.iter().all(|op| caps.supports_op(op).is_ok()));
    }
    for seed in 0..200u32 {
        let bytes: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) as u8)
            .collect();
        let case = FuzzCase::decode_for(Variant::Dense, &bytes, 64, &caps);
        assert!(
            caps.supports_trace(&case.config, &case.ops).is_ok(),
            "{case:?}"
        );
    }
}

#[test]
fn the_minimizer_never_introduces_what_the_subject_lacks() {
    let caps = narrow();
    let config = Config {
        sink: 1,
        dtype: Dtype::F16,
        heads: 2,
        ..Config::dense(5)
    };
    let mut ops: Vec<Op> = (0..6).map(|i| Op::Write(Write::new(i, 1))).collect();
    ops.extend([Op::Rewind { to: 5 }, Op::Write(Write::new(4, 1))]);
    let m = minimize(&Trace::new(config, ops), stale_rewrite(caps.clone()), 500).unwrap();
    // The config pass would try f32 first; the subject only has f16.
    assert_eq!(m.trace.config.dtype, Dtype::F16);
    assert!(caps.supports_trace(&m.trace.config, &m.trace.ops).is_ok());
    assert_eq!(m.trace.ops.len(), 2, "{}", m.trace.to_json());
}

#[test]
fn the_driver_does_not_send_an_unsupported_op_or_open_an_unsupported_config() {
    let subject = stale_rewrite(narrow());
    let err = Lockstep::open(&Config::dense(4), &subject, &Device::Cpu)
        .err()
        .unwrap();
    assert!(matches!(err, SetupError::Unsupported(_)));
    assert_eq!(err.to_string(), "unsupported by the subject: dtype f32");
    let config = Config {
        dtype: Dtype::F16,
        ..Config::dense(4)
    };
    let mut run = Lockstep::open(&config, &subject, &Device::Cpu).unwrap();
    run.step(&Op::Write(Write::new(0, 2))).unwrap();
    let d = run.step(&Op::Evict { tokens: 1 }).unwrap_err();
    assert_eq!(d.kind, DivergenceKind::Unsupported);
    assert_eq!(d.actual, "unsupported by the subject: op evict");
    let d = run.step(&Op::write(2, 1, None, Some(1))).unwrap_err();
    assert!(d.actual.contains("recent window"), "{d}");
}

#[test]
fn the_ring_subject_parses_names_and_displays_itself() {
    let ring = SubjectSpec::parse("cache:ring").unwrap();
    assert_eq!(ring, SubjectSpec::Ring);
    assert_eq!(ring.name(&Config::dense(4)), "ring");
    assert_eq!(ring.to_string(), "cache:ring");
    for text in ["cache", "cache:ring", "reference", "fault:stale-rewrite"] {
        let spec = SubjectSpec::parse(text).unwrap();
        assert_eq!(spec.to_string(), text);
        assert_eq!(SubjectSpec::parse(&spec.to_string()).unwrap(), spec);
    }
    let caps = ring.capabilities().unwrap();
    assert!(caps.supports_config(&Config::dense(4)).is_ok());
    let err = caps.supports_config(&Config::packed(4)).unwrap_err();
    assert_eq!(err.what, "variant packed");
    assert!(!caps.has(kvcheck::subject::Feature::Quant));
    assert!(caps.has(kvcheck::subject::Feature::Growth));
}
