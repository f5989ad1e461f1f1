# shellcheck shell=bash disable=SC2154
# (SC2154: `started`, `venv` and the like are the callers' variables.)
#
# Sourced by every adapters/<library>/setup.sh: the steps they share, so
# that each script keeps only what is its library's own (versions, dists,
# extra steps). Sourcing defines functions and runs nothing. The functions
# read and set these shell variables of the caller:
#
#   started     when the script began (date +%s), for the closing time
#   venv        the venv (kit_ready names it)
#   vpy         its interpreter (set by kit_venv)
#   src         a checkout to use instead of a release (made absolute)
#   patch_file  a diff to apply (made absolute by kit_patch)
#   want        what the marker's first line records (see kit_stale)
#
# The venv:
#   kit_venv VENV
#       creates VENV with $PYTHON (default python3) unless it exists; sets
#       `vpy` to its interpreter; puts this checkout's python/ (the kvcheck
#       package: kvcheck.Subject, the adapter kit kvcheck.adapter) on the
#       venv's path with the file kvcheck-checkout.pth, so that the
#       adapters import kvcheck without a sys.path line of their own.
#   torch_venv VENV TORCH_VERSION
#       kit_venv, then installs torch==TORCH_VERSION and numpy unless that
#       torch is installed, from $TORCH_INDEX when set (an index serving CPU
#       wheels, PyPI as the extra index), else from PyPI (whose torch
#       brings CUDA libraries the adapters never load).
#   kit_installed DIST VERSION
#       whether distribution DIST is installed at exactly VERSION.
#
# What to install, and whether it is there (the marker's first line):
#   kit_exclusive PREFIX
#       exits 2 when both $<PREFIX>_PATCH and $<PREFIX>_SRC are set.
#   kit_src
#       makes `src` absolute and sets `src_commit` to its work tree's HEAD
#       (else "unversioned").
#   kit_patch
#       makes `patch_file` absolute and sets `patch_tag` to
#       " + patch <first 16 hex digits of its sha256> <its path>" (empty
#       without a patch): what a marker line records of a patch.
#   kit_release_want VERSION
#       sets `want` for a release that $src may replace or $patch_file
#       patch: "source: checkout <src> <commit>", else
#       "source: release VERSION" followed by `patch_tag`.
#   kit_stale MARKER
#       true when MARKER's first line is not `want` (first run, other
#       settings): then removes MARKER, so a step that fails on the way
#       leaves no marker behind, and the caller reinstalls.
#
# Changing what is installed:
#   kit_apply DIR STRIP [WHAT]
#       applies `patch_file` under DIR (patch -pSTRIP), saying so (" to
#       WHAT" when given); a diff that does not apply fails the script.
#   kit_sync NEXT TREE
#       makes TREE hold what NEXT holds (NEXT is moved there when TREE does
#       not exist yet), copying only the files whose content differs, with
#       a new mtime, and removing the files NEXT lacks: a build tool then
#       recompiles exactly what changed (a fresh extraction would give a
#       reverted file the archive's old mtime, and the object compiled
#       from the patched one would be kept). Prints how many files changed.
#   kit_patch_site MODULE STRIP
#       kit_apply to the installed package MODULE (DIR is the site
#       directory holding it; STRIP 1 for diffs of a/MODULE/..., 2 for
#       a/src/MODULE/...), then clears its __pycache__ directories.
#   kit_install_release DIST VERSION MODULE STRIP [PIP_ARG...]
#       installs DIST from the checkout `src` when set, else the release
#       VERSION with `patch_file` applied to its package MODULE
#       (kit_patch_site MODULE STRIP); each first with --force-reinstall
#       --no-deps, which restores pristine files after a patch or a
#       checkout, then once more with PIP_ARGs (pins pip must keep) to
#       bring any dependency still missing.
#   kit_wheel DIR DIST VERSION
#       sets `wheel` to DIST's VERSION wheel in DIR, downloading it (no
#       dependencies) unless it is there.
#
# The marker and the closing line:
#   kit_versions SEP [--all] DIST...
#       prints "DIST<SEP><version>" for each DIST installed in the venv,
#       leaving out the others (with --all, one not installed fails).
#   kit_write FILE COMMAND...
#       writes what COMMAND prints to FILE through FILE.tmp, so a reader
#       never sees half a file and a failing COMMAND leaves FILE as it was.
#   kit_marker MARKER [--all] DIST...
#       kit_write of `want`, then kit_versions " " [--all] DIST...
#   kit_elapsed
#       prints the seconds since `started`.
#   kit_show FILE
#       prints FILE indented by two spaces.
#   kit_ready TITLE MARKER [NOTE]
#       prints "setup: TITLE environment ready in <venv> (<seconds> s<NOTE>):"
#       and the marker.
#
# The checkouts of libraries that are not registry releases (longlive,
# rollingforcing, lightx2v):
#   checkout_source PREFIX REQUIRED URL TITLE
#       checks that $<PREFIX>_SRC names a tree holding REQUIRED (else exits
#       2 naming URL) and sets `src` (its absolute path) and `commit`
#       ($<PREFIX>_COMMIT, else the work tree's HEAD, else "unversioned").
#   checkout_diffusers VERSION
#       (after torch_venv) installs diffusers VERSION and einops unless
#       there: the Wan model classes of the Self-Forcing lineage derive
#       from diffusers' ModelMixin.
#   checkout_copy PREFIX SUBDIR TITLE DIST...
#       (after torch_venv) copies the Python files under SUBDIR of the
#       checkout to $venv/<prefix>-src and applies $<PREFIX>_PATCH to the
#       copy (paths as in the repository, a/...), again only when the
#       marker's first line (the source, the commit and the patch's hash)
#       changes; then writes the marker $venv/KVCHECK_<PREFIX>_READY: that
#       line, `src:`, `commit:`, `patch:` and the installed version of each
#       DIST, which the adapter's subject and opt-in tests read
#       (kvcheck.adapter.Checkout, python/kvcheck/adapter.py), and the closing line.

# The checkout this kit belongs to (adapters/..).
kit_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

kit_venv() {
    if [ ! -x "$1/bin/python" ]; then
        echo "setup: creating venv $1"
        "${PYTHON:-python3}" -m venv "$1"
    fi
    vpy="$1/bin/python"
    # A .pth line is appended to sys.path after site-packages: a kvcheck
    # wheel installed in the venv still wins over the checkout's sources.
    "$vpy" - "$kit_root/python" <<'PY'
import os
import sys
import sysconfig

with open(os.path.join(sysconfig.get_paths()["purelib"], "kvcheck-checkout.pth"), "w") as f:
    f.write(sys.argv[1] + "\n")
PY
}

torch_venv() {
    local venv="$1" torch_version="$2"
    kit_venv "$venv"
    if ! kit_installed torch "$torch_version" || ! "$vpy" -c 'import numpy' 2>/dev/null; then
        echo "setup: installing torch $torch_version and numpy"
        if [ -n "${TORCH_INDEX:-}" ]; then
            # An extra index: pip's default registry stays the first, and a
            # CPU build there (torch==V+cpu) outranks the CUDA one.
            "$vpy" -m pip install --quiet --extra-index-url "$TORCH_INDEX" \
                "torch==$torch_version" numpy
        else
            "$vpy" -m pip install --quiet "torch==$torch_version" numpy
        fi
    fi
}

kit_installed() {
    "$vpy" - "$1" "$2" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
}

kit_exclusive() {
    local patch_var="${1}_PATCH" src_var="${1}_SRC"
    if [ -n "${!patch_var:-}" ] && [ -n "${!src_var:-}" ]; then
        echo "setup: $patch_var and $src_var exclude each other" >&2
        exit 2
    fi
}

kit_src() {
    src="$(cd "$src" && pwd)"
    src_commit="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unversioned)"
}

kit_patch() {
    patch_tag=""
    if [ -n "${patch_file:-}" ]; then
        patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
        patch_tag=" + patch $(sha256sum "$patch_file" | cut -c1-16) $patch_file"
    fi
}

kit_release_want() {
    if [ -n "${src:-}" ]; then
        kit_src
        want="source: checkout $src $src_commit"
    else
        kit_patch
        want="source: release $1$patch_tag"
    fi
}

kit_stale() {
    if [ "$(head -n1 "$1" 2>/dev/null)" != "$want" ]; then
        rm -f "$1"
        return 0
    fi
    return 1
}

kit_apply() {
    echo "setup: applying $patch_file${3:+ to $3}"
    patch -d "$1" -p"$2" --forward --batch < "$patch_file"
}

kit_sync() {
    local next="$1" tree="$2"
    if [ ! -d "$tree" ]; then
        mv "$next" "$tree"
        return
    fi
    "$vpy" - "$next" "$tree" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
changed = 0
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for name in files:
        a, b = os.path.join(root, name), os.path.join(dst, rel, name)
        if not os.path.isfile(b) or not filecmp.cmp(a, b, shallow=False):
            shutil.copyfile(a, b)  # a new mtime: the build recompiles what uses it
            changed += 1
for root, dirs, files in os.walk(dst, topdown=False):
    rel = os.path.relpath(root, dst)
    for name in files:
        if not os.path.exists(os.path.join(src, rel, name)):
            os.remove(os.path.join(root, name))
            changed += 1
print("setup: %d source files changed since the last build" % changed)
PY
}

kit_patch_site() {
    local site
    site="$("$vpy" -c 'import importlib.util, os, sys; print(os.path.dirname(list(importlib.util.find_spec(sys.argv[1]).submodule_search_locations)[0]))' "$1")"
    kit_apply "$site" "$2" "$site/$1"
    find "$site/$1" -name '__pycache__' -prune -exec rm -rf {} +
}

kit_install_release() {
    local dist="$1" version="$2" module="$3" strip="$4"
    shift 4
    if [ -n "${src:-}" ]; then
        echo "setup: installing $dist from $src"
        "$vpy" -m pip install --quiet --force-reinstall --no-deps "$src"
        "$vpy" -m pip install --quiet "$@" "$src"
    else
        echo "setup: installing $dist $version"
        "$vpy" -m pip install --quiet --force-reinstall --no-deps "$dist==$version"
        "$vpy" -m pip install --quiet "$@" "$dist==$version"
        if [ -n "${patch_file:-}" ]; then
            kit_patch_site "$module" "$strip"
        fi
    fi
}

# shellcheck disable=SC2012  # wheel names are plain: ls | head is enough
kit_wheel() {
    local dir="$1" dist="$2" version="$3"
    mkdir -p "$dir"
    wheel=$(ls "$dir/${dist//-/_}-$version"-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$wheel" ]; then
        echo "setup: downloading $dist==$version (no dependencies)"
        "$vpy" -m pip download --quiet --no-deps --only-binary=:all: \
            --dest "$dir" "$dist==$version"
        wheel=$(ls "$dir/${dist//-/_}-$version"-*.whl | head -n1)
    fi
}

kit_versions() {
    "$vpy" - "$@" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
sep, dists = sys.argv[1], sys.argv[2:]
required = dists[:1] == ["--all"]
for dist in dists[required:]:
    try:
        print("%s%s%s" % (dist, sep, version(dist)))
    except PackageNotFoundError:
        if required:
            raise
PY
}

kit_write() {
    local file="$1"
    shift
    "$@" > "$file.tmp"
    mv "$file.tmp" "$file"
}

_kit_marker_lines() {
    echo "$want"
    kit_versions " " "$@"
}

kit_marker() {
    local marker="$1"
    shift
    kit_write "$marker" _kit_marker_lines "$@"
}

kit_elapsed() {
    echo "$(( $(date +%s) - started ))"
}

kit_show() {
    sed 's/^/  /' "$1"
}

kit_ready() {
    echo "setup: $1 environment ready in $venv ($(kit_elapsed) s${3:-}):"
    kit_show "$2"
}

checkout_source() {
    local prefix="$1" required="$2" url="$3" title="$4"
    local var="${prefix}_SRC" commit_var="${prefix}_COMMIT"
    if [ -z "${!var:-}" ] || [ ! -f "${!var}/$required" ]; then
        echo "setup: $var must name a $title checkout (git clone $url)" >&2
        exit 2
    fi
    src="${!var}"
    kit_src
    commit="${!commit_var:-$src_commit}"
}

checkout_diffusers() {
    if ! kit_installed diffusers "$1"; then
        echo "setup: installing diffusers $1 and einops"
        "$vpy" -m pip install --quiet "diffusers==$1" einops
    fi
    "$vpy" -c 'import einops' 2>/dev/null || "$vpy" -m pip install --quiet einops
}

_checkout_marker_lines() {
    echo "$want"
    echo "src: $copy"
    echo "commit: $commit"
    if [ -n "$patch_file" ]; then echo "patch: $patch_file"; fi
    kit_versions ": " "$@"
}

checkout_copy() {
    local prefix="$1" subdir="$2" title="$3"
    shift 3
    local patch_var="${prefix}_PATCH" lower
    lower="$(echo "$prefix" | tr '[:upper:]' '[:lower:]')"
    local marker="$venv/KVCHECK_${prefix}_READY" copy="$venv/${lower}-src"
    patch_file="${!patch_var:-}"
    kit_patch
    want="source: checkout $src $commit$patch_tag"
    if kit_stale "$marker"; then
        echo "setup: copying $src to $copy"
        rm -rf "$copy"
        mkdir -p "$copy"
        # The Python sources are all the adapter imports.
        (cd "$src" && find "$subdir" -name '*.py' -not -path './.git/*' -print0 | tar -cf - --null -T -) | tar -xf - -C "$copy"
        if [ -n "$patch_file" ]; then
            kit_apply "$copy" 1
        fi
    fi
    kit_write "$marker" _checkout_marker_lines "$@"
    kit_ready "$title" "$marker"
}
