# shellcheck shell=bash disable=SC2154
# (SC2154: `venv` and the like are the callers' variables.)
#
# Sourced by the front-door campaign scripts (adapters/*/…_campaign.sh):
# the steps they share, so that each keeps only its rows. Sourcing defines
# functions and runs nothing.
#
#   campaign_init SCRIPT MARKER SETUP OUT TIME
#       goes to the repository root, sets `kvcheck` ($KVCHECK, default
#       target/debug/kvcheck, built when absent), `time` ($TIME, default
#       TIME), `seed` ($SEED, default 1) and `out` ($OUT, default OUT);
#       exits 2 naming SETUP unless MARKER (a setup's marker file, relative
#       to the root) exists.
#   campaign_selected NAME [ROW...]
#       true when no ROW is given or NAME is one of them.
#   campaign_run LABEL SUBJECT SUBJECT_TIMEOUT
#       `kvcheck run --profile growth --keep-going --max-tests 300` on
#       SUBJECT for `time` seconds with `seed` and one job, writing the run's
#       output, JSON report and minimized traces under $out/LABEL; prints
#       one summary line (exit status, seconds, the run's verdict).
#   campaign_table
#       the campaign table of every run under $out (also $out/table.md).

campaign_init() {
    local script="$1" marker="$2" setup="$3"
    cd "$(dirname "${BASH_SOURCE[0]}")/.."
    kvcheck="${KVCHECK:-target/debug/kvcheck}"
    time="${TIME:-$5}"
    seed="${SEED:-1}"
    out="${OUT:-$4}"
    if [ ! -f "$marker" ]; then
        echo "$script: no environment at $(dirname "$marker"): run $setup first" >&2
        exit 2
    fi
    if [ ! -x "$kvcheck" ]; then
        cargo build --quiet -p kvcheck --bin kvcheck
    fi
    mkdir -p "$out"
}

campaign_selected() {
    local name="$1"
    shift
    [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]
}

campaign_run() {
    local label="$1" subject="$2" timeout="$3" started status=0
    rm -rf "${out:?}/$label"
    mkdir -p "$out/$label"
    started=$(date +%s)
    "$kvcheck" run --profile growth --keep-going --max-tests 300 --time "$time" --seed "$seed" \
        --jobs 1 --subject-timeout "$timeout" --min-judged 0 --subject "$subject" \
        --out "$out/$label/traces" --json "$out/$label/report.json" >"$out/$label/output.txt" 2>&1 || status=$?
    echo "$label: exit $status in $(( $(date +%s) - started )) s: $(grep -E '^(no divergence|[0-9]+ distinct)|cases,' "$out/$label/output.txt" | tr '\n' ' ')"
}

campaign_table() {
    python3 scripts/campaign_table.py "$out"
}
