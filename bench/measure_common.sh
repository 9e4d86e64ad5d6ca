# Sourced by the bench scripts that set `tessel run` against `tessel simulate`:
#   source bench/measure_common.sh "$@"     (arguments: [build-dir] [db])
# Sets tessel, work (a temporary folder removed on exit) and db_args; defines
# measured_step_s PLAN STEPS (median of steps 2..STEPS of a run) and simulated_s PLAN KEY
# (a number field of `tessel simulate --json`, e.g. step_time_s).
set -euo pipefail
build_dir=${1:-build}
db=${2:-}
tessel="$build_dir/bin/tessel"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db_args=()
[[ -n "$db" ]] && db_args=(--db "$db")

measured_step_s() {
  local plan=$1 steps=$2
  "$tessel" run --plan "$plan" --steps "$steps" --db "$work/runs.db" |
    awk -v last="$steps" '$1 == "step" && $2 >= 2 && $2 <= last {print $8}' | sort -g |
    sed -n "$(( steps / 2 ))p"
}

simulated_s() {
  local plan=$1 key=$2
  "$tessel" simulate --plan "$plan" "${db_args[@]}" --json | sed -n "s/.*\"$key\": *\([0-9.e+-]*\).*/\1/p" | head -1
}
