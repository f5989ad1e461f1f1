//! The zoo of realistic bugs (`kvcache::fault`) against the engines: every
//! fault is caught by the property suites at their default budgets and by
//! the explorer within a small depth, on the shipped caches and (dense
//! faults) on the ring and the device-generic path; a fault that escapes
//! is named, and the correct caches alone are clean.

use std::time::Duration;

use kvcache::fault::{CacheFault, FaultBase, FaultyCache};
use kvcheck::engine::power::{self, Target, EXPLORE_DEPTH};
use kvcheck::engine::suite::check_subject;
use kvcheck::engine::suite::SuiteSettings;
use kvcheck::subject::{ring_capabilities, Capabilities, Factory, SubjectSpec};
use kvmodel::Variant;

fn default_budgets() -> SuiteSettings {
    SuiteSettings {
        cases: 256,
        max_ops: 40,
        seed: None,
        subject: SubjectSpec::Cache,
        oracle: kvcheck::engine::oracle::Oracle::model(),
        ..SuiteSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
    }
}

#[test]
fn the_zoo_has_faults_in_every_variant_and_quantization() {
    assert!(CacheFault::ALL.len() >= 16);
    for variant in [Variant::Dense, Variant::Packed] {
        assert!(CacheFault::ALL.iter().any(|f| f.variant() == variant));
    }
    for quant in [kvmodel::Quant::Int8, kvmodel::Quant::Int4] {
        assert!(CacheFault::ALL
            .iter()
            .any(|f| f.quants().is_some_and(|q| q.contains(&quant))));
    }
    for fault in CacheFault::ALL {
        assert_eq!(CacheFault::from_name(fault.name()), Some(fault));
        assert_eq!(
            SubjectSpec::parse(&format!("fault:{}", fault.name())),
            Ok(SubjectSpec::CacheFault(fault))
        );
        assert!(!fault.doc().is_empty());
    }
}

#[test]
fn every_fault_is_caught_by_the_property_suites() {
    let settings = default_budgets();
    let escaped: Vec<&str> = CacheFault::ALL
        .into_iter()
        .filter(|&fault| !power::suites(fault.into(), &settings).caught)
        .map(CacheFault::name)
        .collect();
    assert!(
        escaped.is_empty(),
        "faults escaping the property suites: {escaped:?}"
    );
}

#[test]
fn every_fault_is_caught_by_the_explorer_within_a_small_depth() {
    let escaped: Vec<String> = CacheFault::ALL
        .into_iter()
        .filter_map(|fault| {
            let catch = power::explore(fault.into(), EXPLORE_DEPTH, Duration::from_secs(60));
            (!catch.caught).then(|| format!("{}: {}", fault.name(), catch.note))
        })
        .collect();
    assert!(
        escaped.is_empty(),
        "faults escaping the explorer: {escaped:?}"
    );
}

/// The wrapper is the shipped cache when its fault cannot fire: a dense
/// fault on packed configs and a packed fault on dense configs pass every
/// profile. Without this, a wrapper bug would make every fault "caught".
#[test]
fn an_inert_fault_is_the_shipped_cache() {
    let factory = Factory::new("inert-fault", Capabilities::full(), |config, device| {
        let fault = match config.variant {
            Variant::Dense => CacheFault::PackedReturnsEveryHead,
            Variant::Packed => CacheFault::RollOneShort,
        };
        Ok(Box::new(FaultyCache::new(config, device, fault)?))
    });
    let settings = SuiteSettings {
        cases: 48,
        ..default_budgets()
    };
    if let Err(message) = check_subject(&factory.into(), &settings) {
        panic!("the wrapper with an inert fault diverged:\n{message}");
    }
}

/// The faults apply unchanged on top of the `RingCache` (dense faults) and
/// of the device-generic path (all): the property suites and the explorer
/// catch each there too.
#[test]
fn every_fault_is_caught_on_the_ring_and_the_generic_path() {
    let settings = default_budgets();
    for base in [FaultBase::Ring, FaultBase::Generic] {
        let escaped: Vec<String> = CacheFault::ALL
            .into_iter()
            .filter(|f| base.holds(f.variant()))
            .flat_map(|fault| {
                let target = Target::fault(fault, base);
                let explored = power::explore(target, EXPLORE_DEPTH, Duration::from_secs(60));
                let suites = power::suites(target, &settings);
                [("explore", explored), ("suites", suites)]
                    .into_iter()
                    .filter(|(_, catch)| !catch.caught)
                    .map(move |(engine, catch)| {
                        format!("{} ({engine}): {}", fault.name(), catch.note)
                    })
            })
            .collect();
        assert!(escaped.is_empty(), "faults escaping on {base}: {escaped:?}");
    }
    assert_eq!(
        CacheFault::ALL
            .iter()
            .filter(|f| FaultBase::Ring.holds(f.variant()))
            .count(),
        18
    );
}

/// The control rows: the engines find nothing on the correct caches the
/// faults are injected into.
#[test]
fn the_control_rows_are_clean() {
    for base in FaultBase::ALL {
        let target = Target::control(base);
        let catch = power::explore(target, 3, Duration::from_secs(60));
        assert!(!catch.caught, "{}: {}", target.name(), catch.note);
        assert!(catch.work > 1000, "{}: {catch:?}", target.name());
        let catch = power::run(target, 1, Duration::from_millis(300), 40);
        assert!(!catch.caught, "{}: {}", target.name(), catch.note);
        assert!(catch.work > 0, "{}: {catch:?}", target.name());
    }
}

/// The ring wrapper is the `RingCache` when its fault cannot fire (a packed
/// fault on dense configs): every dense profile passes. A packed config
/// on the ring is refused as the ring refuses it.
#[test]
fn an_inert_fault_on_the_ring_is_the_ring() {
    let factory = Factory::new("inert-fault-ring", ring_capabilities(), |config, device| {
        Ok(Box::new(FaultyCache::on(
            config,
            device,
            CacheFault::PackedReturnsEveryHead,
            FaultBase::Ring,
        )?))
    });
    let settings = SuiteSettings {
        cases: 48,
        ..default_budgets()
    };
    if let Err(message) = check_subject(&factory.into(), &settings) {
        panic!("the ring wrapper with an inert fault diverged:\n{message}");
    }
    let refused = FaultyCache::on(
        &kvmodel::Config::packed(4),
        &candle_core::Device::Cpu,
        CacheFault::RollOneShort,
        FaultBase::Ring,
    );
    assert_eq!(
        refused.err().and_then(|e| e.kind()),
        Some(kvmodel::ErrorKind::InvalidConfig)
    );
}

#[test]
fn faults_on_other_bases_parse_and_name_themselves() {
    let ring = SubjectSpec::parse("fault:roll-one-short@ring").unwrap();
    assert_eq!(
        ring,
        SubjectSpec::cache_fault(CacheFault::RollOneShort, FaultBase::Ring)
    );
    assert_ne!(ring, SubjectSpec::CacheFault(CacheFault::RollOneShort));
    assert_eq!(ring.to_string(), "fault:roll-one-short@ring");
    assert_eq!(SubjectSpec::parse(&ring.to_string()), Ok(ring.clone()));
    assert_eq!(
        SubjectSpec::parse("fault:roll-one-short@shipped"),
        Ok(SubjectSpec::CacheFault(CacheFault::RollOneShort))
    );
    let caps = ring.capabilities().unwrap();
    assert_eq!(caps.variants, vec![Variant::Dense]);
    let err = SubjectSpec::parse("fault:scale-reciprocal@ring")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no packed variant"), "{err}");
    let err = SubjectSpec::parse("fault:roll-one-short@gpu")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown cache \"gpu\""), "{err}");
    let err = SubjectSpec::parse("fault:nothing@ring")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown fault \"nothing\""), "{err}");
}
