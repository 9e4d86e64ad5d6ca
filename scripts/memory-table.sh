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
  python3 - "$workdir/c.json" "$(basename "$plan")" "$workdir/runtimes" <<'PYTHON'
import json, sys
memory = json.load(open(sys.argv[1]))["memory"]
for r in memory["ranks"]:
    cats = " ".join("-" if r["ratio"][c] is None else f"{r['ratio'][c]:.3f}" for c in memory["categories"])
    print(f"{sys.argv[2]:<40} {r['rank']:>4} {r['predicted_total_bytes'] / 2**20:>10.2f} "
          f"{r['measured_total_peak_bytes'] / 2**20:>10.2f} {r['ratio']['total']:>6.3f}  {cats}")
    # The runtime a rank adds (process peak less the trainer's tensors); an offload
    # plan's pinned host states are in its process too, so it is kept apart.
    if not r["measured_host_bytes"]:
        open(sys.argv[3], "a").write(f"{r['runtime_overhead_bytes']}\n")
PYTHON
done
# The figure the CPU profile's workspace_bytes (cuda_libraries_bytes for the difference
# a build linking the CUDA libraries makes) is set from: profiles/data/local-cpu.json.
python3 - "$workdir/runtimes" <<'PYTHON'
import statistics, sys
values = sorted(float(v) / 2**20 for v in open(sys.argv[1]))
print(f"runtime per rank (process peak less the trainer's tensors, offload apart): {values[0]:.1f}-{values[-1]:.1f} MiB, "
      f"median {statistics.median(values):.1f} MiB over {len(values)} ranks")
PYTHON
