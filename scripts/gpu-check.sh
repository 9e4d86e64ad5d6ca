#!/usr/bin/env bash
# gpu-check: what tessel checks on a lent GPU machine, in one command of at most 8 minutes
# on an H100 and one folder of at most 8 files (report.md, steps.log, summary.json,
# tessel.db with the measured profile and runs, profile-<device>.json). A machine without
# a GPU gets one line ("gpu-check: no GPU: <why>") and a non-zero status, and nothing runs.
# The steps (scripts/gpu_check_steps.sh), each stopped at its budget, a failing one
# reported and the next still run; one whose budget no longer fits is not started:
#   libraries, gpu-tests, fp32-layouts, gpt2-124m, profile, prediction, sanitizer
#
#   scripts/gpu-check.sh [--bundle DIR | --build-dir DIR] [--out DIR] [--device N] [--budget-s S]
#   scripts/gpu-check.sh --print-budget     the steps' budgets and their sum, then exit
# GPU_CHECK_NVIDIA_SMI names the nvidia-smi to ask (tests point it at fakes).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=""
build_dir=""
out_dir=$PWD/gpu-check-out
device=0
budget_s=480
# Seconds each step may take on an H100, estimated from what it runs (docs/GPU.md): the
# GPU tests are 79 processes, the op table's CPU references the longest; the layouts are
# 12 short runs of a 2-layer model; GPT-2 is 25 tessel steps and torch.compile's compile
# (about a minute) plus 25 steps; the quick profile is bounded at 90 s by the issue.
steps=(libraries:10 gpu-tests:130 fp32-layouts:75 gpt2-124m:120 profile:90 prediction:10 sanitizer:40)
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) build_dir=$(cd "$2" && pwd); shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --budget-s) budget_s=$2; shift 2 ;;
    --print-budget)
      total=0
      for entry in "${steps[@]}"; do echo "${entry%%:*} ${entry#*:}"; total=$((total + ${entry#*:})); done
      echo "total $total"
      exit 0 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# ---- a GPU, or one line and out ----
smi=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}
if ! command -v "$smi" >/dev/null 2>&1; then
  echo "gpu-check: no GPU: $smi not found (no NVIDIA driver on this machine)"
  exit 1
fi
if ! gpu_list=$("$smi" -L 2>&1) || ! grep -q '^GPU ' <<<"$gpu_list"; then
  echo "gpu-check: no GPU: $smi lists no device ($(head -1 <<<"$gpu_list"))"
  exit 1
fi
device_name=$("$smi" --query-gpu=name --format=csv,noheader -i "$device" 2>/dev/null | head -1)
if [ -z "$device_name" ]; then
  echo "gpu-check: no GPU: device $device is not among: $(tr '\n' ';' <<<"$gpu_list")"
  exit 1
fi

# ---- where the programs are ----
if [ -n "$bundle" ]; then
  export BIN=$bundle/bin TOOLS=$bundle/scripts PLANS=$bundle/plans BUNDLE=$bundle
else
  build_dir=${build_dir:-$root/build}
  export BIN=$build_dir/bin TOOLS=$root/scripts PLANS=$root/examples/cpu-suite BUNDLE=""
fi
for program in tessel tessel-rank gpu_test; do
  [ -x "$BIN/$program" ] || { echo "gpu-check: $BIN/$program is missing (build it, or unpack a bundle)"; exit 1; }
done
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OUT=$out_dir WORK=$work DEVICE=$device DEVICE_NAME=$device_name NUMBERS=$work/numbers
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-$device} DEVICE=0
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log=$out_dir/steps.log
: >"$log"
: >"$NUMBERS"
started=$SECONDS
failed=0
rows=()
json_steps=()

run_step() {  # run_step NAME BUDGET_S
  local name=$1 budget=$2 left=$((budget_s - (SECONDS - started))) start status outcome took
  if [ "$budget" -gt "$left" ]; then
    outcome="not run: out of time (needs $budget s, $left s left)"
    took=0
  else
    echo "gpu-check: $name (at most $budget s) ..." >&2
    printf '\n==== %s (budget %s s) ====\n' "$name" "$budget" >>"$log"
    start=$SECONDS
    timeout --kill-after=5 "$budget" bash "$TOOLS/gpu_check_steps.sh" "$name" >>"$log" 2>&1
    status=$?
    took=$((SECONDS - start))
    case $status in
      0) outcome="passed" ;;
      124|137) outcome="FAILED: stopped at its budget of $budget s"; failed=1 ;;
      3) outcome="FAILED: GPU tests skipped on a machine with a GPU"; failed=1 ;;
      4) outcome="not run: its tool is missing (see the log)" ;;
      *) outcome="FAILED (status $status)"; failed=1 ;;
    esac
    echo "gpu-check: $name: $outcome (${took} s)" >&2
  fi
  rows+=("| $name | $outcome | $took s | $budget s |")
  json_steps+=("{\"step\": \"$name\", \"outcome\": \"$outcome\", \"seconds\": $took, \"budget_s\": $budget}")
}

for entry in "${steps[@]}"; do run_step "${entry%%:*}" "${entry#*:}"; done

# ---- the report: the first lines say what failed ----
value() { sed -n "s/^$1=//p" "$NUMBERS" | tail -1; }
missing=$(sed -n 's/^MISSING for //p; s/^\(lib[^:]*\): NOT FOUND (required)/\1 not found/p' "$log" | head -5)
{
  echo "# tessel gpu-check: $device_name"
  echo
  if [ -n "$missing" ]; then
    echo "**Libraries missing:**"
    sed 's/^/- /' <<<"$missing"
    echo
  fi
  echo "- date: $date_utc, $((SECONDS - started)) s of a $budget_s s budget"
  echo "- host: $(hostname); device $device: $device_name"
  echo "- driver and memory: $("$smi" --query-gpu=driver_version,memory.total --format=csv,noheader -i "$device" 2>/dev/null | head -1)"
  echo "- CUDA toolkit: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1)"
  if [ -n "$bundle" ]; then echo "- tessel: bundle ($(head -1 "$bundle/BUILD_INFO" 2>/dev/null)); $(sed -n 3p "$bundle/BUILD_INFO" 2>/dev/null)"
  else echo "- tessel: build $build_dir ($(git -C "$root" describe --always --dirty 2>/dev/null))"; fi
  echo
  echo "| step | outcome | time | budget |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Key numbers:"
  echo "- GPU tests: $(value gpu_tests_failed) failed, $(value gpu_tests_skipped) skipped"
  echo "- fp32 on the GPU against the CPU executor: $(sed -n 's/^layout_\(.*\)=\(.*\)/\1 \2/p' "$NUMBERS" | tr '\n' ';')"
  echo "- GPT-2 124M: $(value gpt2_tessel); next to $(value gpt2_torch.compile)"
  echo
  echo "The whole log is steps.log; the database tessel.db holds the measured profile and runs."
} >"$out_dir/report.md"
{
  echo "{\"device\": \"$device_name\", \"date\": \"$date_utc\", \"budget_s\": $budget_s,"
  echo " \"steps\": [$(IFS=,; echo "${json_steps[*]}")],"
  echo " \"numbers\": {$(sed 's/"/\\"/g; s/^\([^=]*\)=\(.*\)$/"\1": "\2"/' "$NUMBERS" | paste -sd, -)}}"
} >"$out_dir/summary.json"
echo "gpu-check: report $out_dir/report.md ($(ls "$out_dir" | wc -l) files in $out_dir)"
exit $failed
