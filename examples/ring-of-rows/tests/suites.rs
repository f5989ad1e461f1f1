//! ring-of-rows against the model: every property suite its capabilities allow.

use kvcheck::subject::{Capabilities, Feature, OpKind};
use kvcheck::Variant;
use ring_of_rows::RingOfRows;

#[test]
fn ring_of_rows_passes_the_suites() {
    let capabilities = Capabilities {
        variants: vec![Variant::Dense],
        ops: vec![OpKind::Write, OpKind::Rewind, OpKind::Evict, OpKind::Reset],
        features: vec![Feature::Window],
        ..Capabilities::full()
    };
    let report =
        kvcheck::engine::suite::assert_all("ring-of-rows", capabilities, |config, device| {
            Ok(Box::new(RingOfRows::new(config, device)?))
        });
    assert_eq!(report.ran.len(), 8, "{report}");
}
