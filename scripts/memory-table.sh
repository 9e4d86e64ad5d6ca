#!/usr/bin/env bash
# Peak memory per rank, predicted against measured, for every plan of the CPU suite and
# the examples/local-cpu-*.json plans: each plan is trained for a few steps with
# `tessel run` and set against the planner with `tessel compare --json`; the table
# (total and each category, measured/predicted) is printed from compare's "memory"
# object, so the script computes nothing the tool does not already say.
# Works in a temporary database that it removes (KEEP_JSON=DIR keeps each plan's compare
# JSON there; STEPS=N trains N steps, default 2). Exit status 1 when a run failed, 0
# otherwise (whatever the ratios: the test tests/cli's memory fidelity test asserts them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/bin/tessel}
steps=${STEPS:-2}
[ -x "$tessel" ] || { echo "memory-table: $tessel is not built (cmake --build build --target tessel)" >&2; exit 2; }
workdir=$(mktemp -d "${TMPDIR:-/tmp}/tessel-memory-table.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
plans=("$@")
[ ${#plans[@]} -gt 0 ] || plans=("$root"/examples/cpu-suite/[0-9]*.json "$root"/examples/local-cpu-*.json)
printf '%-40s %4s %10s %10s %6s  %s\n' plan rank pred_MiB meas_MiB ratio "per category (measured/predicted; params grads optim activ work)"
for plan in "${plans[@]}"; do
  if ! "$tessel" run --plan "$plan" --steps "$steps" --db "$workdir/m.db" >"$workdir/run.txt" 2>&1; then
    echo "memory-table: tessel run --plan $plan failed:" >&2; tail -5 "$workdir/run.txt" >&2; exit 1
  fi
  id=$(sed -nE 's/^wrote run ([0-9]+) to .*/\1/p' "$workdir/run.txt" | tail -1)
  "$tessel" compare --run "$id" --db "$workdir/m.db" --json "$workdir/c.json" >/dev/null
  if [ -n "${KEEP_JSON:-}" ]; then cp "$workdir/c.json" "$KEEP_JSON/$(basename "$plan")"; fi
  python3 - "$workdir/c.json" "$(basename "$plan")" <<'PYTHON'
import json, sys
memory = json.load(open(sys.argv[1]))["memory"]
for r in memory["ranks"]:
    cats = " ".join("-" if r["ratio"][c] is None else f"{r['ratio'][c]:.3f}" for c in memory["categories"])
    print(f"{sys.argv[2]:<40} {r['rank']:>4} {r['predicted_total_bytes'] / 2**20:>10.2f} "
          f"{r['measured_total_peak_bytes'] / 2**20:>10.2f} {r['ratio']['total']:>6.3f}  {cats}")
PYTHON
done
