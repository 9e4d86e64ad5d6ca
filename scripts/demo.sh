#!/usr/bin/env bash
# The demo: what tessel does today, on the embedded presets. Grows with each capability.
set -euo pipefail
build_dir=${1:-build}
tessel="$build_dir/bin/tessel"
run() { printf '\n$ tessel %s\n' "$*"; "$tessel" "$@"; }
run plan --model gpt2-1.5b --cluster dgx-h100 --nodes 4 --global-batch 512 --top 5
run plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536 --top 5

# Measure this machine (quick CPU profile) into a demo database, and see how the
# prediction for a small CPU plan moves from the shipped estimate to measured costs.
db="$build_dir/demo-profiles.db"
rm -f "$db" "$db-wal" "$db-shm"
run profile --backend cpu --quick --db "$db"
run profile show --device local-cpu --db "$db"
printf '\n$ tessel estimate --plan examples/local-cpu-gpt-small.json   # shipped (estimated) local-cpu profile\n'
TESSEL_DB="$build_dir/none.db" "$tessel" estimate --plan examples/local-cpu-gpt-small.json | head -4
run estimate --plan examples/local-cpu-gpt-small.json --db "$db"

# Replay a plan on the SimGrid model of its cluster, next to the analytic estimate, and
# let simulation re-rank the analytic top 5.
run simulate --plan examples/gpt3-13b-dgx-h100.json --trace "$build_dir/gpt3-13b-trace.json"
run plan --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256 --top 5 --refine 5

# Train a small GPT data-parallel on two CPU ranks (tessel run launches mpirun itself)
# and record the run next to the profiles.
run run --plan examples/local-cpu-gpt-small.json --steps 5 --db "$db"

# Pipeline + 1d tensor parallel with ZeRO 1 and selective recompute on four CPU ranks:
# every op is measured under the Program's op id; the measured trace opens next to the
# simulator's prediction for the same plan (chrome://tracing or Perfetto).
run run --plan examples/local-cpu-gpt-pp-tp.json --steps 5 --db "$db" --trace "$build_dir/measured-pp-tp-trace.json"
run simulate --plan examples/local-cpu-gpt-pp-tp.json --db "$db" --trace "$build_dir/predicted-pp-tp-trace.json"
# Measured against predicted, op kind by op kind, then in the GUI's compare tab (the
# newest run of the database).
run compare --run 2 --db "$db" --top 8
run gui --screenshot "$build_dir/gui-compare.png" --tab compare --db "$db"

# The plan explorer (Qt 6), rendered offscreen: a search, its Pareto scatter and table.
run gui --screenshot "$build_dir/gui-plans.png"
run gui --screenshot "$build_dir/gui-timeline.png" --tab timeline --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256
