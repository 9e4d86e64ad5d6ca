#!/usr/bin/env bash
# Measured against predicted step time on 2 local-cpu ranks (a core each on a 2-core
# machine): the model of examples/local-cpu-gpt-small.json under five layouts; measured is
# the median of steps 2-6 of `tessel run`, simulated and analytic come from `tessel
# simulate --json` with the profile in the database (run `tessel profile --backend cpu`
# into it first for measured costs; `tessel compare --run ID` then breaks a run down).
#   bench/measured_vs_simulated.sh [build-dir] [db]
source "$(dirname "$0")/measure_common.sh" "$@"

# name | parallel
cases=(
  'dp-2|{"dp": 2, "micro_batch": 2}'
  'pp-2-1f1b|{"pp": 2, "micro_batch": 2}'
  'tp-2|{"tp": 2, "micro_batch": 2}'
  'tp-2-sequence-parallel|{"tp": 2, "tp_sequence_parallel": true, "micro_batch": 2}'
  'pp-2-full-recompute|{"pp": 2, "recompute": "full", "micro_batch": 2}'
)
printf '%-24s %10s %12s %12s %10s\n' layout measured simulated analytic "meas/sim"
for entry in "${cases[@]}"; do
  name=${entry%%|*}
  parallel=${entry#*|}
  plan="$work/$name.json"
  cat >"$plan" <<EOF
{"model": {"name": "gpt-small-cpu", "layers": 4, "hidden": 256, "heads": 4, "vocab": 4096, "seq_len": 256},
 "cluster": "local-cpu", "nodes": 1, "train": {"global_batch": 16, "precision": "fp32", "optimizer": "adamw"},
 "parallel": $parallel}
EOF
  measured=$(measured_step_s "$plan" 6)
  simulated=$(simulated_s "$plan" step_time_s)
  analytic=$(simulated_s "$plan" analytic_step_time_s)
  ratio=$(awk -v m="$measured" -v s="$simulated" 'BEGIN{printf "%.2f", m / s}')
  printf '%-24s %8.3f s %9.1f ms %9.1f ms %10s\n' "$name" "$measured" "$(awk -v s="$simulated" 'BEGIN{print s*1e3}')" \
    "$(awk -v s="$analytic" 'BEGIN{print s*1e3}')" "$ratio"
done
echo "machine: $(nproc) cores"
