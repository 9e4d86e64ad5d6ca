#!/usr/bin/env bash
# Strong and weak scaling of the tensor-parallel modes on local-cpu ranks: the measured
# step time of `tessel run` (median of steps 2-4) next to `tessel simulate`'s prediction
# for the same plan, which prices the ops from the profile in the database (run
# `tessel profile --backend cpu` first for measured costs).
#   bench/tensor_modes_scaling.sh [build-dir] [db]
# Strong: one model and global batch on 4 and 8 ranks. Weak: the global batch grows with
# the ranks. Each plan is written to a temporary folder; nothing else is kept.
source "$(dirname "$0")/measure_common.sh" "$@"

# name tp mode depth global_batch micro_batch
cases=(
  "strong 1d-4 4 1d 1 16 4"
  "strong 2d-4 4 2d 1 16 4"
  "strong 1d-8 8 1d 1 16 4"
  "strong 2.5d-8 8 2.5d 2 16 4"
  "strong 3d-8 8 3d 1 16 4"
  "weak 1d-4 4 1d 1 8 4"
  "weak 2d-4 4 2d 1 8 4"
  "weak 1d-8 8 1d 1 16 4"
  "weak 2.5d-8 8 2.5d 2 16 4"
  "weak 3d-8 8 3d 1 16 4"
)
printf '%-7s %-7s %5s %6s %12s %12s %10s\n' scaling mode ranks batch measured simulated "meas/sim"
for entry in "${cases[@]}"; do
  read -r scaling name tp mode depth batch micro <<<"$entry"
  plan="$work/$scaling-$name.json"
  cat >"$plan" <<EOF
{"model": {"name": "gpt-cpu-bench", "layers": 4, "hidden": 256, "heads": 8, "vocab": 256, "seq_len": 64},
 "cluster": "local-cpu", "train": {"global_batch": $batch, "precision": "fp32"},
 "parallel": {"tp": $tp, "tp_mode": "$mode", "tp_depth": $depth, "micro_batch": $micro}}
EOF
  measured=$(measured_step_s "$plan" 4)
  simulated=$(simulated_s "$plan" step_time_s)
  ratio=$(awk -v m="$measured" -v s="$simulated" 'BEGIN{printf "%.2f", m / s}')
  printf '%-7s %-7s %5s %6s %10.3f s %10.3f s %10s\n' "$scaling" "$mode" "$tp" "$batch" "$measured" "$simulated" "$ratio"
done
echo "machine: $(nproc) cores; ranks beyond that share them, which the simulation does not model"
