#!/usr/bin/env bash
# What kvcheck costs a crate that checks its cache with it: a crate with
# candle-nn, built from a fresh target directory (`cargo test --no-run`,
# 2 jobs), against the same crate with kvcheck as a dev-dependency, with
# and without its default features, and with the profile docs/README.md's
# "From Rust" recommends; then the time of its one-call test at both
# profiles. Prints one line per measurement (docs/performance.md,
# "Building kvcheck into a crate"). Needs network access for the first
# `cargo fetch`; nothing is installed outside the scratch folder.
set -euo pipefail
unset RUST_BACKTRACE
checkout="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${BUILD_COST_DIR:-$(mktemp -d)}"
echo "scratch folder: $scratch"

crate() { # name, dev-dependency line or empty, extra Cargo.toml text
    local dir="$scratch/$1"
    mkdir -p "$dir/src" "$dir/tests"
    cat > "$dir/src/lib.rs" <<'RS'
//! A crate that ships a KV cache on candle-nn.
pub use candle_nn::kv_cache::RotatingKvCache;

/// A sliding-window cache of `window` rows along dim 2.
pub fn cache(window: usize) -> RotatingKvCache {
    RotatingKvCache::new(2, window)
}
RS
    {
        printf '[package]\nname = "mycache"\nversion = "0.1.0"\nedition = "2021"\n[workspace]\n'
        printf '[dependencies]\ncandle-core = "=0.11.1"\ncandle-nn = "=0.11.1"\n'
        if [ -n "$2" ]; then
            printf '[dev-dependencies]\n%s\n' "$2"
            printf 'kvcache = { path = "%s/crates/kvcache" }\n' "$checkout"
            printf 'kvmodel = { path = "%s/crates/kvmodel" }\n' "$checkout"
        fi
        printf '%b' "$3"
    } > "$dir/Cargo.toml"
    if [ -n "$2" ]; then
        cat > "$dir/tests/t.rs" <<'RS'
use kvcheck::subject::{Capabilities, Factory, ReferenceCache};

#[test]
fn the_reference_cache_keeps_the_contract() {
    let factory = Factory::new("naive", Capabilities::full(), |config, device| {
        Ok(Box::new(ReferenceCache::new(config, device)?))
    });
    let settings = kvcheck::CheckSettings::default().seed(1).cases(256);
    println!("{}", kvcheck::check(factory, &settings).unwrap());
}
RS
    else
        printf '#[test]\nfn builds() {\n    let _ = mycache::cache(4);\n}\n' > "$dir/tests/t.rs"
    fi
    (cd "$dir" && cargo generate-lockfile -q && cargo fetch -q)
}

lean="kvcheck = { path = \"$checkout/crates/kvcheck\", default-features = false }"
full="kvcheck = { path = \"$checkout/crates/kvcheck\" }"
fast='\n[profile.dev.package."*"]\nopt-level = 3\n'
crate base "" ""
crate lean "$lean" ""
crate full "$full" ""
crate base-o3 "" "$fast"
crate lean-o3 "$lean" "$fast"

seconds() { # folder, command...
    local dir="$1"; shift
    local start end
    start=$(date +%s.%N)
    (cd "$scratch/$dir" && CARGO_TARGET_DIR="$scratch/target-$dir" CARGO_BUILD_JOBS=2 "$@" > /dev/null)
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

for dir in base lean full base-o3 lean-o3; do
    echo "build $dir: $(seconds "$dir" cargo test --no-run -q) s"
done
for dir in lean lean-o3; do
    echo "test $dir (kvcheck::check, 256 cases per profile): $(KVCHECK_JOBS=2 seconds "$dir" cargo test -q) s"
done
