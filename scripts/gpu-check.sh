#!/usr/bin/env bash
# gpu-check: everything tessel can check on a lent GPU machine, in one command and one
# report. It asks the driver for a GPU before anything else, so a machine without one
# gets one line ("gpu-check: no GPU: <why>") and a non-zero status, and nothing runs.
# Then, on a bundle (scripts/gpu-bundle.sh; the GPU machine cannot build tessel) or a
# build folder: the GPU tests (ctest label `gpu`), the GPU profiler into a database
# (and its JSON export), the executor benchmark, and the PyTorch reference (the same
# small GPT in bf16, a baseline measured in the same run). Each step's output goes into
# one markdown report with the device name and the date; a failing step is reported
# and the others still run. Exit status: 0 when every step passed, 1 otherwise.
#
#   scripts/gpu-check.sh [--bundle DIR | --build-dir DIR] [--out DIR] [--quick] [--device N]
# GPU_CHECK_NVIDIA_SMI names the nvidia-smi to ask (tests point it at a missing file).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=""
build_dir=""
out_dir=$PWD/gpu-check-out
quick=""
device=0
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    --quick) quick=--quick; shift ;;
    --device) device=$2; shift 2 ;;
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

# ---- where the binaries are ----
if [ -n "$bundle" ]; then
  bin=$bundle/bin
  reference=$bundle/bench/torch_reference.py
else
  build_dir=${build_dir:-$root/build-gpu}
  bin=$build_dir/bin
  reference=$root/bench/torch_reference.py
  if [ ! -x "$bin/tessel" ]; then
    echo "gpu-check: building into $build_dir" >&2
    "$root/scripts/build.sh" "$build_dir" >&2 || { echo "gpu-check: the build failed (on a machine without Debian's -dev packages use scripts/gpu-bundle.sh)"; exit 1; }
  fi
fi
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
slug=$(tr -c 'A-Za-z0-9\n' '-' <<<"$device_name" | tr -s '-')
report=$out_dir/gpu-check-$(date -u +%Y%m%d-%H%M%S)-${slug%-}.md
log=$out_dir/steps
mkdir -p "$log"
failed=0
summary=()

# run_step NAME COMMAND...: runs it, keeps its output for the report, notes the outcome.
run_step() {
  local name=$1
  shift
  echo "gpu-check: $name ..." >&2
  local start=$SECONDS
  "$@" >"$log/$name.out" 2>&1
  local status=$?
  local took=$((SECONDS - start))
  if [ $status -eq 0 ]; then
    summary+=("| $name | passed | ${took} s |")
  else
    summary+=("| $name | FAILED (status $status) | ${took} s |")
    failed=1
  fi
  echo "gpu-check: $name: status $status (${took} s)" >&2
  return $status
}

# The GPU tests: ctest -L gpu in a build folder; in a bundle the executables and
# filters its gpu-tests.txt lists (ctest's files name the build machine's paths).
gpu_tests() {
  if [ -z "$bundle" ]; then
    ctest --test-dir "$build_dir" -L gpu --no-tests=error --output-on-failure
    return
  fi
  [ -s "$bundle/gpu-tests.txt" ] || { echo "the bundle lists no GPU tests (gpu-tests.txt is empty)"; return 1; }
  local status=0 executable filter
  while read -r executable filter; do
    echo "== $executable --gtest_filter=$filter"
    "$bin/$executable" --gtest_filter="$filter" --gtest_brief=0 || status=1
  done <"$bundle/gpu-tests.txt"
  return $status
}

# A GPU test that skips on a GPU machine is a finding (its message says why): the step fails.
gpu_tests_none_skipped() {
  gpu_tests
  local status=$? skipped
  skipped=$(grep -c -e '^\[  SKIPPED \] .*(' -e '\*\*\*Skipped' "$log/gpu-tests.out" 2>/dev/null)
  if [ "${skipped:-0}" -gt 0 ]; then
    echo "gpu-check: $skipped GPU tests skipped on a machine with a GPU (see their messages above)"
    [ $status -eq 0 ] && status=3
  fi
  return $status
}

db=$out_dir/profile.db
run_step gpu-tests gpu_tests_none_skipped
run_step gpu-profile "$bin/tessel" profile --backend cuda --device "$device" $quick --db "$db"
profiled=$(sed -n 's/.* as device \([^ ]*\)$/\1/p' "$log/gpu-profile.out" | tail -1)
if [ -n "$profiled" ]; then
  run_step profile-export "$bin/tessel" profile export --device "$profiled" --db "$db" --out "$out_dir/profile-$profiled.json"
  "$bin/tessel" profile show --device "$profiled" --db "$db" >"$log/profile-show.out" 2>&1
fi
# The benchmark takes no --help (it would run its CPU steps for minutes): its binary is
# searched for the option its GPU mode will parse.
if [ -x "$bin/tessel_bench_executor" ] && grep -qa -- '--backend' "$bin/tessel_bench_executor"; then
  run_step executor-bench "$bin/tessel_bench_executor" --backend cuda
elif [ -x "$bin/tessel_bench_executor" ]; then
  echo "tessel_bench_executor has no GPU mode yet (no --backend option): not run" >"$log/executor-bench.out"
  summary+=("| executor-bench | not run: no GPU mode yet | |")
else
  echo "tessel_bench_executor is not in $bin: not run" >"$log/executor-bench.out"
  summary+=("| executor-bench | not run: not built | |")
fi
run_step torch-reference python3 "$reference" --device "$device" --json

# ---- the report ----
section() {
  local title=$1 file=$2
  [ -f "$file" ] || return 0
  printf '\n## %s\n\n```\n' "$title"
  tail -c 60000 "$file"
  printf '```\n'
}
{
  echo "# tessel gpu-check: $device_name"
  echo
  echo "- date: $date_utc"
  echo "- host: $(hostname)"
  echo "- device $device: $device_name"
  echo "- driver: $("$smi" --query-gpu=driver_version,memory.total --format=csv,noheader -i "$device" 2>/dev/null | head -1)"
  echo "- CUDA toolkit: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1)"
  if [ -n "$bundle" ]; then echo "- tessel: bundle $bundle ($(head -1 "$bundle/BUILD_INFO" 2>/dev/null))"; else echo "- tessel: build $build_dir ($(git -C "$root" describe --always --dirty 2>/dev/null))"; fi
  echo "- profile database: $db${profiled:+ (device $profiled, JSON: profile-$profiled.json)}"
  echo "- not measured: see the profile's meta \`not_measured\` (\`tessel profile show\` prints it)"
  echo
  echo "| step | outcome | time |"
  echo "|---|---|---|"
  printf '%s\n' "${summary[@]}"
  echo
  echo "GPU devices: $(tr '\n' ';' <<<"$gpu_list")"
  echo
  echo "Key numbers:"
  echo "- GPU profile: $(grep -h '^measured ' "$log/gpu-profile.out" 2>/dev/null || echo 'none (see below)')"
  echo "- PyTorch reference: $(python3 -c 'import json,sys; r=json.loads([l for l in sys.stdin.read().splitlines() if l.startswith("{")][-1]); print("%.2f ms/step, %.0f tokens/s, %d parameters, torch %s on %s" % (r["step_s"] * 1e3, r["tokens_per_s"], r["parameters"], r["torch"], r["device"]))' <"$log/torch-reference.out" 2>/dev/null || echo 'none (see below)')"
  section "GPU tests" "$log/gpu-tests.out"
  section "GPU profile" "$log/gpu-profile.out"
  section "Profile as the planner sees it" "$log/profile-show.out"
  section "Executor benchmark" "$log/executor-bench.out"
  section "PyTorch reference (same run)" "$log/torch-reference.out"
} >"$report"
echo "gpu-check: report $report"
exit $failed
