use super::*;
use crate::config::PackedPolicy;
use crate::outcome::ErrorKind;

/// docs/contract.md §3 write: step 4 comes before step 6, so a rewrite
/// of a current chunk with an evicted position is `unsupported`. No op
/// sequence evicts part of the current chunk (only an append evicts,
/// and never its own positions), so the state is set up directly.
#[test]
fn rewrite_of_a_partly_evicted_current_chunk_is_unsupported() {
    let config = Config {
        packed: Some(PackedPolicy {
            keep_recent_chunks: 1,
            quant: Quant::None,
            pack_sink: false,
        }),
        ..Config::packed(8)
    };
    let mut model = Model::new(&config).unwrap();
    model.write(0, &Write::new(0, 2)).unwrap();
    model.write(1, &Write::new(2, 3)).unwrap();
    assert!(model.write(2, &Write::new(2, 3)).is_ok());
    model.resident.remove(&3);
    let before = model.clone();
    let err = model.write(3, &Write::new(2, 3)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(model, before);
}
