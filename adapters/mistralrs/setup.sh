#!/usr/bin/env bash
# Builds the environment of the mistral.rs front door
# (adapters/mistralrs/subject.py): a venv (adapters/mistralrs/.venv, or
# $VENV) with mistral.rs's Python bindings, `mistralrs`. No torch, no
# numpy: the tiny test models are written by tinymodel.py with the
# standard library.
#
# Which mistralrs:
#   by default         the release's binary wheel from the package registry
#                      (the CPU build, one wheel without dependencies)
#   MISTRALRS_SRC=checkout
#                      compiled here from a mistral.rs checkout (the
#                      workspace root, with mistralrs-pyo3/), with maturin
#                      from the package registry, for the CPU, release
#                      profile. The registry carries no source of the
#                      bindings (the wheels are binary only), so this is
#                      how a patch is verified:
#   MISTRALRS_PATCH=fix.diff
#                      (with MISTRALRS_SRC) the diff applied to a copy of
#                      the checkout first (paths as in the repository,
#                      a/mistralrs-core/src/...). The copy and cargo's
#                      target directory are kept under
#                      $VENV/mistralrs-build, so another patch recompiles
#                      only the crates it changes; the first compile of
#                      the whole workspace takes about an hour on two
#                      cores.
#   MISTRALRS_CARGO_CONFIG=file
#                      cargo configuration appended to the copy's
#                      .cargo/config.toml: where the checkout's git
#                      dependencies cannot be fetched (its candle is a git
#                      revision), a [patch."<git url>"] table naming local
#                      trees of them.
# The marker records which, and a later run with other settings rebuilds.
#
# Idempotent: when the marker $VENV/KVCHECK_MISTRALRS_READY matches what
# is wanted, nothing is done. The subject's opt-in tests look for the
# marker.
#
# Environment:
#   MISTRALRS_VERSION       the mistralrs release (default 0.9.5)
#   MISTRALRS_SRC           a mistral.rs checkout to compile instead (optional)
#   MISTRALRS_PATCH         a diff for that checkout (optional)
#   MISTRALRS_COMMIT        the commit a checkout without git history is (optional)
#   MISTRALRS_CARGO_CONFIG  cargo configuration for its build (optional)
#   CARGO_TARGET_DIR        cargo's target directory (default $VENV/mistralrs-build/target)
#   BUILD_JOBS              parallel compile jobs (default 2)
#   VENV                    the venv to build or reuse (default adapters/mistralrs/.venv)
#   PYTHON                  interpreter for the venv (default python3)
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${MISTRALRS_VERSION:-0.9.5}"
venv="${VENV:-$here/.venv}"
src="${MISTRALRS_SRC:-}"
patch_file="${MISTRALRS_PATCH:-}"
cargo_config="${MISTRALRS_CARGO_CONFIG:-}"
jobs="${BUILD_JOBS:-2}"

if [ -n "$patch_file" ] && [ -z "$src" ]; then
    echo "setup: MISTRALRS_PATCH needs MISTRALRS_SRC, a mistral.rs checkout (the registry has no source of the bindings)" >&2
    exit 2
fi
if [ -n "$src" ] && [ ! -f "$src/mistralrs-pyo3/Cargo.toml" ]; then
    echo "setup: MISTRALRS_SRC=$src is not a mistral.rs checkout (no mistralrs-pyo3/Cargo.toml)" >&2
    exit 2
fi
if [ -n "$cargo_config" ] && [ ! -f "$cargo_config" ]; then
    echo "setup: MISTRALRS_CARGO_CONFIG=$cargo_config is not a file" >&2
    exit 2
fi

# shellcheck source=../setup-kit.sh
. "$here/../setup-kit.sh"
kit_venv "$venv"
venv="$(cd "$venv" && pwd)"
marker="$venv/KVCHECK_MISTRALRS_READY"
if [ -n "$src" ]; then
    kit_src
    # A tree without git history (a snapshot) can name its commit.
    src_commit="${MISTRALRS_COMMIT:-$src_commit}"
    kit_patch
    want="source: checkout $src $src_commit$patch_tag"
    if [ -n "$cargo_config" ]; then
        want="$want + cargo config $(sha256sum "$cargo_config" | cut -c1-16)"
    fi
else
    want="source: release $version"
fi

if ! kit_stale "$marker"; then
    echo "setup: mistral.rs environment already ready in $venv:"
    kit_show "$marker"
    exit 0
fi

compile_s=""
if [ -z "$src" ]; then
    echo "setup: installing mistralrs $version"
    # The binary wheel only: an sdist would compile mistral.rs where no
    # wheel fits this machine (MISTRALRS_SRC does that on purpose).
    # Reinstalled, so that it replaces a build from a checkout.
    "$vpy" -m pip install --quiet --force-reinstall --only-binary=:all: "mistralrs==$version"
else
    "$vpy" -c 'import maturin' 2>/dev/null || "$vpy" -m pip install --quiet maturin
    build="$venv/mistralrs-build"
    wanted="$build/wanted"
    rm -rf "$wanted"
    mkdir -p "$wanted"
    # The checkout's tracked files (or all of them, in a tree without git),
    # never its target directory.
    if git -C "$src" ls-files --error-unmatch mistralrs-pyo3/Cargo.toml >/dev/null 2>&1; then
        (cd "$src" && git ls-files -z | tar -cf - --null -T -) | tar -xf - -C "$wanted"
    else
        (cd "$src" && tar --exclude=./target --exclude=./.git -cf - .) | tar -xf - -C "$wanted"
    fi
    if [ -n "$patch_file" ]; then
        kit_apply "$wanted" 1 "the mistral.rs source"
    fi
    if [ -n "$cargo_config" ]; then
        mkdir -p "$wanted/.cargo"
        { echo; cat "$cargo_config"; } >>"$wanted/.cargo/config.toml"
    fi
    kit_sync "$wanted" "$build/tree"
    rm -rf "$wanted"
    echo "setup: compiling mistral.rs's Python bindings for the CPU ($jobs jobs)"
    compile_started=$(date +%s)
    rm -rf "$build/wheels"
    (cd "$build/tree" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$build/target}" CARGO_BUILD_JOBS="$jobs" \
        CARGO_PROFILE_RELEASE_DEBUG=0 nice -n 10 "$venv/bin/maturin" build --release \
        -m mistralrs-pyo3/Cargo.toml -i "$vpy" -o "$build/wheels" >"$build/build.log" 2>&1) || {
        echo "setup: the compile failed; its last lines ($build/build.log):" >&2
        tail -n 20 "$build/build.log" >&2
        exit 1
    }
    compile_s=$(( $(date +%s) - compile_started ))
    echo "setup: compiled in $compile_s s"
    "$vpy" -m pip install --quiet --force-reinstall --no-deps "$build"/wheels/mistralrs-*.whl
fi

# The bindings must load and run a tiny model here, on the CPU, offline.
echo "setup: checking that mistral.rs answers on a tiny model"
"$vpy" - "$here" <<'PY'
import os
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RUST_LOG", "warn")
sys.path.insert(0, sys.argv[1])
import mistralrs
import tinymodel

with tempfile.TemporaryDirectory() as folder:
    path = tinymodel.build(folder, "llama", 1)
    runner = mistralrs.Runner(which=mistralrs.Which.Plain(model_id=path, dtype=mistralrs.ModelDType.F32),
                              token_source="none")
    response = runner.send_chat_completion_request(mistralrs.ChatCompletionRequest(
        messages=tinymodel.text([5, 6, 7]), model="tiny", max_tokens=1, temperature=0.0))
    if response.usage.prompt_tokens != 4:
        sys.exit("setup: mistral.rs counted %d prompt tokens of 4" % response.usage.prompt_tokens)
PY

marker_lines() {
    echo "$want"
    kit_versions " " --all mistralrs
    if [ -n "$compile_s" ]; then echo "compile_s $compile_s"; fi
}
kit_write "$marker" marker_lines
kit_ready mistral.rs "$marker"
