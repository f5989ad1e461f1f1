//! ring-of-rows against the model: the one call a cache's test makes
//! (`kvcheck::check`, the campaign of `kvcheck run`), and the property
//! suites of every profile its capabilities allow.

use kvcheck::subject::{Capabilities, Factory, Feature, OpKind};
use kvcheck::{CheckSettings, Variant};
use ring_of_rows::RingOfRows;

fn capabilities() -> Capabilities {
    Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Rewind, OpKind::Evict, OpKind::Reset],
        features: vec![Feature::Window],
        ..Capabilities::full()
    }
}

#[test]
fn ring_of_rows_keeps_the_contract() {
    let factory = Factory::new("ring-of-rows", capabilities(), |config, device| {
        Ok(Box::new(RingOfRows::new(config, device)?))
    });
    let checked = kvcheck::check(factory, &CheckSettings::from_env().unwrap()).unwrap();
    println!("{checked}");
    assert_eq!(checked.report.profiles.len(), 9, "{checked}");
}

#[test]
fn ring_of_rows_passes_the_suites() {
    let report =
        kvcheck::engine::suite::assert_all("ring-of-rows", capabilities(), |config, device| {
            Ok(Box::new(RingOfRows::new(config, device)?))
        });
    assert_eq!(report.ran.len(), 9, "{report}");
}
