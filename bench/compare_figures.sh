#!/usr/bin/env bash
# Prints every planner and simulator figure two builds give for the same inputs, side by
# side, and says whether they are identical: the check a refactoring must pass ("behaviour
# unchanged"). The search's wall time is the one line allowed to differ.
#   bench/compare_figures.sh OLD_TESSEL NEW_TESSEL
# Both binaries read the shipped profiles only (an empty database), and the examples of
# this checkout. Searches run on one thread: before 0348fc9 a tie at the --top cut was
# broken by thread timing (with one thread, by the order the total order now gives on
# any thread count), so older builds compare only that way.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_TESSEL NEW_TESSEL" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
figures() {
  local tessel=$1 out=$2
  mkdir -p "$out"
  export TESSEL_DB="$work/empty.db"
  "$tessel" plan --model gpt2-1.5b --cluster dgx-h100 --nodes 4 --global-batch 512 --top 20 --threads 1 > "$out/plan-gpt2-1.5b.txt"
  "$tessel" plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536 --top 20 --threads 1 > "$out/plan-gpt3-175b.txt"
  "$tessel" plan --model llama2-70b --cluster dgx-h100 --nodes 16 --global-batch 1024 --top 20 --threads 1 > "$out/plan-llama2-70b.txt"
  for plan in "$root"/examples/*.json "$root"/examples/simulator/*.json; do
    name=$(basename "$plan" .json)
    "$tessel" estimate --plan "$plan" --json > "$out/estimate-$name.json"
    "$tessel" simulate --plan "$plan" --json | grep -v simulation_wall_s > "$out/simulate-$name.json"
  done
  sed -i '/^searched .* plans in /s/ in [0-9.]* ms/ in (time) ms/' "$out"/plan-*.txt
}
figures "$1" "$work/old"
figures "$2" "$work/new"
if diff -r "$work/old" "$work/new"; then
  echo "identical: $(ls "$work/new" | wc -l) outputs (3 searches, $(ls "$root"/examples/*.json "$root"/examples/simulator/*.json | wc -l) plans estimated and simulated)"
else
  echo "figures differ (above)"
  exit 1
fi
