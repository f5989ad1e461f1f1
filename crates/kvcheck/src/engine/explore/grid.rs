//! Grid mode: every small configuration, each explored to the same depth.

use kvmodel::{Config, PackedPolicy, Quant, Variant};

/// The packed policies the grid tries: the default, an aggressive one
/// (nothing kept hot, sink packed, int4) and exact cold storage.
pub const PACKED_POLICIES: [PackedPolicy; 3] = [
    PackedPolicy {
        keep_recent_chunks: 1,
        quant: Quant::Int8,
        pack_sink: false,
    },
    PackedPolicy {
        keep_recent_chunks: 0,
        quant: Quant::Int4,
        pack_sink: true,
    },
    PackedPolicy {
        keep_recent_chunks: 0,
        quant: Quant::None,
        pack_sink: false,
    },
];

/// Every configuration with capacity `1..=max_capacity`, sink
/// `0..capacity`, window `sink+1..=capacity` (`None` for `= capacity`),
/// global sink 0 or sink, heads 1..=2, and: dense with growth off and on;
/// packed with each of [`PACKED_POLICIES`]. `variant` keeps one family.
pub fn configs(max_capacity: usize, variant: Option<Variant>) -> Vec<Config> {
    let mut out = Vec::new();
    for capacity in 1..=max_capacity {
        for sink in 0..capacity {
            for window in sink + 1..=capacity {
                let mut global_sinks = vec![0, sink];
                global_sinks.dedup();
                for &global_sink in &global_sinks {
                    for heads in 1..=2 {
                        let base = Config {
                            sink,
                            window: (window < capacity).then_some(window),
                            global_sink,
                            heads,
                            ..Config::dense(capacity)
                        };
                        if variant != Some(Variant::Packed) {
                            for growth in [false, true] {
                                out.push(Config {
                                    growth,
                                    ..base.clone()
                                });
                            }
                        }
                        if variant != Some(Variant::Dense) {
                            for policy in PACKED_POLICIES {
                                out.push(Config {
                                    variant: Variant::Packed,
                                    packed: Some(policy),
                                    ..base.clone()
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}
