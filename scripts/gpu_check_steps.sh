#!/usr/bin/env bash
# gpu-check's steps, one per call: `gpu_check_steps.sh STEP`, run by gpu-check.sh under
# `timeout` (which stops the step's whole process group at its budget). The environment
# names the programs and folders: BIN (tessel, tessel-rank, gpu_test), TOOLS (the scripts
# folder), PLANS (the CPU suite's small plans), OUT (what comes back), WORK (scratch that
# does not), DEVICE (CUDA index), DEVICE_NAME, NUMBERS (key=value lines for the report).
set -uo pipefail
step=$1
tools=$TOOLS/gpu_check_tools.py
db=$OUT/tessel.db
# The machine's own Python, in the environment the launcher was started with.
host_python() {
  env -u OPAL_PREFIX -u OPAL_LIBDIR -u OPAL_PKGLIBDIR -u OPAL_SYSCONFDIR -u OPAL_DATADIR -u OPAL_PKGDATADIR \
    PATH="${TESSEL_ORIGINAL_PATH:-$PATH}" LD_LIBRARY_PATH="${TESSEL_ORIGINAL_LD_LIBRARY_PATH:-}" \
    "${TESSEL_PYTHON:-python3}" "$@"
}
number() { echo "$1=$2" >>"$NUMBERS"; }

# Every carried program and library resolves, and where each CUDA library came from.
libraries() {
  local status=0 file missing
  if [ -n "${BUNDLE:-}" ]; then "$BUNDLE/run" --libraries || status=1; fi
  for file in "$BIN"/* ${BUNDLE:+"$BUNDLE"/lib/*.so*}; do
    [ -f "$file" ] || continue
    missing=$(ldd "$file" 2>&1 | grep "not found")
    if [ -n "$missing" ]; then
      echo "MISSING for $(basename "$file"): $(tr -s ' \t\n' ' ' <<<"$missing")"
      status=1
    fi
  done
  [ $status -eq 0 ] && echo "every carried program and library resolves"
  return $status
}

# Every GPU test; a failure is rerun alone with CUDA_LAUNCH_BLOCKING=1 so the kernel that
# failed is the one named; a test that skips on a machine with a GPU is a finding.
gpu_tests() {
  local log=$WORK/gpu-tests.log status failed skipped name
  TESSEL_TEST_LABELS=gpu "$BIN/gpu_test" --gtest_brief=0 >"$log" 2>&1
  status=$?
  cat "$log"
  failed=$(sed -n 's/^\[  FAILED  \] \([^ ,]*\).*/\1/p' "$log" | sort -u)
  for name in $failed; do
    echo "== rerun with CUDA_LAUNCH_BLOCKING=1: $name"
    CUDA_LAUNCH_BLOCKING=1 TESSEL_TEST_LABELS=gpu "$BIN/gpu_test" --gtest_filter="$name" 2>&1 | tail -n 40
  done
  skipped=$(sed -n 's/^\[  SKIPPED \] \([^ ,]*\).*/\1/p' "$log" | sort -u | wc -l)
  number gpu_tests_failed "$(wc -w <<<"$failed")"
  number gpu_tests_skipped "$skipped"
  if [ "$skipped" -gt 0 ] && [ $status -eq 0 ]; then
    echo "gpu-check: $skipped GPU tests skipped on a machine with a GPU (their messages above say why)"
    status=3
  fi
  return $status
}

# fp32 training on the GPU equals the CPU executor, layout by layout (ranks share the GPU).
fp32_layouts() {
  local status=0 plan name
  for plan in "$PLANS"/0[1-6]-*-small.json; do
    name=$(basename "$plan" .json)
    "$BIN/tessel" run --plan "$plan" --steps 5 --backend cpu --db "$WORK/layouts.db" >"$WORK/$name.cpu" 2>&1
    "$BIN/tessel" run --plan "$plan" --steps 5 --backend cuda --db "$WORK/layouts.db" >"$WORK/$name.gpu" 2>&1
    echo "== $name"
    if host_python "$tools" compare-losses "$WORK/$name.cpu" "$WORK/$name.gpu"; then
      number "layout_$name" equal
    else
      number "layout_$name" DIFFERENT
      tail -n 5 "$WORK/$name.cpu" "$WORK/$name.gpu"
      status=1
    fi
  done
  return $status
}

# GPT-2 124M on one GPU, bf16: tessel's executor, then torch.compile of the same model.
gpt2_124m() {
  local status=0
  host_python "$tools" gpt2-plan --device-name "$DEVICE_NAME" --batch "${GPT2_BATCH:-16}" >"$WORK/gpt2-124m.json" || return 1
  echo "== tessel run (GPT-2 124M, batch ${GPT2_BATCH:-16} x 1024 tokens, bf16, fused kernels)"
  "$BIN/tessel" run --plan "$WORK/gpt2-124m.json" --steps 25 --backend cuda --db "$db" >"$WORK/gpt2.log" 2>&1
  tail -n 12 "$WORK/gpt2.log"
  host_python "$tools" throughput "$WORK/gpt2.log" --device-name "$DEVICE_NAME" >"$WORK/tessel.rate" || status=1
  cat "$WORK/tessel.rate"
  echo "== PyTorch torch.compile, same model, batch and AdamW"
  host_python "$TOOLS/../bench/torch_reference.py" --batch "${GPT2_BATCH:-16}" --device "$DEVICE" --json \
    >"$WORK/torch.json" 2>&1 || status=1
  tail -n 3 "$WORK/torch.json"
  host_python "$tools" torch-throughput "$WORK/torch.json" --device-name "$DEVICE_NAME" >"$WORK/torch.rate" || status=1
  cat "$WORK/torch.rate"
  sed -n 's/^\(tessel\|torch.compile\): /\1=/p' "$WORK/tessel.rate" "$WORK/torch.rate" |
    while IFS= read -r line; do echo "gpt2_${line%%=*}=${line#*=}" >>"$NUMBERS"; done
  return $status
}

# The GPU profile (--quick) into the database that also holds the 124M run, and its JSON.
profile() {
  "$BIN/tessel" profile --backend cuda --device "$DEVICE" --quick --db "$db" || return 1
  local device
  device=$(host_python "$tools" profile-device "$DEVICE_NAME")
  "$BIN/tessel" profile export --device "$device" --db "$db" --out "$OUT/profile-$device.json" || return 1
  "$BIN/tessel" profile show --device "$device" --db "$db"
}

# The planner's prediction of the 124M step on the measured profile, against the run.
prediction() {
  [ -f "$WORK/gpt2-124m.json" ] || { echo "no GPT-2 plan: the gpt2-124m step did not run"; return 1; }
  if [ ! -f "$db" ]; then
    echo "no measured profile (the profile step wrote none): the datasheet's prediction instead"
    "$BIN/tessel" estimate --plan "$WORK/gpt2-124m.json"
    return 1
  fi
  "$BIN/tessel" estimate --plan "$WORK/gpt2-124m.json" --db "$db" || return 1
  echo "compare op by op where tessel is built in full: tessel compare --db tessel.db --run <the 124M run>"
}

# compute-sanitizer memcheck over one small training step on the GPU.
sanitizer() {
  local sanitizer_bin
  sanitizer_bin=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$sanitizer_bin" ] || { echo "compute-sanitizer not found"; return 4; }
  "$sanitizer_bin" --tool memcheck --target-processes all --error-exitcode 9 \
    "$BIN/tessel" run --plan "$PLANS/01-single-small.json" --steps 1 --backend cuda --db "$WORK/sanitizer.db"
}

case $step in
  libraries) libraries ;;
  gpu-tests) gpu_tests ;;
  fp32-layouts) fp32_layouts ;;
  gpt2-124m) gpt2_124m ;;
  profile) profile ;;
  prediction) prediction ;;
  sanitizer) sanitizer ;;
  *) echo "gpu_check_steps: unknown step '$step'" >&2; exit 2 ;;
esac
