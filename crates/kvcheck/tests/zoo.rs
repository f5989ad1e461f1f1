//! The zoo of realistic bugs (`kvcache::fault`) against the engines: every
//! fault is caught by the property suites at their default budgets and by
//! the explorer within a small depth; a fault that escapes is named.

use std::time::Duration;

use kvcache::fault::{CacheFault, FaultyCache};
use kvcheck::machine::SuiteSettings;
use kvcheck::power::{self, EXPLORE_DEPTH};
use kvcheck::subject::{Capabilities, Factory, SubjectSpec};
use kvcheck::suite::check_subject;
use kvmodel::Variant;

fn default_budgets() -> SuiteSettings {
    SuiteSettings {
        cases: 256,
        max_ops: 40,
        seed: None,
        subject: SubjectSpec::Cache,
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
