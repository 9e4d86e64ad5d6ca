#!/usr/bin/env bash
# The CPU loop, end to end: measure this machine once, train every plan of a suite with
# `tessel run`, fit the profile's calibration parameters on the suite's calibrate half
# and predict the other half before and after the fit, against what was measured.
#
# A script, not a tessel subcommand: every step is already a subcommand (profile, run,
# calibrate --runs ... --held-out-runs ...), and the loop is only their order plus a
# manifest; the numbers (median steps, before/after errors, MAPE) are all computed and
# printed by `tessel calibrate`, so the script computes none of them and cannot
# disagree with the tool. Which plan is fitted and which predicted comes from the
# manifest (examples/cpu-suite/manifest.json), fixed before any run.
#
# Exit status: 0 when every plan ran and the calibration was priced, whatever the error;
# 1 when a step failed; 2 for bad arguments. Without --db it works in a temporary
# database that it removes, so it leaves nothing behind.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/cpu-loop.sh [--build-dir DIR] [--manifest FILE] [--db FILE] [--steps N]
  --build-dir DIR   where tessel was built (default: build)
  --manifest FILE   the suite: JSON with "calibrate" and "predict" lists of plan files,
                    relative to the manifest's folder (default: examples/cpu-suite/manifest.json)
  --db FILE         keep the profile and runs in FILE (default: a temporary database, removed)
  --steps N         training steps per plan (default: the manifest's "steps", else 6)
EOF
}

fail_usage() { echo "cpu-loop: $1" >&2; usage >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=build
manifest="$root/examples/cpu-suite/manifest.json"
db=""
steps=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || fail_usage "--build-dir needs a folder"; build_dir=$2; shift 2 ;;
    --manifest) [ $# -ge 2 ] || fail_usage "--manifest needs a file"; manifest=$2; shift 2 ;;
    --db) [ $# -ge 2 ] || fail_usage "--db needs a file"; db=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || fail_usage "--steps needs a number"; steps=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) fail_usage "unknown argument '$1'" ;;
  esac
done
tessel="$build_dir/bin/tessel"
[ -x "$tessel" ] || fail_usage "--build-dir: $tessel is not built (cmake --build $build_dir --target tessel)"
[ -f "$manifest" ] || fail_usage "--manifest: $manifest: no such file"
if [ -n "$steps" ] && ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then fail_usage "--steps: a positive integer, got '$steps'"; fi

# The manifest as shell lines: "steps N", then "calibrate FILE" / "predict FILE", each
# path resolved against the manifest's folder and checked to exist.
read_manifest() {
  python3 - "$1" <<'PYTHON'
import json, os, sys
path = sys.argv[1]
def refuse(message):
    print(f"cpu-loop: {path}: {message}", file=sys.stderr)
    sys.exit(2)
try:
    manifest = json.load(open(path))
except (OSError, ValueError) as error:
    refuse(f"not a JSON manifest ({error})")
if not isinstance(manifest, dict):
    refuse("expected a JSON object with \"calibrate\" and \"predict\" lists")
steps = manifest.get("steps", 6)
if not isinstance(steps, int) or steps < 1:
    refuse(f"\"steps\" must be a positive integer, got {steps!r}")
print("steps", steps)
seen = set()
for half in ("calibrate", "predict"):
    plans = manifest.get(half)
    if not isinstance(plans, list) or not plans or not all(isinstance(p, str) for p in plans):
        refuse(f"\"{half}\" must be a non-empty list of plan files")
    for plan in plans:
        full = os.path.join(os.path.dirname(os.path.abspath(path)), plan)
        if not os.path.isfile(full):
            refuse(f"\"{half}\": {plan}: no such plan file")
        if full in seen:
            refuse(f"\"{half}\": {plan} is listed twice (a plan is fitted or predicted, not both)")
        seen.add(full)
        print(half, full)
PYTHON
}
manifest_lines=$(read_manifest "$manifest")
[ -n "$steps" ] || steps=$(sed -n 's/^steps //p' <<<"$manifest_lines")

workdir=$(mktemp -d "${TMPDIR:-/tmp}/tessel-cpu-loop.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
if [ -z "$db" ]; then db="$workdir/loop.db"; fi

started_s=$(date +%s.%N)
# Other programs on the cores stretch every measured step, and no profile predicts them:
# the load is printed at the start and the end so that a reader can tell.
cores=$(nproc)
load_line() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg) on $cores cores$( \
  awk -v c="$cores" '$1 > c { printf " (busy: other programs share the cores; measured steps include waiting for them)" }' /proc/loadavg)"; }
echo "$(load_line) at the start"
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$started_s" "$(date +%s.%N)"; }

echo "== 1. this machine's profile"
if [ -f "$db" ] && "$tessel" profile show --device local-cpu --db "$db" 2>/dev/null | head -1 | grep -qE 'source: (measured|calibrated)'; then
  echo "$db already holds a measured local-cpu profile: kept"
else
  "$tessel" profile --backend cpu --quick --db "$db" | grep -v '^profile: \['
fi

echo
echo "== 2. train every plan of the suite ($steps steps each)"
calibrate_ids=()
predict_ids=()
names="$workdir/names.txt"
while read -r half plan; do
  [ "$half" = steps ] && continue
  if ! "$tessel" run --plan "$plan" --steps "$steps" --db "$db" >"$workdir/run.txt" 2>&1; then
    echo "cpu-loop: tessel run --plan $plan failed:" >&2
    tail -5 "$workdir/run.txt" >&2
    exit 1
  fi
  id=$(sed -nE 's/^wrote run ([0-9]+) to .*/\1/p' "$workdir/run.txt" | tail -1)
  if [ -z "$id" ]; then echo "cpu-loop: tessel run --plan $plan recorded no run" >&2; exit 1; fi
  if [ "$half" = calibrate ]; then calibrate_ids+=("$id"); else predict_ids+=("$id"); fi
  head -1 "$workdir/run.txt" | sed -E "s/^run ([0-9]+): /run-\1  ${half}  $(basename "$plan")  /" | tee -a "$names"
done <<<"$manifest_lines"

join_ids() { local IFS=,; echo "$*"; }
echo
echo "== 3. fit on the calibrate half, predict the other half before and after"
if ! "$tessel" calibrate --db "$db" --device local-cpu --runs "$(join_ids "${calibrate_ids[@]}")" \
     --held-out-runs "$(join_ids "${predict_ids[@]}")" >"$workdir/calibrate.txt" 2>&1; then
  echo "cpu-loop: tessel calibrate failed:" >&2
  cat "$workdir/calibrate.txt" >&2
  exit 1
fi
cat "$workdir/calibrate.txt"

echo
echo "== summary (suite $(basename "$(dirname "$manifest")"), ${#calibrate_ids[@]} plans fitted, ${#predict_ids[@]} predicted)"
sed -nE 's/^held out, (before|after): +/predict half, \1 calibration: /p' "$workdir/calibrate.txt"
echo "suite wall time $(elapsed) s; $(load_line) at the end"
