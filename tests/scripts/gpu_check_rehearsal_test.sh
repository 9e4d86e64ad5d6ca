#!/usr/bin/env bash
# Scripts.GpuCheckRehearsesOnAFakeGpuMachine: gpu-check's whole CPU side, as a lent GPU
# machine would run it, here. The bundle of this build is packed (under its 24 MiB limit),
# unpacked in an empty folder and run with a clean environment, where nvidia-smi is a
# fake answering for an H100 and the CUDA libraries exist only in a fake PyTorch wheel
# folder (the toolkit hidden), so the launcher must find them there. Without a real device
# the GPU steps fail or skip, and the report must say so step by step, with each step's
# time, in at most 8 files. Temporary folders are removed at the end.
set -u
bundle_script=$(realpath "$1")
build_dir=$(realpath "$2")
check_script=$(dirname "$bundle_script")/gpu-check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- the budget adds up to at most 8 minutes ----
total=$(bash "$check_script" --print-budget | sed -n 's/^total //p')
[ -n "$total" ] && [ "$total" -le 480 ] || fail "the steps' budgets add up to ${total:-nothing}, over 480 s"

# ---- the bundle, under its limit, unpacked where nothing else is ----
bash "$bundle_script" --from-build "$build_dir" --out "$work/tessel-gpu-bundle.tar.gz" || fail "gpu-bundle.sh failed"
mkdir "$work/machine"
tar -C "$work/machine" -xzf "$work/tessel-gpu-bundle.tar.gz" || fail "cannot unpack"
rm "$work/tessel-gpu-bundle.tar.gz"
bundle=$work/machine/tessel-gpu-bundle

# ---- a fake GPU machine: nvidia-smi answers, CUDA only in a wheel folder ----
mkdir -p "$work/fakebin" "$work/site/nvidia/cu13/lib" "$work/home"
cat >"$work/fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-fake)" ;;
  *query-gpu=name*) echo "NVIDIA H100 80GB HBM3" ;;
  *query-gpu=driver_version*) echo "580.00.00, 81559 MiB" ;;
  *) echo "fake nvidia-smi: $*" ;;
esac
EOF
chmod +x "$work/fakebin/nvidia-smi"
for library in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
  real=$(ldconfig -p | awk -v l="$library" '$1 == l {print $NF; exit}')
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -z "$real" ] && [ -e "$dir/$library" ] && real=$dir/$library
  done
  [ -n "$real" ] || fail "this machine has no $library to stand in for a wheel's"
  ln -s "$real" "$work/site/nvidia/cu13/lib/$library"
done
clean_env=(env -i HOME="$work/home" PATH="$work/fakebin:/usr/bin:/bin" PYTHONPATH="$work/site"
           TESSEL_CUDA_HOMES="$work/no-toolkit")

# ---- the launcher finds the wheel's libraries and runs the bundle's programs ----
libraries=$("${clean_env[@]}" "$bundle/run" --libraries 2>&1) || fail "run --libraries: $libraries"
[[ $libraries == *"libcudart.so.13: $work/site/nvidia/cu13/lib"* ]] || fail "cudart not found in the wheel: $libraries"
help=$("${clean_env[@]}" "$bundle/run" tessel --help 2>&1) || fail "run tessel --help: $help"
[[ $help == *"Usage: tessel"* ]] || fail "no usage line: $help"
left_out=$("${clean_env[@]}" "$bundle/run" tessel simulate --plan x.json 2>&1)
[ $? -eq 2 ] && [[ $left_out == *"not in this build"* ]] || fail "the field tessel's simulate: $left_out"
if [ -x "$bundle/openmpi/usr/bin/mpirun" ]; then
  ranks=$("${clean_env[@]}" "$bundle/run" mpirun -np 1 echo one-rank 2>&1) || fail "bundled mpirun: $ranks"
  [[ $ranks == *one-rank* ]] || fail "bundled mpirun printed: $ranks"
fi

# ---- the check itself ----
cd "$work/machine" || exit 1
"${clean_env[@]}" GPU_CHECK_NVIDIA_SMI="$work/fakebin/nvidia-smi" "$bundle/gpu-check" --out "$work/out" \
  >"$work/check.log" 2>&1
status=$?
[ $status -eq 1 ] || fail "gpu-check exit status $status without a device (want 1): $(tail -5 "$work/check.log")"
out=$work/out
files=$(find "$out" -type f | wc -l)
[ "$files" -le 8 ] || fail "$files files in the output folder (at most 8): $(ls -R "$out")"
[ -z "$(find "$out" -mindepth 2 -type d)" ] || fail "folders more than one level deep in the output"
report=$out/report.md
[ -f "$report" ] || fail "no report.md: $(ls "$out")"
[ "$(head -1 "$report")" = "# tessel gpu-check: NVIDIA H100 80GB HBM3" ] || fail "report's first line: $(head -1 "$report")"
for step in libraries gpu-tests fp32-layouts gpt2-124m profile prediction sanitizer; do
  grep -qE "^\| $step \| .* \| [0-9]+ s \| [0-9]+ s \|$" "$report" || fail "no timed row for $step: $(cat "$report")"
done
grep -q "^| libraries | passed |" "$report" || fail "libraries did not pass: $(grep -A3 '==== libraries' "$out/steps.log")"
grep -q "^| gpu-tests | FAILED: GPU tests skipped on a machine with a GPU |" "$report" ||
  fail "gpu-tests should report its skips: $(grep '| gpu-tests' "$report")"
grep -q "^| fp32-layouts | FAILED" "$report" || fail "fp32-layouts passed without a device"
[ "$(grep -c "^losses: 5 CPU steps and 0 GPU steps" "$out/steps.log")" -eq 6 ] ||
  fail "the six layouts' CPU runs did not all train 5 steps: $(grep -A8 '==== fp32' "$out/steps.log")"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert len(s["steps"]) == 7, s' "$out/summary.json" ||
  fail "summary.json: $(cat "$out/summary.json")"
echo "ok: bundle, launcher and report rehearsed ($files files; $(grep -c FAILED "$report") steps failed as they must)"
