# Sourced by the setup.sh of the adapters whose library is a source
# checkout rather than a registry release (longlive, rollingforcing,
# lightx2v). Two steps around the caller's own installs:
#
#   checkout_source PREFIX REQUIRED URL TITLE
#       checks that $<PREFIX>_SRC names a tree holding REQUIRED (else exits
#       2 naming URL) and sets `src` (its absolute path) and `commit`
#       ($<PREFIX>_COMMIT, else the work tree's HEAD, else "unversioned").
#   checkout_diffusers VERSION
#       (after torch_venv) installs diffusers VERSION and einops unless
#       there: the Wan model classes of the Self-Forcing lineage derive
#       from diffusers' ModelMixin.
#   checkout_copy PREFIX SUBDIR TITLE DIST...
#       (after torch_venv, which sets `venv` and `vpy`) copies the Python
#       files under SUBDIR of the checkout to $venv/<prefix>-src and applies
#       $<PREFIX>_PATCH to the copy (paths as in the repository, a/...),
#       again only when the marker's first line (the source, the commit and
#       the patch's hash) changes; then writes the marker
#       $venv/KVCHECK_<PREFIX>_READY: that line, `src:`, `commit:`, `patch:`
#       and the installed version of each DIST, which the adapter's subject
#       and opt-in tests read (adapters/subject_support.py, Checkout).
#
# The caller sets `started` (date +%s) for the time it prints.
checkout_source() {
    local prefix="$1" required="$2" url="$3" title="$4"
    local var="${prefix}_SRC" commit_var="${prefix}_COMMIT"
    if [ -z "${!var:-}" ] || [ ! -f "${!var}/$required" ]; then
        echo "setup: $var must name a $title checkout (git clone $url)" >&2
        exit 2
    fi
    src="$(cd "${!var}" && pwd)"
    commit="${!commit_var:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unversioned)}"
}

checkout_diffusers() {
    local version="$1"
    if ! "$vpy" - "$version" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(0 if version("diffusers") == sys.argv[1] else 1)
PY
        echo "setup: installing diffusers $version and einops"
        "$vpy" -m pip install --quiet "diffusers==$version" einops
    fi
    "$vpy" -c 'import einops' 2>/dev/null || "$vpy" -m pip install --quiet einops
}

checkout_copy() {
    local prefix="$1" subdir="$2" title="$3"
    shift 3
    local patch_var="${prefix}_PATCH" lower
    local patch_file="${!patch_var:-}"
    lower="$(echo "$prefix" | tr '[:upper:]' '[:lower:]')"
    local marker="$venv/KVCHECK_${prefix}_READY" copy="$venv/${lower}-src" want
    if [ -n "$patch_file" ]; then
        patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
        want="source: checkout $src $commit + patch $(sha256sum "$patch_file" | cut -c1-16) $patch_file"
    else
        want="source: checkout $src $commit"
    fi
    if [ "$(head -n1 "$marker" 2>/dev/null)" != "$want" ]; then
        rm -f "$marker"
        echo "setup: copying $src to $copy"
        rm -rf "$copy"
        mkdir -p "$copy"
        # The Python sources are all the adapter imports.
        (cd "$src" && find "$subdir" -name '*.py' -not -path './.git/*' -print0 | tar -cf - --null -T -) | tar -xf - -C "$copy"
        if [ -n "$patch_file" ]; then
            echo "setup: applying $patch_file"
            patch -d "$copy" -p1 --forward --batch < "$patch_file"
        fi
    fi
    {
        echo "$want"
        echo "src: $copy"
        echo "commit: $commit"
        if [ -n "$patch_file" ]; then echo "patch: $patch_file"; fi
        "$vpy" - "$@" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for dist in sys.argv[1:]:
    try:
        print("%s: %s" % (dist, version(dist)))
    except PackageNotFoundError:
        pass
PY
    } > "$marker.tmp"
    mv "$marker.tmp" "$marker"
    echo "setup: $title environment ready in $venv ($(( $(date +%s) - started )) s):"
    sed 's/^/  /' "$marker"
}
