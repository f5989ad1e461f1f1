//! The `config` object of a kvtrace/1 file as a `Config`, for the kvcache
//! tests that replay `tests/vectors` without depending on the harness
//! crate (which depends on this one). Vectors are trusted input: a field
//! of the wrong type panics the test that reads it.

use kvmodel::{Config, Dtype, PackedPolicy};

pub fn config_from_trace(value: &serde_json::Value) -> Config {
    let field = |name: &str| value.get(name).filter(|v| !v.is_null());
    let int =
        |name: &str, default: usize| field(name).map_or(default, |v| v.as_u64().unwrap() as usize);
    let mut config = match field("variant").and_then(|v| v.as_str()) {
        Some("packed") => Config::packed(int("capacity", 0)),
        _ => Config::dense(int("capacity", 0)),
    };
    config.batch = int("batch", 1);
    config.heads = int("heads", 1);
    config.head_dim = int("head_dim", 1);
    config.dtype =
        field("dtype").map_or(Dtype::F32, |v| serde_json::from_value(v.clone()).unwrap());
    config.sink = int("sink", 0);
    config.window = field("window").map(|v| v.as_u64().unwrap() as usize);
    config.growth = field("growth").is_some_and(|v| v.as_bool().unwrap());
    config.global_sink = int("global_sink", 0);
    config.seed = field("seed").map_or(0, |v| v.as_u64().unwrap());
    config.packed = field("packed").map(|p| {
        let defaults = PackedPolicy::default();
        PackedPolicy {
            keep_recent_chunks: p
                .get("keep_recent_chunks")
                .map_or(defaults.keep_recent_chunks, |v| {
                    v.as_u64().unwrap() as usize
                }),
            quant: p.get("quant").map_or(defaults.quant, |v| {
                serde_json::from_value(v.clone()).unwrap()
            }),
            pack_sink: p.get("pack_sink").is_some_and(|v| v.as_bool().unwrap()),
        }
    });
    config
}
