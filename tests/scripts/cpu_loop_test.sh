#!/usr/bin/env bash
# The CPU loop (scripts/cpu-loop.sh) in small: two plans of the suite fitted, two
# predicted, and the prediction error of the predicted pair must fall after calibration
# (it fails if calibration does not help). Before that, the suite's manifest is checked
# (suite_manifest_check.py): its halves, strategies, sizes and rank counts. Leaves
# nothing behind: the loop works in a temporary database, the manifest here in a
# temporary folder.
# usage: cpu_loop_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
suite="$source_dir/examples/cpu-suite"

python3 "$(dirname "$0")/suite_manifest_check.py" "$suite/manifest.json" "$build_dir/bin/tessel"

work=$(mktemp -d "${TMPDIR:-/tmp}/tessel-cpu-loop-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
# --held-out-runs alone, or a run both fitted and held out, is one line and status 2.
refused_in_one_line() {
  local status=0
  "$build_dir/bin/tessel" calibrate "$@" >"$work/refusal.txt" 2>&1 || status=$?
  if [ "$status" -ne 2 ] || [ "$(wc -l <"$work/refusal.txt")" -ne 1 ] || ! grep -q -- "--held-out-runs" "$work/refusal.txt"; then
    echo "FAIL: tessel calibrate $* should refuse in one line naming --held-out-runs (status 2), got $status:" >&2
    cat "$work/refusal.txt" >&2
    exit 1
  fi
}
refused_in_one_line --held-out-runs 1 --db "$work/none.db"
# Small-model plans only, so that the loop takes seconds: strategies 1 and 3 fitted
# (one rank; a pipeline), 2 and 8 predicted (data parallel; full recompute).
cat >"$work/manifest.json" <<EOF
{"steps": 4,
 "calibrate": ["$suite/01-single-small.json", "$suite/03-pp2-small.json"],
 "predict": ["$suite/02-dp2-small.json", "$suite/08-recompute-full-small.json"]}
EOF
"$source_dir/scripts/cpu-loop.sh" --build-dir "$build_dir" --manifest "$work/manifest.json" | tee "$work/loop.txt"

mape_of() { sed -nE "s/^predict half, $1 calibration: MAPE +([0-9.]+)%.*/\1/p" "$work/loop.txt"; }
before=$(mape_of before)
after=$(mape_of after)
if [ -z "$before" ] || [ -z "$after" ]; then
  echo "FAIL: the loop printed no before/after MAPE of the predict half" >&2
  exit 1
fi
if ! python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) < float(sys.argv[1]) else 1)" "$before" "$after"; then
  echo "FAIL: calibration did not improve the held-out prediction: MAPE $before% before, $after% after" >&2
  exit 1
fi
echo "PASS: held-out MAPE $before% before calibration, $after% after"
