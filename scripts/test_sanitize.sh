#!/usr/bin/env bash
# `make test-sanitize`: an AddressSanitizer + UndefinedBehaviorSanitizer build in a folder of
# its own (the normal build stays uninstrumented), then the unit test suites that do not
# launch MPI, run directly, and one 2-rank `tessel run` (mpirun, two instrumented ranks).
# Any sanitizer report fails the run (-fno-sanitize-recover, halt_on_error). CUDA is left
# out (host code only; no GPU here), and with it the one test that expects the CUDA
# backend wherever nvcc is. Leak checking is on for the test suites and off for the MPI
# run, whose library keeps its allocations until exit by design. The run uses tessel-field
# (the same run command without the GUI and simulator, which would only add compile time
# here). Left out: tests that repeat the code of shorter ones at length (200-step
# convergence runs, the op table's device-sized shapes, whose regular shapes run here).
# Usage: scripts/test_sanitize.sh [--build-dir build-sanitize]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=build-sanitize
[ "${1:-}" = "--build-dir" ] && build_dir=$2
scripts/install-deps.sh
suites=(core_test profiles_test planner_test simulator_test kernels_test executor_test gpu_profiler_test interop_test
        token_data_test)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DTESSEL_WITH_CUDA=OFF -DTESSEL_BUILD_BENCH=OFF "${launcher[@]}" | grep "tessel:" || true
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${suites[@]}" tessel-field tessel-rank

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Each test in a process of its own, as ctest runs them: the simulator's tests share
# SimGrid's process-wide state and only hold when each starts fresh.
tests_of() {  # the full names of a suite's tests, one a line
  "$build_dir/bin/$1" --gtest_list_tests | awk '/^[^ ]/ {suite = $1; next} /^  / {print suite $1}'
}
run_one() {  # run_one SUITE TEST: silent when clean; the log's first finding otherwise
  local log="$build_dir/sanitize-logs/${2//\//_}.log"
  if "$build_dir/bin/$1" --gtest_filter="$2" >"$log" 2>&1; then rm -f "$log"; else echo "$2"; fi
}
export -f run_one
export build_dir
rm -rf "$build_dir/sanitize-logs"
mkdir -p "$build_dir/sanitize-logs"
left_out='Build\.CudaBackendWhereTheToolkitIs|.*\.LossHalvesWithin200StepsOnTheSyntheticCorpus|.*DeviceShapesRunOnTheCpu/.*'
failed=()
for suite in "${suites[@]}"; do
  mapfile -t names < <(tests_of "$suite" | grep -vxE "$left_out")
  mapfile -t bad < <(printf '%s\n' "${names[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$0" "$1"' "$suite" {})
  if [ ${#bad[@]} -eq 0 ]; then
    echo "test-sanitize: $suite clean (${#names[@]} tests)"
  else
    failed+=("$suite")
    first="$build_dir/sanitize-logs/${bad[0]//\//_}.log"
    echo "test-sanitize: $suite: ${#bad[@]} of ${#names[@]} failed, first ${bad[0]}: $(grep -m1 -E 'ERROR: |runtime error|Failure' "$first" || tail -1 "$first")"
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ASAN_OPTIONS=halt_on_error=1:detect_leaks=0 "$build_dir/bin/tessel-field" run --plan examples/local-cpu-gpt-small.json \
    --steps 2 --db "$work/runs.db" >"$build_dir/sanitize-logs/tessel-run.log" 2>&1 </dev/null; then
  echo "test-sanitize: 2-rank tessel run clean"
else
  failed+=("tessel run")
  echo "test-sanitize: 2-rank tessel run FAILED: $(grep -m1 -E 'ERROR: |runtime error|error' "$build_dir/sanitize-logs/tessel-run.log" || tail -1 "$build_dir/sanitize-logs/tessel-run.log")"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-sanitize: failed: ${failed[*]} (logs: $build_dir/sanitize-logs/)"
  exit 1
fi
echo "test-sanitize: clean: ${suites[*]} and a 2-rank tessel run"
